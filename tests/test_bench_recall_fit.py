"""The offline study of what a message keeps of its recall (bench/recall_fit.py), and the
memory benchmark's dump it reads (bench/memory/recall_dump.py)."""

from __future__ import annotations

import json

import pytest

from bench import recall_fit as fit
from halo_weave.memory import relevance

from test_bench_memory import data_file  # noqa: F401  (the tiny LoCoMo-format file)


def _para(turn, tokens, cosine, share, score=None, neighbour=0.0):
    return {"chunk": turn * 10, "turn": turn, "tokens": tokens, "cosine": cosine, "word_share": share,
            "match_score": score, "neighbour_score": neighbour, "text": f"paragraph {turn}"}


def _question(paragraphs, evidence, live=(), conversation="conv-a", category=4, framing=5):
    return {"method": "recent-kept", "conversation": conversation, "category": category,
            "question": "What was asked?", "evidence": list(evidence), "live_evidence": list(live), "paragraphs": paragraphs,
            "framing": {str(p["turn"]): framing for p in paragraphs}}


def test_a_cap_counts_each_turns_framing_once_and_takes_what_still_fits():
    q = _question([_para(1, 50, 0.9, 1.0), _para(1, 40, 0.8, 0.5), _para(2, 200, 0.7, 0.5), _para(3, 30, 0.1, 0.0)],
                  evidence=[3])
    kept = fit.keep_cap(q, [0, 1, 2, 3], 130)
    assert kept == [0, 1, 3], "the 205-token paragraph does not fit; the last one still does"
    assert fit.recalled_tokens(q, kept) == 50 + 40 + 30 + 5 + 5, "turn 1's framing once, turn 3's once"
    assert fit.evidence_recall(q, kept) == 1.0
    assert fit.keep_cap(q, [2, 0], 10) == [2], "the first paragraph is kept whatever it costs"


def test_the_apps_order_is_the_relevance_modules_fusion():
    paras = [_para(1, 20, 0.1, 0.0, 0.9), _para(2, 20, 0.8, 0.5), _para(3, 20, 0.5, 1.0, 0.6), _para(4, 20, 0.9, 0.5)]
    q = _question(paras, evidence=[4])
    ids = [0, 1, 2, 3]
    expected = relevance.fused([ids, relevance.by_score(ids, [p["cosine"] for p in paras]),
                                relevance.by_score(ids, [p["word_share"] for p in paras])])
    assert fit.fused_order(q) == expected
    assert fit.keep_share(q, expected, 0.5) == expected[:2]


def test_the_study_ranks_the_evidence_and_counts_what_was_live(tmp_path):
    # Two conversations (the learned orders are fitted on one and ranked on the other): the
    # evidence is the paragraph that says most of what was asked, wherever the plan put it.
    lines = []
    for conversation in ("conv-a", "conv-b"):
        for n in range(12):
            paras = [_para(t, 30, 0.2 + 0.01 * t, 0.1, 0.5) for t in range(1, 5)]
            evidence_turn = 1 + n % 4
            paras[evidence_turn - 1] = _para(evidence_turn, 30, 0.9, 0.9, 0.5)
            lines.append(_question(paras, evidence=[evidence_turn, 99], live=[99], conversation=conversation))
    path = tmp_path / "dump.jsonl"
    path.write_text("".join(json.dumps(q) + "\n" for q in lines))

    rows = fit.study(fit.load(str(path))["recent-kept"], learned=True)
    assert rows["everything recalled"]["evidence_recall"] == 1.0
    assert rows["relevance (the app's), share 0.50"]["evidence_recall"] == 1.0
    assert rows["plan, share 0.50"]["evidence_recall"] == 0.75, "the plan gives back half: the live turn still counts"
    for kind in ("trees", "logistic"):
        assert rows[f"learned: {kind}, share 0.50"]["evidence_recall"] == 1.0, kind
    assert rows["learned: logistic, share 0.50"]["questions"] == 24


def test_the_dump_of_a_real_recall_gives_the_benchmarks_figures(data_file, tmp_path, capsys):  # noqa: F811
    """bench_memory's recall-only run with --dump-recall: replayed offline at the app's
    order and share, the dump gives the recall and recalled tokens the run reported."""
    pytest.importorskip("llama_cpp")
    from bench.memory import cli as bench_memory

    dump = tmp_path / "recall.jsonl"
    argv = ["--data", str(data_file), "--prune-to", "300", "--context", "520", "--max-new-tokens", "40",
            "--recall-only", "--diagnostics", "0", "--json", "--methods", "recent-kept",
            "--dump-recall", str(dump)]
    assert bench_memory.main(argv) == 0
    reported = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["methods"]["recent-kept"]
    questions = fit.load(str(dump))["recent-kept"]
    assert len(questions) == reported["questions"]
    assert any(q["paragraphs"] for q in questions), "something came back"
    offline = fit.figures(questions, [fit.fused_order(q) for q in questions],
                          lambda q, o: fit.keep_share(q, o, 0.5))
    assert offline["evidence_recall"] == pytest.approx(reported["recall_overall"], abs=1e-3)
    assert offline["recalled_tokens"] == pytest.approx(reported["mean_recalled_tokens"], abs=0.1)


def test_a_judged_file_adds_the_judgements_orders():
    # The judge points at the evidence, the relevance views at another paragraph.
    q = _question([_para(1, 30, 0.9, 1.0), _para(2, 30, 0.1, 0.0), _para(3, 30, 0.5, 0.5)], evidence=[2])
    for para, judge in zip(q["paragraphs"], (-2.0, 3.0, 0.0)):
        para["judge"] = judge
    rows = fit.study([q], learned=False)
    assert rows["the chat model's judgement alone, share 0.50"]["evidence_recall"] == 1.0
    assert rows["relevance (the app's), share 0.50"]["evidence_recall"] == 0.0
    assert "relevance + the chat model's judgement, up to 300" in rows


def test_a_second_embedders_cosine_stands_in_for_the_apps_and_each_view_gets_an_auc():
    # The second cosine points at the evidence; the app's cosine at another paragraph.
    q = _question([_para(1, 30, 0.9, 0.5), _para(2, 30, 0.1, 0.5), _para(3, 30, 0.5, 0.5)], evidence=[2])
    for para, second in zip(q["paragraphs"], (0.2, 0.8, 0.4)):
        para["second_cosine"] = second
    rows = fit.study([q], learned=False)
    assert rows["the second embedder's cosine alone, up to 300"]["evidence_recall"] == 1.0
    assert rows["the second embedder's cosine alone, share 0.50"]["evidence_recall"] == 1.0
    assert "relevance, the second embedder's cosine in place of the cosine, share 0.50" in rows
    aucs = fit.view_auc([q])
    assert aucs["second_cosine"] == 1.0 and aucs["cosine"] == 0.0
    assert aucs["word_share"] == 0.5, "a tie counts half"
    assert aucs["plan"] == 0.5, "the evidence is second of three in the plan"


def test_the_second_embedder_scores_each_paragraph_against_the_messages_focus():
    from bench.recall_embedder import add_second_cosine

    q = _question([_para(1, 30, 0.5, 0.5), _para(2, 30, 0.5, 0.5)], evidence=[1])
    seen = []

    def score(query, passages):
        seen.append((query, passages))
        return [0.25, 0.75]
    add_second_cosine([q, _question([], evidence=[1])], score)
    assert seen == [("What was asked?", ["paragraph 1", "paragraph 2"])], "a question with no recall is not scored"
    assert [p["second_cosine"] for p in q["paragraphs"]] == [0.25, 0.75]


def test_the_judges_sample_is_stratified_and_keeps_questions_with_a_choice():
    from bench.recall_judge import prompt, sample

    questions = [_question([_para(1, 30, 0.5, 0.5), _para(2, 30, 0.5, 0.5)], evidence=[1], category=1 + n % 4)
                 for n in range(20)]
    questions.append(_question([_para(1, 30, 0.5, 0.5)], evidence=[1], category=1))  # nothing to choose
    chosen = sample(questions, 3, seed=1)
    assert sorted(q["category"] for q in chosen) == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]
    assert all(len(q["paragraphs"]) > 1 for q in chosen)
    assert sample(questions, 3, seed=1) == chosen, "the seed fixes the sample"
    start, rest = prompt("Where do the bees live?", "  My sister keeps bees in Lisbon.\n")
    assert start.endswith("Passage from an earlier conversation:\n") and "Where do the bees live?" in start
    assert rest.startswith("My sister keeps bees in Lisbon.\n\nDoes the passage")

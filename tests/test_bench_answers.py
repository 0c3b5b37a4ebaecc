"""The answer benchmark's scoring (LoCoMo's answer F1) and its question subset.

Fast: no model.  The figures in docs/answers.md come from these functions, so a wrong
normalisation or split would move every one of them.
"""

from __future__ import annotations

import pytest

pytest.importorskip("nltk")

from bench import answer_scoring as answers  # noqa: E402
from bench.locomo import Dialogue, Question  # noqa: E402


def test_an_answer_in_other_words_scores_by_the_words_it_shares():
    # Case, punctuation, articles and word endings do not count; extra words lower precision.
    assert answers.answer_f1("The Lean Startup!", "the lean startup", 4) == 1.0
    assert answers.answer_f1('Jon is currently reading "The Lean Startup".', "The Lean Startup", 4) == pytest.approx(0.5)
    assert answers.answer_f1("She painted sunsets", "painting a sunset", 4) == pytest.approx(0.8)
    assert answers.answer_f1("Paris", "Rome", 4) == 0.0
    assert answers.answer_f1("", "Rome", 4) == 0.0


def test_a_multi_hop_answer_is_scored_part_by_part():
    # Each gold part takes the best predicted part: naming both cities in any order is full marks.
    assert answers.answer_f1("Rome, Paris", "Paris, Rome", 1) == 1.0
    assert answers.answer_f1("Paris", "Paris, Rome", 1) == 0.5
    # Without the split the same answer would be scored as one phrase.
    assert answers.answer_f1("Paris", "Paris, Rome", 4) == pytest.approx(2 / 3)


def test_an_open_domain_answer_is_scored_against_its_first_alternative():
    assert answers.answer_f1("likely yes", "Likely yes; because she said so", 3) == 1.0


def test_containment_asks_for_every_gold_word():
    assert answers.contains("Gina opened it on March 16, 2023.", "16 March, 2023", 2) == 1.0
    assert answers.contains("Gina opened it in 2023.", "16 March, 2023", 2) == 0.0
    assert answers.contains("Jon has visited Paris and London.", "Paris, Rome", 1) == 0.5


def test_the_subset_is_fixed_by_its_seed_and_balanced_by_category():
    from bench import answers as bench_answers

    questions = [Question(i, f"q{i}", "a", 1 + i % 4, ["D1:1"]) for i in range(40)]
    questions.append(Question(99, "no evidence", "a", 1, []))
    dialogue = Dialogue("conv-x", "A", "B", [], questions)
    first = bench_answers.subset([dialogue], 3, seed=7)
    assert first == bench_answers.subset([dialogue], 3, seed=7)
    assert sorted(q.category for _, q in first) == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]
    assert all(q.evidence for _, q in first)
    assert first != bench_answers.subset([dialogue], 3, seed=8)


def test_weighted_figures_give_each_category_its_share_of_the_data():
    from types import SimpleNamespace

    from bench import answers as bench_answers

    questions = [Question(i, f"q{i}", "a", 1 if i < 9 else 4, ["D1:1"]) for i in range(12)]
    questions.append(Question(99, "no evidence", "a", 1, []))
    weights = bench_answers.category_counts([Dialogue("conv-x", "A", "B", [], questions)])
    assert weights == {1: 9, 4: 3}
    tally = bench_answers.Tally()
    answer = SimpleNamespace(prompt_tokens=10, computed_tokens=10, seconds=1.0)
    # One multi-hop question answered wrong, one single-hop answered right: the plain mean
    # is a half; weighted by the data's nine multi-hop questions to three, a quarter.
    tally.add(1, 0.0, 0.0, bench_answers.Context([], 0, 0, 0, 0.0), answer)
    tally.add(4, 1.0, 1.0, bench_answers.Context([], 0, 0, 0, 1.0), answer)
    figures = tally.figures(weights)
    assert figures["answer_f1"] == 0.5
    assert figures["answer_f1_weighted"] == 0.25
    assert figures["evidence_recall_weighted"] == 0.25
    assert tally.figures()["answer_f1_weighted"] is None


def test_ratios_come_with_a_paired_interval_that_holds_the_ratio():
    from bench import answers

    default = [0.5, 0.0, 1.0, 0.25, 0.5, 0.0, 1.0, 0.75]
    oracle = [1.0, 0.5, 1.0, 0.5, 0.5, 0.25, 1.0, 1.0]
    r = answers.interval(default, oracle)
    assert r["ratio"] == round(sum(default) / sum(oracle), 3) and r["questions"] == 8
    assert r["low"] <= r["ratio"] <= r["high"] < 1.0 + 1e-9
    assert answers.interval(default, oracle) == r, "seeded: the same interval every run"
    found = answers.ratios({"default": default, "oracle": oracle, "fifo": [0.0] * 8},
                           {"default": {1: default[:3]}, "oracle": {1: oracle[:3]}, "fifo": {}})
    assert set(found) == {"default/oracle", "default/oracle multi-hop", "default/fifo"}
    assert found["default/fifo"]["ratio"] is None, "nothing to divide by: no ratio, no error"


def test_two_runs_pair_question_by_question(tmp_path):
    import json

    from bench import answers_pair

    def write(name, f1s):
        path = tmp_path / name
        rows = [{"method": "default", "conversation": "c", "question": f"q{k % 3}", "gold": "g",
                 "answer": f"a{f}", "f1": f} for k, f in enumerate(f1s)]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return str(path)

    first = answers_pair.read(write("a.jsonl", [1.0, 0.5, 0.0, 1.0]))
    second = answers_pair.read(write("b.jsonl", [1.0, 0.0, 0.0]))
    figures = answers_pair.compare(first, second)["default"]
    assert figures["questions"] == 3, "the question asked twice pairs with its own occurrence only"
    assert figures["difference"] == round(0.5 / 3, 4) and figures["identical"] == 2 and figures["same_answer"] == 2


def test_answers_of_several_files_are_put_together_over_the_questions_all_methods_answered(tmp_path):
    import json

    from bench import answers_pair

    def row(method, q, f1, category=4):
        return {"method": method, "conversation": "c", "question": q, "gold": "g", "category": category,
                "answer": "a", "f1": f1}

    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("".join(json.dumps(r) + "\n" for r in [row("oracle", "q1", 1.0), row("oracle", "q2", 0.5, 1),
                                                             row("default", "q1", 0.5)]))
    second.write_text(json.dumps(row("default", "q2", 0.5, 1)) + "\n" + json.dumps(row("default", "q3", 1.0)) + "\n")
    rows = {**answers_pair.read(str(first)), **answers_pair.read(str(second))}
    figures = answers_pair.summarise(rows)
    assert figures["questions"] == 2, "q3 has no oracle answer: left out of every figure"
    assert figures["methods"]["default"]["answer_f1"] == 0.5 and figures["methods"]["oracle"]["answer_f1"] == 0.75
    assert figures["ratios"]["default/oracle"]["ratio"] == round(1.0 / 1.5, 3)
    assert figures["ratios"]["default/oracle multi-hop"]["ratio"] == 1.0


def test_full_cuts_a_long_conversation_once_for_all_its_questions():
    # The questions of one conversation share its text as their start (read once), whatever
    # their lengths, while each still fits the window with its answer.
    from bench.answers import FULL_QUESTION_ROOM, full_limit

    window, answer = 32_768, 32
    cuts = {full_limit(window, answer, framed) for framed in (12, 40, 97, FULL_QUESTION_ROOM)}
    assert len(cuts) == 1
    for framed in (12, 97, FULL_QUESTION_ROOM, FULL_QUESTION_ROOM + 50):
        assert full_limit(window, answer, framed) + framed + answer < window


def test_questions_asking_for_several_things_are_told_from_the_others():
    from bench.answers import asks_for_several

    several = ["What books has Tim read?", "Which US cities does John mention visiting to Tim?",
               "What LGBTQ+ events has Caroline participated in?", "Hi! So what instruments does Melanie play?"]
    one = ["What is Caroline's identity?", "What kind of writing does Tim do?", "How many games has John won?",
           "When did Melanie go camping?", "What did Melanie paint recently?", "Why is this so?"]
    assert [asks_for_several(q) for q in several] == [True] * len(several)
    assert [asks_for_several(q) for q in one] == [False] * len(one)

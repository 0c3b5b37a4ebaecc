"""The memory benchmark's replay and recall logic on a tiny LoCoMo-format file.

Fast: a word-level tokenizer and a deterministic attention source stand in for the
model (the benchmark's own runs use the real one); the conversation, pruning and
resurrection planning are the app's real core code.  The KV "shift" is checked against
an exact run on a tiny random Llama, where (one layer) the two must agree.
"""

from __future__ import annotations

import copy
import json
import re
import zlib
from pathlib import Path

import numpy as np
import pytest

from bench import locomo
from bench.memory.methods import (QuestionContext, answer_brightness, answer_fifo,
                                  answer_full, answer_halo, answer_halo_dry, answer_halo_in_place,
                                  answer_rag, evidence_recall, keep_recent)
from bench.memory.policies import BASE_RULE
from bench.memory.replay import Policy, replay, tokenize_dialogue

from halo_weave.core.token_table import COLUMNS
from halo_weave.memory.recall_plan import Match, make_plan
from halo_weave.memory.room import plan_with_room
from halo_weave.settings import Settings

FILLER = "we talked about the weather and the garden and the long drive home again"


def _turn(speaker, dia_id, text, **extra):
    return {"speaker": speaker, "dia_id": dia_id, "text": text, **extra}


@pytest.fixture
def data_file(tmp_path):
    s1 = [_turn("Ann" if i % 2 == 0 else "Bob", f"D1:{i + 1}", f"{FILLER} number {i}")
          for i in range(12)]
    s1[2] = _turn("Ann", "D1:3", "Does your sister still live abroad?")
    s1[3] = _turn("Bob", "D1:4", "My sister keeps bees in Lisbon.")
    s2 = [_turn("Bob" if i % 2 == 0 else "Ann", f"D2:{i + 1}", f"{FILLER} second {i}")
          for i in range(12)]  # this session opens with speaker_b
    s2[5] = _turn("Ann", "D2:6", "Look at this!", blip_caption="a photo of a red bicycle",
                  img_url="x", query="bike")
    item = {
        "sample_id": "conv-t",
        "conversation": {
            "speaker_a": "Ann", "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023", "session_1": s1,
            "session_2_date_time": "10:00 am on 9 May, 2023", "session_2": s2,
            "session_3_date_time": "11:00 am on 10 May, 2023",  # a date with no session
        },
        "qa": [
            {"question": "Where does Bob's sister keep bees?", "answer": "Lisbon",
             "evidence": ["D1:4"], "category": 4},
            {"question": "What did Ann show?", "answer": "a bicycle",
             "evidence": ["D2:6; D1:4", "D:1:3", "D2:06 D2:7", "D9:9"], "category": 1},
            {"question": "When?", "answer": 2023, "evidence": ["D2:12"], "category": 2},
            {"question": "Unanswerable?", "adversarial_answer": "no",
             "evidence": [], "category": 5},
        ],
    }
    path = tmp_path / "tiny_locomo.json"
    path.write_text(json.dumps([item]))
    return path


class WordTokenizer:
    """Words (with their leading space), newlines and ChatML specials as tokens."""

    pattern = re.compile(r"<\|[a-z_]+\|>|\n| ?[^\s<]+| ")

    def __call__(self, text):
        pieces = self.pattern.findall(text)
        return [(zlib.crc32(p.encode()) % 50000 + 10, p) for p in pieces]


class HotWordAttention:
    """Attention with a sink, a recency bump, and extra weight on 'hot' words."""

    def __init__(self, tokenizer, hot=("bees", "sister")):
        self.hot = {tokenizer(" " + w)[0][0] for w in hot}
        self.calls = []

    def tokenize(self, text):
        return WordTokenizer()(text)

    def teacher_force(self, input_ids, forced_ids, keys=None):
        ids = list(input_ids) + list(forced_ids)
        n, m = len(input_ids), len(forced_ids)
        out = np.zeros((m, n + m - 1), np.float32)
        for j in range(m):
            width = n + j
            row = np.full(width, 1.0, np.float32)
            row[0] = width * 0.5  # the sink
            row[max(0, width - 8):] += 2.0
            row[[i for i in range(width) if ids[i] in self.hot]] += 30.0
            out[j, :width] = row / row.sum()
        self.calls.append((n, m))
        return out


@pytest.fixture
def dialogue(data_file):
    return locomo.load(data_file)[0]


@pytest.fixture
def settings():
    return Settings.of(system_prompt="You are Bob.", max_new_tokens=20, min_chunk_tokens=64, **BASE_RULE)


def test_evidence_quirks_are_canonicalised_counted_and_skipped(dialogue):
    assert [q.category for q in dialogue.questions] == [4, 1, 2]  # category 5 dropped
    multi = dialogue.questions[1]
    assert multi.evidence == ["D2:6", "D1:4", "D1:3", "D2:7"]
    assert multi.dangling == ["D9:9"]
    assert multi.malformed == 3
    assert locomo.canonical_evidence("D30:05") == (["D30:5"], True)
    assert locomo.canonical_evidence("D") == ([], True)


def test_speakers_photos_and_session_times(dialogue):
    turns = dialogue.turns
    assert len(turns) == 24
    assert turns[0].role == "user" and turns[3].role == "assistant"
    assert turns[12].role == "assistant"  # session 2 opens with speaker_b
    assert turns[17].text == "Look at this! [photo: a photo of a red bicycle]"
    times = [t.created_at for t in turns]
    assert times == sorted(times) and times[12] - times[0] > 20 * 3600


def _question(tok, i, budget, context, max_new):
    q = tok.dialogue.questions[i]
    ids, texts = tok.questions[i]
    ctx = QuestionContext(q, ids, texts, tok.dialogue.turn_index(), budget, context, max_new)
    ctx.framed_tokens = tok.question_tokens(i)
    return ctx


def test_replay_prunes_to_p_and_keeps_what_attention_points_at(dialogue, settings):
    source = HotWordAttention(WordTokenizer())
    tok = tokenize_dialogue(dialogue, source.tokenize, settings)
    full = replay(tok, Policy("full", 0, attention=False), settings, None).conv
    assert not source.calls
    result = replay(tok, Policy("halo", 120), settings, source)
    conv = result.conv
    assert full.live_token_count() > 300
    assert conv.live_token_count() <= 120 + 40  # pruned after each exchange; one turn of slack
    assert result.prune_events > 0 and result.votes == sum(m for _, m in source.calls)
    turn_of = dialogue.turn_index()
    recall, live = evidence_recall(conv, ["D1:4"], turn_of)
    # An exchange of one-chunk turns is an anchor pair: it stays or goes as one, so both
    # of its turns are attended to here.
    assert recall == 1.0, "the 'bees' turn is attended to on every step and must survive"
    assert evidence_recall(conv, ["D1:1", "D1:4"], turn_of)[0] == 0.5
    # The mean-rank experiment prunes too, within the same budget.
    mean = replay(tok, Policy("meanrank", 120, rank="mean"), settings, source).conv
    assert mean.live_token_count() <= 120 + 40 and type(mean).__name__ == "MeanRankConversation"
    # Hysteresis prunes deeper, less often.
    hyst = replay(tok, Policy("hyst", 120, hysteresis=0.5), settings, source)
    assert hyst.prune_events < result.prune_events


def test_every_bounded_method_fits_the_prompt_budget(dialogue, settings):
    source = HotWordAttention(WordTokenizer())
    tok = tokenize_dialogue(dialogue, source.tokenize, settings)
    context, max_new, prune_to = 260, settings.sampling.max_new_tokens, 120
    budget = context - max_new
    full = replay(tok, Policy("full", 0, attention=False), settings, None).conv
    halo = replay(tok, Policy("halo", prune_to), settings, source).conv
    bright = replay(tok, Policy("brightness", budget), settings, source).conv
    recent = keep_recent(full, prune_to)
    # Every content chunk as a match, oldest first: plenty to overfill the budget.
    matches = [Match(c.id, c.turn_id, c.chunk_index, c.role, "", c.token_count, 0, 0.9, 0.9)
               for c in sorted(full.chunks.values(), key=lambda c: c.start) if not c.framing]
    for i in range(len(dialogue.questions)):
        ctx = _question(tok, i, budget, context, max_new)
        assert answer_full(full, ctx).tokens > budget
        outcomes = {
            "fifo": answer_fifo(full, ctx),
            "rag": answer_rag(recent, matches, ctx),
            "brightness": answer_brightness(bright, ctx),
            "halo": answer_halo(halo, matches, ctx, "at_prune"),
            "halo-mean": answer_halo(halo, matches, ctx, "mean"),
        }
        for name, out in outcomes.items():
            assert out.tokens <= budget, (name, out.tokens, budget)
        assert outcomes["halo"].tokens > halo.live_token_count()  # it did resurrect
    # The question states never leak into the replayed state.
    assert halo.live_token_count() <= prune_to + 40
    assert all(t.role != "user" or t.turn_id < len(dialogue.turns) for t in halo.turns.values())


def _stamps(conv):
    """Per chunk: its brightness at prune and when it was last resurrected (its age for
    oldest-first pruning)."""
    return {i: (c.brightness_at_prune, c.resurrected_at) for i, c in conv.chunks.items()}


def test_the_no_copy_question_path_gives_the_same_figures(dialogue, settings):
    """recent-* methods read recall and tokens off the plan instead of resurrecting in a
    copy: the figures must be the copy's, with anchors always or paid from what is left."""
    source = HotWordAttention(WordTokenizer())
    tok = tokenize_dialogue(dialogue, source.tokenize, settings)
    context, max_new = 260, settings.sampling.max_new_tokens
    full = replay(tok, Policy("full", 0, attention=False), settings, None).conv
    recent = keep_recent(full, 120)
    matches = [Match(c.id, c.turn_id, c.chunk_index, c.role, "", c.token_count, 0, 0.9, 0.9)
               for c in sorted(full.chunks.values(), key=lambda c: -c.start) if not c.framing]
    for anchors, cap, rule in (("always", 0, "at_prune"), ("if_room", 0, "mean"), ("always", 40, "at_prune")):
        def planner(conv, found, budget, anchors=anchors):
            return make_plan(conv, found, budget, anchors)
        for i in range(len(dialogue.questions)):
            ctx = _question(tok, i, context - max_new, context, max_new)
            copied = answer_halo(recent, matches, ctx, rule, budget_cap=cap, planner=planner)
            dry = answer_halo_dry(recent, matches, ctx, planner, budget_cap=cap)
            assert (dry.recall, dry.tokens, dry.missing) == (copied.recall, copied.tokens, copied.missing), anchors
    # A plan that makes its room (the app's resurrection_keep_share < 1) prunes too: the
    # no-copy path prunes in place, reads, and undoes it; the figures are a copy's.
    recent = keep_recent(full, 200)
    pruned = [m for m in matches if not recent.chunks[m.chunk_id].live]  # the live context is not a match
    before = sorted(c.id for c in recent.live_chunks())
    stamps = _stamps(recent)
    roomy = copy.deepcopy(recent)
    roomy.use_settings(roomy.settings.replace(prune_when="for_room"))  # answer_halo's pruning copy
    differs = 0
    for i in range(len(dialogue.questions)):
        ctx = _question(tok, i, context - max_new, context, max_new)
        dry = answer_halo_dry(recent, pruned, ctx, make_plan, floor=60)
        copied = answer_halo(roomy, pruned, ctx, "at_prune", planner=make_plan, floor=60)
        assert (dry.recall, dry.tokens, dry.missing) == (copied.recall, copied.tokens, copied.missing)
        assert sorted(c.id for c in recent.live_chunks()) == before, "the room's prune was undone"
        # ... each chunk put back as old as it was: else it ranks as the newest in the next
        # question's oldest-first prune, and the questions change each other's figures.
        assert _stamps(recent) == stamps, i
        plain = answer_halo_dry(recent, pruned, ctx, make_plan)
        differs += (dry.missing, dry.tokens) != (plain.missing, plain.tokens)
    assert differs, "with the floor below the live context, some question's room was made by pruning"
    # Nothing to prune (every live chunk a match, or the exchange just read): the plan is
    # made again within what is left, so the prompt still fits.
    small = keep_recent(full, 120)
    for i in range(len(dialogue.questions)):
        ctx = _question(tok, i, context - max_new, context, max_new)
        assert answer_halo_dry(small, matches, ctx, make_plan, floor=60).tokens <= context - max_new
    # A for_room conversation's plan prunes as well: only the copy can tell.
    lazy = keep_recent(full, 120)
    lazy.use_settings(lazy.settings.replace(prune_when="for_room"))
    with pytest.raises(ValueError):
        answer_halo_dry(lazy, matches, _question(tok, 0, context - max_new, context, max_new))


def test_fifo_prunes_after_each_exchange_and_answers_from_all_it_left(dialogue, settings):
    """fifo keeps the most recent C - max_new_tokens after every exchange: the model answers
    each message from everything the previous exchange left live plus the message, nothing
    pruned when the message arrives (its prompt budget is the model's window, so a fit at
    the message would prune each exchange twice, and shorten the context it answers from)."""
    source = HotWordAttention(WordTokenizer())
    tok = tokenize_dialogue(dialogue, source.tokenize, settings)
    context, max_new = 200, settings.sampling.max_new_tokens
    budget = context - max_new
    full = replay(tok, Policy("full", 0, attention=False), settings, None).conv
    fifo = replay(tok, Policy("fifo", budget, settings=(("prune_order", "age"),)), settings, source,
                  model_context=context, max_new_tokens=max_new)
    turn_at = dict(zip(full.table.position.tolist(), full.table.turn_id.tolist()))
    # The oldest turn live after each exchange, and the oldest the model read for each answer.
    left = [min(live) for live in fifo.trace.peaks]
    read = [min(turn_at[p] for p in f.live_positions.tolist()) for f in fifo.fidelity]
    assert fifo.prune_events > 0 and left[-1] > left[0], "the history outgrew the budget"
    assert read[1:] == left[:len(read) - 1], "each answer read all the previous exchange left"
    assert fifo.conv.live_token_count() <= budget


def test_pruning_only_for_room_keeps_more_recent_context_and_brings_the_match_back(dialogue, settings):
    """The lazy replays (prune_when = "for_room"): between messages the window, not P, stays
    live; every message's match comes back, room made for it by pruning, within C - P; at
    question time the match is live and the prompt fits the budget."""
    source = HotWordAttention(WordTokenizer())
    tok = tokenize_dialogue(dialogue, source.tokenize, settings)
    context, max_new, prune_to = 300, settings.sampling.max_new_tokens, 120
    full = replay(tok, Policy("full", 0, attention=False), settings, None).conv
    first = full.content_chunks(dialogue.turn_index()["D1:1"])[0]  # a filler turn nobody attends to
    found = Match(first.id, first.turn_id, first.chunk_index, first.role, "", first.token_count, 0, 0.9, 0.9)

    def search(text, before_turn):
        return [found] if first.turn_id < before_turn else []

    lazy = {}
    for name, extra in (("lazy", (("prune_order", "brightness"),)), ("lazy-fifo", (("prune_order", "age"),))):
        policy = Policy(name, prune_to, settings=extra + (("prune_when", "for_room"),), resurrect="at_prune")
        lazy[name] = replay(tok, policy, settings, source, search=search, model_context=context,
                            max_new_tokens=max_new)
    live = replay(tok, Policy("live", prune_to, resurrect="at_prune"), settings, source, search=search,
                  model_context=context, max_new_tokens=max_new)
    for name, r in lazy.items():
        assert prune_to < r.conv.live_token_count() <= context - max_new, name
        assert r.resurrected_chunks > 0 and r.prune_events > 0, name
        # The model went on from more of the conversation than when pruned to P each time.
        assert (np.mean([len(f.live_positions) for f in r.fidelity])
                > np.mean([len(f.live_positions) for f in live.fidelity])), name
        for i in range(len(dialogue.questions)):
            ctx = _question(tok, i, context - max_new, context, max_new)
            out = answer_halo(r.conv, [found], ctx, "at_prune")
            assert out.tokens <= context - max_new and "D1:1" not in out.missing, (name, i)
        # Made in the conversation itself, read and undone: the copy's figures, and the
        # conversation as it was (the same live chunks, positions and brightness).
        gone = [Match(c.id, c.turn_id, c.chunk_index, c.role, "", c.token_count, 0, 0.9, 0.9)
                for c in r.conv.graveyard() if not c.framing]
        before = ([c.id for c in r.conv.live_chunks()], r.conv.table.position.copy(),
                  r.conv.table.brightness.copy())
        stamps = _stamps(r.conv)
        columns = {name: getattr(r.conv.table, name).copy() for name in COLUMNS}
        alone = copy.deepcopy(r.conv)  # only ever copied: what every question starts from
        made_room = 0
        for i in range(len(dialogue.questions)):
            ctx = _question(tok, i, context - max_new, context, max_new)
            out = answer_halo(alone, gone, ctx, "at_prune")
            made = answer_halo_in_place(r.conv, gone, ctx, "at_prune")
            assert (made.recall, made.tokens, made.missing) == (out.recall, out.tokens, out.missing), (name, i)
            after = ([c.id for c in r.conv.live_chunks()], r.conv.table.position, r.conv.table.brightness)
            assert after[0] == before[0] and np.array_equal(after[1], before[1]), (name, i)
            assert np.array_equal(after[2], before[2]), (name, i)
            assert _stamps(r.conv) == stamps, (name, i)  # as old as they were (see above)
            for column, values in columns.items():  # every token row as it was
                assert np.array_equal(getattr(r.conv.table, column), values), (name, i, column)
            probe = copy.deepcopy(r.conv)
            made_room += bool(plan_with_room(probe, gone, make_plan, user_tokens=ctx.framed_tokens,
                                             max_context=context, max_new_tokens=max_new, floor=prune_to).pruned)
        assert made_room, "some question's plan pruned older context to make its room"
        # A resurrection at the mean brightness is taken back as exactly.
        made, out = answer_halo_in_place(r.conv, gone, ctx, "mean"), answer_halo(alone, gone, ctx, "mean")
        assert (made.recall, made.tokens, made.missing) == (out.recall, out.tokens, out.missing), name
        assert _stamps(r.conv) == stamps, name
        for column, values in columns.items():
            assert np.array_equal(getattr(r.conv.table, column), values), (name, column)


def test_halo_reports_why_evidence_is_missing(dialogue, settings):
    source = HotWordAttention(WordTokenizer())
    tok = tokenize_dialogue(dialogue, source.tokenize, settings)
    halo = replay(tok, Policy("halo", 120), settings, source).conv
    ctx = _question(tok, 1, 240, 260, settings.sampling.max_new_tokens)
    assert answer_halo(halo, [], ctx, "at_prune").missing["D2:7"] == "never retrieved"
    turn = dialogue.turn_index()["D2:7"]
    chunk = halo.content_chunks(turn)[0]
    assert not chunk.live
    huge = Match(chunk.id, turn, 0, chunk.role, "", chunk.token_count, 0, 0.9, 0.9)
    tight = _question(tok, 1, 240, halo.live_token_count() + ctx.framed_tokens + 20 + 1, 20)
    assert answer_halo(halo, [huge], tight, "at_prune").missing["D2:7"] == "over budget"
    assert answer_halo(halo, [huge], ctx, "at_prune").missing.get("D2:7") is None


def tiny_exact_and_shift(positions: int = 256):
    """A one-layer Llama (seeded) read two ways: re-prefilled exactly, and by KV shifts."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from bench.memory.attention import ModelAttention

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=1, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=positions)
    model = transformers.LlamaForCausalLM(config).eval()
    return ModelAttention(model, None, "exact"), ModelAttention(model, None, "shift")


def test_kv_shift_matches_exact_on_a_one_layer_model():
    exact, shift = tiny_exact_and_shift()
    rng = np.random.default_rng(1)
    ids = rng.integers(1, 64, 40).tolist()
    forced = rng.integers(1, 64, 6).tolist()
    keys = list(range(46))
    a = exact.teacher_force(ids, forced, keys)
    b = shift.teacher_force(ids, forced, keys)
    assert np.allclose(a, b, atol=1e-6) and np.allclose(a.sum(1), 1, atol=1e-5)
    # Remove a middle span (a prune), then force more tokens.
    kept = ids[:10] + ids[20:] + forced
    kept_keys = keys[:10] + keys[20:] + list(range(100, 105))
    more = rng.integers(1, 64, 5).tolist()
    a = exact.teacher_force(kept, more, kept_keys)
    b = shift.teacher_force(kept, more, kept_keys)
    assert shift.stats.shifts == 1 and exact.stats.reprefills == 1
    assert np.allclose(a, b, atol=1e-5)


def forced_alike(exact, shift, ids, more, keys) -> None:
    """Forcing ``more`` after ``ids`` gives the exact source's attention and log-probabilities."""
    a = exact.force(ids, more, keys)
    b = shift.force(ids, more, keys)
    assert np.allclose(a.rows, b.rows, atol=1e-5) and np.allclose(a.logprobs, b.logprobs, atol=1e-4)


def test_a_long_replay_shifts_in_place_across_buffer_growth_and_stays_exact():
    """Turns that grow the cache past its buffer's room, with a prune after each once it is
    long: the shifts that follow write into buffers the model's passes made, and the
    replay runs to the end with the exact source's attention."""
    exact, shift = tiny_exact_and_shift(positions=4096)
    rng = np.random.default_rng(4)
    ids, keys, next_key = [], [], 0
    for _ in range(30):
        new, forced = rng.integers(1, 64, 150).tolist(), rng.integers(1, 64, 5).tolist()
        new_keys = list(range(next_key, next_key + 155))
        shift.teacher_force(ids + new, forced, keys + new_keys)
        ids, keys, next_key = ids + new + forced, keys + new_keys, next_key + 155
        if len(ids) > 600:  # a prune: a span after the first tokens leaves
            ids, keys = ids[:50] + ids[150:], keys[:50] + keys[150:]
    assert shift.stats.in_place_shifts > 0 and shift.stats.shifts > shift.stats.in_place_shifts
    more = rng.integers(1, 64, 4).tolist()
    forced_alike(exact, shift, ids, more, keys + list(range(next_key, next_key + 4)))


def test_kv_shift_restores_resurrected_tokens_from_kept_cells():
    """A resurrection (the pruned span back in the middle) takes the span's kept keys and
    values instead of re-running everything after it; on one layer that is exact."""
    exact, shift = tiny_exact_and_shift()
    shift.reset(keep_pruned=True)
    rng = np.random.default_rng(2)
    ids = rng.integers(1, 64, 40).tolist()
    keys = list(range(40))
    forced = rng.integers(1, 64, 4).tolist()
    for source in (exact, shift):  # read everything, prune keys 10..19, force after the gap
        source.teacher_force(ids, forced, keys + [40, 41, 42, 43])
        source.teacher_force(ids[:10] + ids[20:], forced, keys[:10] + keys[20:] + [50, 51, 52, 53])
    prefilled = shift.stats.prefill_tokens
    back = ids + forced[:3]  # 10..19 resurrected in place, the forced turn's tokens kept
    back_keys = keys + [50, 51, 52]
    more = rng.integers(1, 64, 5).tolist()
    forced_alike(exact, shift, back, more, back_keys + [60, 61, 62, 63, 64])
    assert shift.stats.restored_tokens == 10
    assert shift.stats.prefill_tokens == prefilled  # nothing re-run: all from kept cells
    assert exact.stats.reprefills >= 1


def test_kept_cells_stay_bounded_when_the_same_span_is_pruned_and_resurrected_again_and_again():
    """Live replays bury the same chunks thousands of times: the kept rows must not pile up
    (a dev-set run died of it, 12 GiB per worker), and a resurrection after many rounds is
    still restored from kept cells, as exact as after one."""
    exact, shift = tiny_exact_and_shift()
    shift.reset(keep_pruned=True)
    rng = np.random.default_rng(3)
    ids = rng.integers(1, 64, 60).tolist()
    keys = list(range(60))
    forced = rng.integers(1, 64, 2).tolist()
    gap_ids, gap_keys = ids[:10] + ids[50:], keys[:10] + keys[50:]  # 40 tokens pruned
    for round_ in range(120):  # 120 burials of the same 40 tokens: 4,800 rows without compaction
        shift.teacher_force(ids, forced, keys + [100, 101])
        shift.teacher_force(gap_ids, forced, gap_keys + [100, 101])
    assert shift._grave_len <= 4096, "dead kept rows were dropped"
    exact.teacher_force(gap_ids, forced, gap_keys + [100, 101])
    restored = shift.stats.restored_tokens
    more = rng.integers(1, 64, 3).tolist()
    forced_alike(exact, shift, ids, more, keys + [200, 201, 202])
    assert shift.stats.restored_tokens == restored + 40


def test_kept_cells_compacted_while_others_come_back_restore_the_right_ones():
    """Each round prunes one span and resurrects the other, so the kept rows are compacted
    in a step that also restores: the restored rows must be read before they are
    renumbered (a dev-set run died there of an index out of range)."""
    exact, shift = tiny_exact_and_shift()
    shift.reset(keep_pruned=True)
    rng = np.random.default_rng(5)
    ids = rng.integers(1, 64, 90).tolist()
    keys = list(range(90))
    forced = rng.integers(1, 64, 2).tolist()
    without_x = (ids[:10] + ids[50:], keys[:10] + keys[50:])  # 40 tokens pruned
    without_y = (ids[:50] + ids[85:], keys[:50] + keys[85:])  # 35 others pruned
    for round_ in range(70):  # ~5,300 kept rows without compaction: it must happen
        for gap_ids, gap_keys in (without_x, without_y):
            shift.teacher_force(gap_ids, forced, gap_keys + [100, 101])
    assert shift._grave_len <= 4096 and shift.stats.restored_tokens > 4096
    gap_ids, gap_keys = without_x
    exact.teacher_force(gap_ids, forced, gap_keys + [100, 101])
    more = rng.integers(1, 64, 3).tolist()
    forced_alike(exact, shift, ids, more, keys + [200, 201, 202])  # both spans back


def test_merging_runs_weights_recall_by_question_count():
    from bench.memory.report import MethodResult, merge

    a, b = MethodResult("halo"), MethodResult("halo")
    a.add(4, 1.0, 100)
    for _ in range(3):
        b.add(4, 0.0, 200)
    runs = [{"methods": {"halo": r.figures()}} for r in (a, b)]
    merged = merge(runs)[0].figures()
    assert merged["recall_single_hop"] == 0.25 and merged["questions"] == 4
    assert merged["max_tokens"] == 200


def test_a_real_run_reports_continuation_fidelity_per_method(data_file, tmp_path, capsys):
    """The bundled model on llama.cpp, the real MiniLM index, the tiny file: every method
    gets finite ΔNLL and kept attention mass, the reference scores itself as lossless, and
    a policy that pruned lost some of the reference's attention."""
    pytest.importorskip("llama_cpp")
    from bench.memory import cli as bench_memory

    # The app's system prompt alone is ~190 tokens: P and the window leave room for turns.
    argv = ["--data", str(data_file), "--prune-to", "300", "--context", "520",
            "--max-new-tokens", "40", "--window", "600", "--diagnostics", "0", "--json",
            "--methods", "full,fifo,rag,halo,fifo-halo,halo-decay,halo-live,halo-live-mean,lazy-fifo-halo,lazy-halo"]
    assert bench_memory.main(argv) == 0
    out = capsys.readouterr().out
    figures = json.loads(out.strip().splitlines()[-1])  # valid JSON: no NaN anywhere
    methods = figures["methods"]
    for name, f in methods.items():
        assert np.isfinite(f["delta_nll"]) and 0.0 <= f["kept_attention_mass"] <= 1.0, name
        assert f["fidelity_turns"] > 0, name
    assert methods["full"]["delta_nll"] == 0.0 and methods["full"]["kept_attention_mass"] == 1.0
    for name in ("halo", "fifo-halo", "halo-decay"):
        assert methods[name]["kept_attention_mass"] < 1.0, name  # pruned: the window saw more
    # rag keeps the most recent P tokens between questions: fifo-halo's replay, its figures.
    assert methods["rag"]["delta_nll"] == methods["fifo-halo"]["delta_nll"]
    assert methods["halo-live-mean"]["replay_seconds"] > 0  # its own replay, not halo-live's
    assert "ΔNLL" in out and "kept mass" in out

    # Merging two runs keeps the fidelity figures (weighted by scored turns).
    paths = []
    for i in range(2):
        path = tmp_path / f"run{i}.out"
        path.write_text(out)
        paths.append(str(path))
    assert bench_memory.main(["--merge", *paths, "--json"]) == 0
    merged = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["methods"]
    for name in ("halo", "fifo-halo"):
        assert merged[name]["delta_nll"] == pytest.approx(methods[name]["delta_nll"], abs=1e-4)
        assert merged[name]["fidelity_turns"] == 2 * methods[name]["fidelity_turns"]


def test_replays_share_their_calls_before_the_first_prune(dialogue, settings):
    """A second replay takes the calls every policy makes before its first prune from the
    first one, and gets exactly what a fresh model gives (the live replay's resurrected
    spans come from kept cells and agree with a fresh source too)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from bench.memory.attention import ModelAttention

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=50010, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=1024)
    model = transformers.LlamaForCausalLM(config).eval()

    def source():
        s = ModelAttention(model, None, "shift")
        s.tokenize = WordTokenizer()
        return s

    shared = source()
    tok = tokenize_dialogue(dialogue, shared.tokenize, settings)
    age = (("prune_order", "age"),)
    first = replay(tok, Policy("wide", 200), settings, shared)  # reads rows: shares them
    for policy in (Policy("halo", 120), Policy("fifo-halo", 120, settings=age)):
        served = shared.shared.served_tokens
        again = replay(tok, policy, settings, shared)
        fresh = replay(tok, policy, settings, source())
        assert shared.shared.served_tokens > served  # the prefix came from the first replay
        assert [r.turn_index for r in again.fidelity] == [r.turn_index for r in fresh.fidelity]
        assert np.allclose([r.nll for r in again.fidelity], [r.nll for r in fresh.fidelity], atol=1e-5)
        assert again.conv.live_token_count() == fresh.conv.live_token_count()
        assert again.prune_events == fresh.prune_events
    assert first.prune_events > 0
    # Oldest-first pruning reads no attention: same NLL and live sets as with rows read.
    with_rows_source = source()
    with_rows = replay(tok, Policy("rows", 120), settings.replace(prune_order="age"), with_rows_source)
    without = replay(tok, Policy("fifo-halo", 120, settings=age), settings, source())
    assert with_rows_source.stats.by_kind["forced"][0] > 0
    assert [r.nll for r in without.fidelity] == pytest.approx([r.nll for r in with_rows.fidelity], abs=1e-5)
    assert all(np.array_equal(a.live_positions, b.live_positions)
               for a, b in zip(without.fidelity, with_rows.fidelity))


def test_llama_forcing_reads_every_row_through_the_caches_decode():
    """The benchmark's llama.cpp forcing and the reader's attend_all share the cache's one
    decode with an attention hook: same rows, each a distribution over what the query
    sees, and the log-probabilities show a repeated sentence is predictable."""
    pytest.importorskip("llama_cpp")
    from bench.memory.llama_forcing import LlamaForcing

    source = LlamaForcing.load(context_size=512, threads=1)
    ids = [i for i, _ in source.tokenize("The quick brown fox jumps over the lazy dog. " * 6)]
    n = len(ids) // 2
    ctx, forced = ids[:n], ids[n:]
    out = source.force(ctx, forced)
    assert out.rows.shape == (len(forced), len(ids) - 1)
    for j in range(len(forced)):
        assert out.rows[j, :n + j].sum() == pytest.approx(1.0, abs=1e-3)
        assert not out.rows[j, n + j:].any()  # causal: nothing after the query
    assert np.isfinite(out.logprobs).all() and out.nll < 1.0  # the sentence was said before
    source.reset()
    source.sync(ctx[:-1])
    rows = source.kv.attend_all([ctx[-1]] + forced[:-1])
    assert np.allclose(rows, out.rows, atol=1e-5)


def test_jobs_runs_each_conversation_in_a_worker_and_merges_like_merge(data_file, tmp_path, capsys):
    """``--jobs 2`` on three conversations: one command, two workers (one of them runs two
    conversations on the model it loaded once), the same figures as the three
    conversations run apart and combined with ``--merge``."""
    from bench.memory import cli as bench_memory

    item = json.loads(data_file.read_text())[0]
    other = json.loads(json.dumps(item))
    other["sample_id"] = "conv-u"
    other["qa"] = other["qa"][:1]
    third = json.loads(json.dumps(other))
    third["sample_id"] = "conv-v"
    two = tmp_path / "three.json"
    two.write_text(json.dumps([item, other, third]))
    argv = ["--data", str(two), "--prune-to", "300", "--context", "520", "--max-new-tokens", "40",
            "--window", "600", "--diagnostics", "0", "--methods", "full,fifo"]
    assert bench_memory.main(argv + ["--jobs", "2", "--json"]) == 0
    together = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert together["conversations"] == ["conv-t", "conv-u", "conv-v"] and together["runs"] == 3
    assert together["elapsed_seconds"] > 0
    paths = []
    for conv in ("conv-t", "conv-u", "conv-v"):
        assert bench_memory.main(argv + ["--conversations", conv, "--json"]) == 0
        path = tmp_path / f"{conv}.out"
        path.write_text(capsys.readouterr().out)
        paths.append(str(path))
    assert bench_memory.main(["--merge", *paths, "--json"]) == 0
    apart = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for name, f in apart["methods"].items():
        g = together["methods"][name]
        assert g["questions"] == f["questions"] == 5, name
        for key in ("recall_overall", "delta_nll", "kept_attention_mass", "fidelity_turns", "mean_tokens"):
            assert g[key] == pytest.approx(f[key], abs=1e-4), (name, key)
    # Each conversation's own figures survive the merge (does every conversation agree?).
    for conv in ("conv-t", "conv-u", "conv-v"):
        alone = json.loads(Path(paths[("conv-t", "conv-u", "conv-v").index(conv)]).read_text().strip().splitlines()[-1])
        for name in ("full", "fifo"):
            assert together["per_conversation"][conv][name]["recall_overall"] == pytest.approx(
                alone["methods"][name]["recall_overall"], abs=1e-4), (conv, name)
    assert together["per_conversation"]["conv-t"]["full"]["recall_overall"] == 1.0


def grouped_model(layers: int = 2, seed: int = 0, positions: int = 256):
    """A tiny Llama with 3 query heads per key/value head (as SmolLM2 groups them)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=48, intermediate_size=64,
                                      num_hidden_layers=layers, num_attention_heads=6,
                                      num_key_value_heads=2, max_position_embeddings=positions)
    return transformers.LlamaForCausalLM(config).eval()


def forced_then_pruned(seed: int):
    """Two calls (input ids, forced ids, keys): 70 tokens forced after 150, then 9 more
    after a prune of a 30-token middle span (a KV shift)."""
    rng = np.random.default_rng(seed)
    ids, forced, more = (rng.integers(1, 64, n).tolist() for n in (150, 70, 9))
    keys = list(range(220))
    kept, kept_keys = ids[:30] + ids[60:] + forced[:-1], keys[:30] + keys[60:219]
    return (ids, forced, keys), (kept, more, kept_keys + list(range(300, 309)))


def test_grouped_attention_gives_eagers_rows_and_log_probabilities():
    """The grouped-query attention the replay reads rows from agrees with transformers'
    eager attention (3 query heads per key/value head, after a KV shift too)."""
    from bench.memory.attention import ModelAttention

    model = grouped_model()
    grouped, eager = ModelAttention(model, None, "shift"), ModelAttention(model, None, "shift")
    eager.rows_impl = "eager"
    for call in forced_then_pruned(3):
        a, b = grouped.force(*call), eager.force(*call)
        assert np.allclose(a.rows, b.rows, atol=1e-6) and np.allclose(a.logprobs, b.logprobs, atol=1e-5)
    assert grouped.stats.shifts == 1


def test_rows_summed_as_the_layers_run_are_the_stored_probabilities_summed(monkeypatch):
    """The replay's rows, summed into one buffer while each layer runs (no layer's
    probabilities kept to the end of the pass), are the very floats transformers' stored
    probabilities give when summed over heads and layers afterwards, after a KV shift too."""
    pytest.importorskip("transformers")
    from bench.memory import attention, gqa
    from bench.memory.attention import ModelAttention

    model = grouped_model(layers=3)
    summed, stored = ModelAttention(model, None, "shift"), ModelAttention(model, None, "shift")
    stored.sum_in_layers = False
    summed.one_pass = stored.one_pass = False  # the prompt in a pass of its own, as stored needs
    monkeypatch.setattr(attention, "SUMMED_BLOCK", attention.FORCED_BLOCK)  # the same passes
    calls = forced_then_pruned(5)
    for call in calls:
        a, b = summed.force(*call), stored.force(*call)
        # Same products, same order: equal to the last bit, not only close.
        assert np.array_equal(a.rows, b.rows) and np.array_equal(a.logprobs, b.logprobs)
        if call is calls[0]:
            assert a.rows.shape == (70, 219) and np.allclose(a.rows.sum(1), 1, atol=1e-5)
    assert summed.stats.shifts == stored.stats.shifts == 1
    assert gqa.Rows.active is None  # nothing left reading rows after the pass
    # The prompt run in the forced tokens' pass (its rows skipped): the same to rounding.
    one, stored = ModelAttention(model, None, "shift"), ModelAttention(model, None, "shift")
    stored.sum_in_layers = False
    stored.one_pass = False
    for call in calls:
        a, b = one.force(*call), stored.force(*call)
        assert np.allclose(a.rows, b.rows, atol=1e-6) and np.allclose(a.logprobs, b.logprobs, atol=1e-5)
    assert one.stats.calls == 2 and one.stats.forced_tokens == 70 + 9
    assert one.stats.by_kind["forced"][0] == 150 + 70 - 1 + 9  # two passes ran every token once


def test_a_cache_growing_in_place_gives_the_same_floats_as_concatenation():
    """The replay's cache layers write each pass after what they hold (no copy of the
    whole cache per pass); forcing through them, a KV shift and a restore from kept cells
    included, gives the rows and log-probabilities transformers' own concatenating cache
    gives, to the bit; a shift within the layer's own buffer too (only the moved rows
    rewritten); and a tensor the shared prefix holds is never written into."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from bench.memory.attention import ModelAttention
    from bench.memory.kv_buffer import GrowingLayer

    model = grouped_model(seed=2, positions=512)
    growing, concatenating = ModelAttention(model, None, "shift"), ModelAttention(model, None, "shift")
    concatenating._new_cache = lambda: transformers.DynamicCache(config=model.config)
    for source in (growing, concatenating):
        source.reset(keep_pruned=True)
    rng = np.random.default_rng(9)
    ids, forced, more, again, last = (rng.integers(1, 64, n).tolist() for n in (120, 40, 12, 9, 6))
    keys = list(range(160))
    calls = [(ids, forced, keys),
             # a prune: a middle span leaves, the rest shifts back (a new buffer: the
             # shared prefix holds views of the first one)
             (ids[:20] + ids[50:] + forced[:-1] + [5], more, keys[:20] + keys[50:159] + [400] + list(range(401, 413))),
             # the span comes back from kept cells, at its old place (within the buffer)
             (ids + forced[:-1] + [5] + more[:-1] + [7], again, keys[:159] + [400] + list(range(401, 412)) + [500]
              + list(range(501, 510))),
             # another prune, within the buffer: only the rows after the gap move
             (ids[:10] + ids[40:] + forced[:-1] + [5] + more[:-1] + [7] + again[:-1] + [9], last,
              keys[:10] + keys[40:159] + [400] + list(range(401, 412)) + [500] + list(range(501, 509)) + [600]
              + list(range(601, 607)))]
    for call in calls:
        a, b = growing.force(*call), concatenating.force(*call)
        assert np.array_equal(a.rows, b.rows) and np.array_equal(a.logprobs, b.logprobs)
    assert growing.stats.shifts == 3 and growing.stats.restored_tokens == 30
    assert growing.stats.in_place_shifts == 2
    assert all(isinstance(layer, GrowingLayer) for layer in growing._cache.layers)
    # A prefix another replay adopted is copied before anything is written after it.
    shared = list(growing.shared.layers)
    held = [(k.clone(), v.clone()) for k, v in shared]
    other = ModelAttention(model, None, "shift")
    other.shared = growing.shared
    other.force(ids, forced, keys)  # served from the shared calls
    other.force(ids + forced[:-1] + [3], more, keys[:159] + list(range(700, 713)))
    assert other.shared.adopted_tokens == 159
    assert all(torch.equal(k, hk) and torch.equal(v, hv) for (k, v), (hk, hv) in zip(shared, held))


def test_labels_of_methods_that_nearly_coincide_are_stacked():
    """The fidelity plot prints each method's name by its point; an earlier run's
    fifo-halo, recent-halo and halo (ΔNLL 0.0438 / 0.0438 / 0.0444, recall 0.806 / 0.805 /
    0.807) got three different lines, the far-away points the usual one."""
    from bench.memory.report import label_offsets

    xs = [0.0, 0.0189, 0.0444, 0.0438, 0.0438, -0.0012, -0.0056]  # full, fifo, halo, ...
    ys = [1.0, 0.084, 0.807, 0.806, 0.805, 0.799, 0.802]
    offsets = label_offsets(xs, ys)
    assert offsets[0] == offsets[1] == 3
    assert len({offsets[2], offsets[3], offsets[4]}) == 3
    assert offsets[5] != offsets[6]  # fifo-halo-live and lazy-fifo-halo, 0.0044 apart

"""Brightness rules beside seed 001's voting: decayed / accumulated attention mass, new
tokens at the live median, chunks ranked by a top-k mean, and pruning by age as a setting."""

from __future__ import annotations

import re

import numpy as np

from halo_weave.brightness import attention_mass, chunk_scores
from halo_weave.conversation import Conversation
from halo_weave.memory import proxy
from halo_weave.rules import BRIGHTNESS_RULES, CHUNK_RANKS, PRUNE_ORDERS
from halo_weave.settings import CHOICES, MAX_BRIGHTNESS, Settings

TEXT = "\n\n".join(f"Paragraph {i} has a handful of words in it to fill a chunk." for i in range(3))


def _say(conv: Conversation, role: str, text: str):
    pieces = re.findall(r"\n|[^\S\n]*[^\s]+", text)
    return conv.add_turn(role, [1000 + i for i in range(len(pieces))], pieces)


def _conversation(**settings) -> Conversation:
    settings.setdefault("prune_order", "brightness")  # the rules under test decide pruning
    conv = Conversation(Settings.of(min_chunk_tokens=8, **settings))
    for t in range(4):
        _say(conv, "user" if t % 2 == 0 else "assistant", TEXT)
    return conv


def _attend(conv: Conversation, hot_rows: list[int], steps: int, weight: float = 0.3) -> None:
    """``steps`` generated tokens: half the attention on a sink (row 0, the first
    token), ``weight`` shared by ``hot_rows``, the rest spread evenly (below a fair share)."""
    n_sys, n = len(conv.system.ids), len(conv.table)
    row = np.full(n_sys + n, (0.5 - weight) / max(n - len(hot_rows) - 1, 1), np.float32)
    row[n_sys] = 0.5
    if hot_rows:
        row[[n_sys + r for r in hot_rows]] = weight / len(hot_rows)
    row /= row.sum()
    for _ in range(steps):
        conv.apply_attention(row)


def test_decayed_mass_does_not_saturate_and_fades_what_is_no_longer_read():
    values = np.array([10_000, 10_000, 0], np.int32)
    attention = np.array([0.9, 0.05, 0.05], np.float32)
    threshold = 1.0 / 3
    for _ in range(200):
        attention_mass(values, attention, threshold, unit=100.0, half_life=64)
    # The read token climbs past the seed's cap; the ignored ones settle low, in order.
    assert values[0] > 2 * MAX_BRIGHTNESS
    assert values[1] < values[0] / 5
    unread = np.array([5, 500], np.int32)
    for _ in range(3000):
        attention_mass(unread, np.zeros(2, np.float32), 0.5, unit=1.0, half_life=64)
    assert unread.tolist() == [0, 0]  # fades all the way, never negative


def test_plain_mass_only_grows():
    values = np.array([3, 3], np.int32)
    for _ in range(10):
        attention_mass(values, np.array([0.8, 0.2], np.float32), 0.5, unit=1.0, half_life=0)
    assert values[0] > values[1] >= 3


def test_top_k_mean_is_robust_to_one_stray_token():
    values = np.array([9000, 0, 0, 0, 5000, 5000, 5000, 5000], np.int32)
    starts = np.array([0, 4])
    assert chunk_scores(values, starts, "peak").tolist() == [9000, 5000]
    assert chunk_scores(values, starts, "topk", 4).tolist() == [2250, 5000]
    assert chunk_scores(values, starts, "topk", 1).tolist() == [9000, 5000]


def test_decay_rule_keeps_the_chunk_the_model_reads():
    conv = _conversation(brightness_rule="decay", brightness_half_life=32)
    old = conv.content_chunks(0)[1]  # an old, non-anchor chunk of the first question
    rows = list(range(conv.chunk_rows(old).start, conv.chunk_rows(old).start + 1))
    _attend(conv, rows, 200)  # one token of it read every step
    ids, scores = conv.chunk_peaks()
    score = dict(zip(ids.tolist(), scores.tolist()))
    assert score[old.id] > MAX_BRIGHTNESS  # one truly bright token lifts its chunk
    others = [score[c.id] for t in (1, 2, 3) for c in conv.content_chunks(t)]
    assert max(others) < MAX_BRIGHTNESS / 2  # unread chunks faded
    pruned = conv.prune_to_fit(conv.live_token_count() - 20)
    assert pruned and old.live and old.id not in {c.id for c in pruned}


def test_new_turns_start_at_the_live_median_not_the_cap():
    conv = _conversation(brightness_rule="decay", brightness_half_life=16, new_token_brightness="median")
    _attend(conv, [1], 100)
    median = int(np.median(conv.table.brightness[~conv.table.framing]))
    turn = _say(conv, "user", "A new question arrives now.")
    fresh = conv.table.brightness[conv.chunk_rows(conv.content_chunks(turn.turn_id)[0])]
    assert median < MAX_BRIGHTNESS and set(fresh.tolist()) == {median}


def test_prune_order_age_prunes_the_oldest_whatever_the_brightness():
    conv = _conversation(prune_order="age")
    old = conv.content_chunks(0)[1]
    _attend(conv, list(range(conv.chunk_rows(old).start, conv.chunk_rows(old).stop)), 50)
    pruned = conv.prune_to_fit(conv.live_token_count() - 5)
    assert [(c.turn_id, c.chunk_index) for c in pruned if not c.framing] == [(0, 1)]


def test_resurrection_brings_back_the_score_at_prune_no_gift():
    conv = _conversation(brightness_rule="decay", brightness_half_life=16)
    _attend(conv, [1], 100)
    chunk = conv.content_chunks(2)[1]
    before = conv.table.brightness[conv.chunk_rows(chunk)].copy()
    conv.prune_chunk(chunk.id)
    conv.resurrect([chunk.id], brightness="at_prune")
    assert conv.table.brightness[conv.chunk_rows(chunk)].tolist() == before.tolist()
    assert before.max() < MAX_BRIGHTNESS


def _content_ids(conv: Conversation, turns) -> set[int]:
    return {c.id for t in turns for c in conv.content_chunks(t)}


def _read_all_but_the_last_turn(conv: Conversation) -> None:
    rows = [r for t in (0, 1, 2) for c in conv.content_chunks(t)
            for r in range(conv.chunk_rows(c).start, conv.chunk_rows(c).stop)]
    _attend(conv, rows, 100, weight=0.45)


def test_recent_window_keeps_the_newest_turn_the_model_has_not_read_yet():
    # H2O's shape: the newest tokens (what the model goes on from) are spared even when
    # attention has not reached them; among the older ones attention decides.
    bare = _conversation(brightness_rule="decay", brightness_half_life=16)
    _read_all_but_the_last_turn(bare)
    gone = {c.id for c in bare.prune_to_fit(bare.live_token_count() - 30)}
    assert gone & _content_ids(bare, [3])  # without the window the unread newest turn goes
    conv = _conversation(brightness_rule="decay", brightness_half_life=16, prune_keep_recent=60)
    _read_all_but_the_last_turn(conv)
    pruned = {c.id for c in conv.prune_to_fit(conv.live_token_count() - 30)}
    assert pruned and not pruned & _content_ids(conv, [3])
    assert all(c.live for c in conv.content_chunks(3))
    assert conv.live_token_count() <= bare.live_token_count() + 30  # the limit still held


def test_recent_window_never_stops_pruning_from_reaching_its_target():
    conv = _conversation(brightness_rule="decay", brightness_half_life=16, prune_keep_recent=10_000)
    _attend(conv, [1], 20)
    target = conv.live_token_count() - 50
    conv.prune_to_fit(target)
    assert conv.live_token_count() <= target


def test_mean_rank_scores_a_chunk_by_its_attention_per_token():
    values = np.array([9000, 0, 0, 0, 5000, 5000, 5000, 5000], np.int32)
    assert chunk_scores(values, np.array([0, 4]), "mean").tolist() == [2250, 5000]
    conv = _conversation(brightness_rule="decay", brightness_half_life=16, chunk_rank="mean")
    stray, read = conv.content_chunks(0)[1], conv.content_chunks(0)[2]
    rows = conv.chunk_rows(read)
    _attend(conv, [conv.chunk_rows(stray).start] + list(range(rows.start, rows.stop)), 60, weight=0.4)
    ids, scores = conv.chunk_peaks()  # the score the heatmap colours by, too
    score = dict(zip(ids.tolist(), scores.tolist()))
    assert score[read.id] > score[stray.id] > 0


def test_a_resurrected_chunk_gets_no_shelter_from_the_recent_window():
    # Back at its old place with its old score: the window covers the newest tokens, not
    # the newest arrivals, so the dim resurrected chunk goes again before the newest turn.
    conv = _conversation(brightness_rule="decay", brightness_half_life=16, prune_keep_recent=60)
    dim = conv.content_chunks(1)[1]
    rows = [r for t in (0, 1, 2) for c in conv.content_chunks(t) if c.id != dim.id
            for r in range(conv.chunk_rows(c).start, conv.chunk_rows(c).stop)]
    _attend(conv, rows, 100, weight=0.45)
    score_before = conv.chunk_peak(dim.id)
    conv.prune_chunk(dim.id)
    conv.resurrect([dim.id], brightness="at_prune")
    assert conv.chunk_peak(dim.id) == score_before < MAX_BRIGHTNESS  # no gift
    pruned = conv.prune_to_fit(conv.live_token_count() - 5)
    assert [c.id for c in pruned if not c.framing] == [dim.id]
    assert all(c.live for c in conv.content_chunks(3))


def _read_last_answer(conv: Conversation, hot_row: int) -> None:
    """The reader reads the last answer: every answer token puts half its attention on a
    sink and most of the rest on the context row ``hot_row``."""
    plan = proxy.plan_read(conv, 512)
    cells = plan.tokens - 1
    rows = np.full((len(plan.answer_ids), cells), 0.05 / cells, np.float32)
    rows[:, 0] = 0.5
    rows[:, plan.n_system + hot_row] = 0.45
    rows /= rows.sum(axis=1, keepdims=True)
    proxy.apply(conv, plan, proxy.votes(plan, rows, conv.settings), conv.settings)


def test_the_reader_scores_by_the_rule_the_settings_name():
    """The reader's attention goes through the chosen brightness rule: capped votes, or
    an attention mass that keeps rising past the cap."""
    voted, summed = _conversation(brightness_rule="vote"), _conversation(brightness_rule="mass")
    for conv in (voted, summed):
        _read_last_answer(conv, hot_row=5)
    assert voted.table.brightness.max() == MAX_BRIGHTNESS
    assert summed.table.brightness[5] > MAX_BRIGHTNESS


def test_every_registered_rule_is_a_choice_in_the_settings():
    """A rule joins the settings dialog by joining its registry, nothing else."""
    for field, registry in (("brightness_rule", BRIGHTNESS_RULES), ("chunk_rank", CHUNK_RANKS),
                            ("prune_order", PRUNE_ORDERS)):
        assert [c.value for c in CHOICES[field]] == list(registry)
        for name in registry:
            conv = _conversation(**{field: name})
            _attend(conv, [3], steps=5)
            assert conv.prune_to_fit(conv.live_token_count() - 1), f"{field}={name} prunes"

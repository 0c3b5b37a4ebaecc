"""Lining a cached context up with the next request: what was pruned, what came back."""

from __future__ import annotations

from halo_weave.server.kv_surgery import (
    TAIL_FIRST_MIN_PAIRS,
    Edit,
    SyncReport,
    merge_reports,
    plan_edits,
    prefer_exact,
    split_tail,
    tail_first_ids,
)

PARAGRAPH = list(range(100, 140))  # the same text in every turn, as quoted replies repeat


def chat(turn_numbers) -> list[int]:
    ids = [1, 50, 2]  # a system prompt
    for k in turn_numbers:
        ids += [1, 5, 900 + k, 7] + PARAGRAPH + [2]
    return ids


def apply(cached: list[int], wanted: list[int], edits: list[Edit]) -> list[int]:
    out, at = [], 0
    for e in edits:
        out += cached[at:e.cached_start] + wanted[e.start:e.end]
        at = e.cached_end
    return out + cached[at:]


def test_equal_contexts_need_no_edit_and_a_new_turn_is_a_tail():
    assert plan_edits(chat(range(5)), chat(range(5))) == []
    edits = plan_edits(chat(range(5)), chat(range(6)))
    assert len(edits) == 1 and edits[0].removed == 0 and edits[0].end == len(chat(range(6)))


def test_a_pruned_turn_is_one_removal_even_when_every_turn_repeats_the_same_text():
    cached, wanted = chat(range(10)), chat([0, 1, 2, 4, 5, 6, 7, 8, 9])
    edits = plan_edits(cached, wanted)
    assert [(e.removed, e.inserted) for e in edits] == [(45, 0)]
    assert apply(cached, wanted, edits) == wanted


def test_a_resurrected_turn_is_one_insertion_at_its_old_place():
    cached, wanted = chat([0, 1, 2, 4, 5, 6, 7, 8, 9]), chat(range(10))
    edits = plan_edits(cached, wanted)
    middle, tail = split_tail(edits, len(cached), len(wanted))
    assert tail is None and [(e.removed, e.inserted) for e in middle] == [(0, 45)]
    assert apply(cached, wanted, edits) == wanted


def test_prune_resurrect_and_a_new_turn_in_one_request():
    cached = chat([0, 1, 2, 4, 5, 6, 7, 8, 9])
    wanted = chat([0, 1, 2, 3, 4, 5, 7, 8, 9, 10])
    edits = plan_edits(cached, wanted)
    middle, tail = split_tail(edits, len(cached), len(wanted))
    assert [(e.removed, e.inserted) for e in middle] == [(0, 45), (45, 0)]
    assert tail is not None and tail.inserted == 45
    assert apply(cached, wanted, edits) == wanted


def test_re_running_wins_when_the_insertions_cost_about_as_much():
    assert not prefer_exact([Edit(100, 100, 100, 150)], wanted_len=1000)
    assert prefer_exact([Edit(900, 900, 900, 960)], wanted_len=1000)


# ---------------------------------------------------------------- tail first


def turn(k: int, length: int = 30) -> list[int]:
    """A turn whose text is its own (no repeated paragraph)."""
    return [1, 5, 900 + k, 7] + [2000 + 100 * k + i for i in range(length)] + [2]


def chat_of(*turns: int, tail: int = 0) -> list[int]:
    ids = [1, 50, 2]
    for k in turns:
        ids += turn(k)
    return ids + (turn(99, tail - 5) if tail else [])


def between(cached, wanted, min_pairs=0):
    """The intermediate ids, however small the saving (``min_pairs=0``)."""
    return tail_first_ids(cached, wanted, plan_edits(cached, wanted), min_pairs=min_pairs)


def check_two_passes(cached, wanted) -> list[int]:
    """The intermediate ids, checked: ``wanted`` less the inserted spans; pass 1 (cached ->
    them) inserts nothing and appends the whole new message; pass 2 (them -> wanted)
    removes nothing, inserts every span and leaves the message alone."""
    edits = plan_edits(cached, wanted)
    middle, tail = split_tail(edits, len(cached), len(wanted))
    mid = tail_first_ids(cached, wanted, edits, min_pairs=0)
    assert mid is not None
    left_out = [k for e in middle for k in range(e.start, e.end)]
    assert mid == [t for k, t in enumerate(wanted) if k not in set(left_out)]
    middle1, tail1 = split_tail(plan_edits(cached, mid), len(cached), len(mid))
    middle2, tail2 = split_tail(plan_edits(mid, wanted), len(mid), len(wanted))
    assert all(e.inserted == 0 for e in middle1) and tail1 == Edit(tail.cached_start, len(cached),
                                                                    len(mid) - tail.inserted, len(mid))
    assert sum(e.removed for e in middle1) == sum(e.removed for e in middle)
    assert tail2 is None and all(e.removed == 0 for e in middle2)
    assert sum(e.inserted for e in middle2) == len(left_out)
    return mid


def test_a_resurrection_with_a_new_message_runs_the_message_before_the_span():
    cached, wanted = chat_of(0, 1, 3, 4), chat_of(0, 1, 2, 3, 4, tail=40)
    assert check_two_passes(cached, wanted) == chat_of(0, 1, 3, 4, tail=40)


def test_a_prune_and_a_resurrection_in_one_request_prune_first_then_insert():
    cached, wanted = chat_of(0, 1, 3, 4, 5), chat_of(0, 2, 3, 5, tail=50)  # 1, 4 pruned; 2 back
    middle, _ = split_tail(plan_edits(cached, wanted), len(cached), len(wanted))
    assert [(e.removed > 0, e.inserted > 0) for e in middle] == [(True, True), (True, False)]
    mid = check_two_passes(cached, wanted)
    assert len(mid) == len(chat_of(0, 3, 5, tail=50)) + 3  # turn 2's framing is turn 1's


def test_a_replacement_at_one_place_becomes_a_removal_then_an_insertion():
    cached, wanted = chat_of(0, 1, 7, 3), chat_of(0, 1, 2, 3, tail=30)  # 7 pruned where 2 comes back
    middle, _ = split_tail(plan_edits(cached, wanted), len(cached), len(wanted))
    assert len(middle) == 1 and middle[0].removed == middle[0].inserted == len(turn(2)) - 3
    check_two_passes(cached, wanted)


def test_an_insertion_right_before_the_message_is_part_of_the_tail_and_an_earlier_one_is_not():
    cached = chat_of(0, 1, 3)
    # Back at the very end: nothing tells the span from the message, so all of it is tail.
    assert between(cached, chat_of(0, 1, 3, 2, tail=40)) is None
    # Back just before the last cached turn: the message still runs first.
    assert check_two_passes(cached, chat_of(0, 1, 2, 3, tail=40)) == chat_of(0, 1, 3, tail=40)


def test_tail_first_only_when_spans_come_back_and_a_message_is_long_enough():
    cached = chat_of(0, 1, 3, 4)
    assert between(cached, chat_of(0, 1, 2, 3, 4)) is None  # no new tokens
    assert between(cached, chat_of(0, 1, 2, 3, 4, tail=10)) is None  # too few to pay
    assert between(cached, chat_of(0, 1, 4, tail=40)) is None  # a prune only: nothing to insert
    assert between(cached, chat_of(0, 1, 3, 4, tail=40)) is None  # a plain turn
    # Inserting at the very start (no system prompt kept) may be re-run from 0: not two passes.
    assert between(turn(1) + turn(3), list(range(5000, 5030)) + turn(1) + turn(3) + turn(99, 35)) is None


def test_tail_first_is_left_out_when_re_running_is_the_better_way():
    cached, wanted = chat_of(0, 1, 3, 4), chat_of(0, 1, 2, 3, 4, tail=40)
    edits = plan_edits(cached, wanted)
    assert tail_first_ids(cached, wanted, edits, running=0, min_pairs=0) is not None  # span stored
    assert tail_first_ids(cached, wanted, edits, running=len(wanted), min_pairs=0) is None  # exact ahead


def test_tail_first_waits_for_enough_inserted_tokens_under_the_message():
    cached = chat_of(0, 1, 3, 4)
    small = chat_of(0, 1, 2, 3, 4, tail=40)  # 35 tokens back under 40 new: not worth a pass
    assert tail_first_ids(cached, small, plan_edits(cached, small)) is None
    many = [1, 50, 2] + turn(0) + sum((turn(k, 200) for k in range(10, 20)), []) + turn(1) + turn(3) + turn(4)
    wanted = many + turn(99, 75)  # ten stored spans of 205 tokens back under an 80-token message
    assert 80 * 2050 >= TAIL_FIRST_MIN_PAIRS
    mid = tail_first_ids(cached, wanted, plan_edits(cached, wanted), running=0)
    assert mid == chat_of(0, 1, 3, 4) + turn(99, 75)


def test_a_tail_first_report_counts_each_token_once_and_the_tail_as_run_early():
    first = SyncReport(mode="surgery", reused=900, moved=600, dropped=120, stored=120, appended=60,
                       spans_removed=1, grown_to=2048, carried=1000, store_s=0.01)
    second = SyncReport(mode="surgery", reused=960, moved=400, inserted=30, restored=150,
                        spans_inserted=2, restore_s=0.02, insert_s=0.2)
    report = merge_reports(first, second)
    assert (report.reused, report.appended, report.inserted, report.restored) == (900, 60, 30, 150)
    assert (report.dropped, report.stored, report.moved) == (120, 120, 1000)
    assert (report.spans_removed, report.spans_inserted, report.tail_first) == (1, 2, 60)
    assert report.computed == 90 and report.grown_to == 2048 and report.mode == "surgery"
    assert report.as_dict()["tail_first"] == 60

"""Lining a cached context up with the next request: what was pruned, what came back."""

from __future__ import annotations

from halo_weave.server.kv_surgery import Edit, plan_edits, prefer_exact, split_tail

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

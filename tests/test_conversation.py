"""The conversation engine: chunking, framing, pruning with anchors, resurrection."""

from __future__ import annotations

import re

import numpy as np
import pytest

from halo_weave.core import token_resurrection
from halo_weave.conversation import Conversation, ConversationError, Framing
from halo_weave.settings import MAX_BRIGHTNESS, Settings

FRAMING = Framing(
    prefix={
        "system": ([90, 91], ["<|im_start|>", "system\n"]),
        "user": ([90, 92], ["<|im_start|>", "user\n"]),
        "assistant": ([90, 93], ["<|im_start|>", "assistant\n"]),
    },
    suffix={role: ([94, 95], ["<|im_end|>", "\n"]) for role in ("system", "user", "assistant")},
)


def words(text: str) -> tuple[list[int], list[str]]:
    """Word-level tokens (a test tokenizer: each word with its leading space or newline)."""
    pieces = re.findall(r"\n|[^\S\n]*[^\s]+", text)
    return [1000 + i for i in range(len(pieces))], pieces


def make(min_chunk=8, max_context=0, **kw) -> Conversation:
    # These tests follow the seed's walk-throughs: pruning by brightness (dimmest first),
    # not the app's default order (oldest first).
    kw.setdefault("prune_order", "brightness")
    conv = Conversation(Settings.of(min_chunk_tokens=min_chunk, max_context_tokens=max_context, **kw), FRAMING)
    conv.set_system_prompt("Be brief.", [90, 91, 500, 501, 94, 95], ["<|im_start|>", "system\n", "Be", " brief.", "<|im_end|>", "\n"])
    return conv


def say(conv: Conversation, role: str, text: str):
    ids, texts = words(text)
    return conv.add_turn(role, ids, texts)


def set_peak(conv: Conversation, turn_id: int, chunk_index: int, role: str, value: int) -> None:
    chunk = conv.chunk_by_key(turn_id, chunk_index, role)
    conv.table.brightness[conv.chunk_rows(chunk)] = value


def texts_of(conv, turn) -> list[str]:
    return [conv.chunk_text(c.id) for c in conv.content_chunks(turn.turn_id)]


# --------------------------------------------------------------------- chunking
def test_grocery_list_stays_with_the_sentence_that_explains_it():
    """Short lines merge forward until the chunk has min_chunk_tokens."""
    conv = make(min_chunk=16)
    turn = say(
        conv, "user",
        "Groceries:\n- Milk\n- Eggs\n- Bread\n\nGet these today, mom needs them for dinner on Tuesday.\n\n"
        "Also remind me to call the plumber about the leaking kitchen tap tomorrow morning please.",
    )
    chunks = texts_of(conv, turn)
    assert len(chunks) == 2
    assert "Milk" in chunks[0] and "Tuesday" in chunks[0]
    assert "plumber" in chunks[1]


def test_code_block_ends_at_closing_brace_or_fence():
    conv = make(min_chunk=6)
    turn = say(
        conv, "assistant",
        "Here is the function you asked for:\n```\nfunction add(a, b) {\n  return a + b;\n}\n```\n"
        "Call it with two numbers and it returns their sum.",
    )
    chunks = texts_of(conv, turn)
    assert len(chunks) >= 2
    # The code block ends a chunk; the explanation after it starts a new one.
    assert chunks[0].rstrip().endswith(("}", "```"))
    assert "Call it" in chunks[-1] and "Call it" not in chunks[0]


def test_no_boundary_before_min_chunk_tokens():
    conv = make(min_chunk=64)
    turn = say(conv, "user", "One.\n\nTwo.\n\nThree.\n\nFour.")
    assert len(conv.content_chunks(turn.turn_id)) == 1


def test_streamed_and_whole_turns_chunk_identically():
    text = "Intro line here with words.\n\nSecond paragraph with more words in it.\n\nThird one closes."
    whole, streamed = make(min_chunk=5), make(min_chunk=5)
    say(whole, "assistant", text)
    turn = streamed.begin_turn("assistant")
    for token_id, piece in zip(*words(text)):
        streamed.append_token(token_id, piece)
    streamed.end_turn()
    assert texts_of(whole, whole.turns[0]) == texts_of(streamed, turn)
    assert len(texts_of(streamed, turn)) == 3


# --------------------------------------------------------------------- framing and positions
def test_framing_wraps_each_turn_and_input_ids_follow_positions():
    conv = make()
    say(conv, "user", "Hello there.")
    ids = conv.live_input_ids().tolist()
    assert ids[:6] == [90, 91, 500, 501, 94, 95]  # system prefix first
    assert ids[6:8] == [90, 92] and ids[-2:] == [94, 95]
    assert conv.live_token_count() == len(ids)
    positions = conv.table.position.copy()
    assert positions.tolist() == list(range(len(ids) - 6))


def test_positions_are_never_reused_after_pruning():
    conv = make(min_chunk=3)
    say(conv, "user", "alpha beta gamma.\n\ndelta epsilon zeta.\n\neta theta iota.")
    say(conv, "assistant", "one two three.\n\nfour five six.")
    before = conv.next_position
    conv.prune_chunk(conv.chunk_by_key(0, 1, "user").id)
    say(conv, "user", "kappa lambda mu.")
    assert conv.chunks[max(conv.chunks)].start >= before
    assert np.all(np.diff(conv.table.position) > 0)


# --------------------------------------------------------------------- brightness
def test_magnitude_voting_rewards_attention_and_decays_the_rest():
    conv = make(min_chunk=100)
    say(conv, "user", "a b c d e f g h")
    n = conv.live_token_count()
    rows = np.flatnonzero(~conv.table.framing)
    attention = np.zeros(n, np.float32)
    attention[2] = 0.5  # a sink inside the system prompt, not at index 0
    sys_n = len(conv.system.ids)
    attention[sys_n + rows[0]] = 0.3
    attention[sys_n + rows[1]] = 0.2
    conv.table.brightness[:] = 100
    conv.apply_attention(attention)
    threshold = (1 - 0.5) / (n - 1)
    b = conv.table.brightness
    assert b[rows[0]] == 100 + int(np.floor(np.float32(0.3) / np.float32(threshold)))
    assert b[rows[1]] == 100 + int(np.floor(np.float32(0.2) / np.float32(threshold)))
    assert np.all(b[rows[2:]] == 99)  # flat decay
    assert np.all(b[conv.table.framing] == 100)  # framing never scored


def test_brightness_is_capped_and_has_no_floor():
    conv = make(min_chunk=100)
    say(conv, "user", "a b c d")
    rows = np.flatnonzero(~conv.table.framing)
    n = conv.live_token_count()
    conv.table.brightness[rows[0]] = MAX_BRIGHTNESS - 1
    conv.table.brightness[rows[1]] = -5
    attention = np.full(n, 0.0, np.float32)
    attention[0] = 0.5
    attention[len(conv.system.ids) + rows[0]] = 0.5
    conv.apply_attention(attention)
    assert conv.table.brightness[rows[0]] == MAX_BRIGHTNESS
    assert conv.table.brightness[rows[1]] == -6


def test_current_turn_scoring_is_a_setting():
    for score_current in (True, False):
        conv = make(min_chunk=100, score_current_turn=score_current)
        say(conv, "user", "a b c")
        turn = conv.begin_turn("assistant")
        conv.append_token(7, " x")
        n = conv.live_token_count()
        conv.apply_attention(np.full(n, 1.0 / n, np.float32))  # all at the fair share: decay
        row = conv.chunk_rows(conv.content_chunks(turn.turn_id)[0]).start
        assert (conv.table.brightness[row] < MAX_BRIGHTNESS) == score_current


def test_attention_of_the_wrong_length_is_refused_and_brightness_untouched():
    from halo_weave.brightness import AttentionError

    conv = make()
    say(conv, "user", "hello world")
    before = conv.table.brightness.copy()
    with pytest.raises(AttentionError):
        conv.apply_attention(np.full(conv.live_token_count() + 3, 0.01, np.float32))
    assert np.array_equal(before, conv.table.brightness)


# --------------------------------------------------------------------- pruning
def seed_turns_3_and_4() -> Conversation:
    """The design's worked example: user turn 3 (S0..S2) and assistant turn 4 (S0..S4)."""
    conv = make(min_chunk=3)
    for _ in range(3):  # turns 0..2 so that the example's ids match the seed
        say(conv, "user" if conv.next_turn_id % 2 == 0 else "assistant", "filler words here.")
    conv.remove_turns_from(0)  # ids are not reused: the next turn is 3
    assert conv.next_turn_id == 3
    say(conv, "user", "u zero here.\n\nu one here.\n\nu two here.")
    say(conv, "assistant", "a zero here.\n\na one here.\n\na two here.\n\na three here.\n\na four here.")
    peaks = {(3, 0, "user"): 9000, (3, 1, "user"): 50, (3, 2, "user"): 500,
             (4, 0, "assistant"): 9000, (4, 1, "assistant"): 60, (4, 2, "assistant"): 600,
             (4, 3, "assistant"): 8000, (4, 4, "assistant"): 10}
    for key, value in peaks.items():
        set_peak(conv, *key, value)
    return conv


def test_seed_anchor_example_prunes_skeleton_last_and_pairs_together():
    conv = seed_turns_3_and_4()
    pruned = conv.prune_to_fit(len(conv.system.ids) + 1)
    content = [c.key for c in pruned if not c.framing]
    assert content[:0] == []
    order = [c.key for c in sorted((c for c in pruned if not c.framing), key=lambda c: c.start)]
    assert set(order) == {(3, s, "user") for s in range(3)} | {(4, s, "assistant") for s in range(5)}
    # Nothing is live any more, framing included: both anchors left together.
    assert len(conv.table) == 0


def test_seed_anchor_example_step_by_step():
    conv = seed_turns_3_and_4()
    live = lambda: {c.key for c in conv.live_chunks() if not c.framing}  # noqa: E731
    size = lambda key: conv.chunk_by_key(*key).token_count  # noqa: E731
    expected = [(4, 4, "assistant"), (3, 1, "user"), (4, 1, "assistant"),
                (3, 2, "user"), (4, 2, "assistant"), (4, 3, "assistant")]
    for key in expected:
        target = conv.live_token_count() - size(key)
        pruned = conv.prune_to_fit(target)
        assert [c.key for c in pruned] == [key]
    assert live() == {(3, 0, "user"), (4, 0, "assistant")}
    pruned = conv.prune_to_fit(conv.live_token_count() - 1)
    assert {c.key for c in pruned if not c.framing} == {(3, 0, "user"), (4, 0, "assistant")}


def test_anchor_is_protected_while_its_turn_has_other_chunks():
    conv = seed_turns_3_and_4()
    set_peak(conv, 3, 0, "user", -100)  # the dimmest chunk of all is an anchor
    pruned = conv.prune_to_fit(conv.live_token_count() - 1)
    assert [c.key for c in pruned] == [(4, 4, "assistant")]
    assert conv.chunk_by_key(3, 0, "user").live


def test_pinned_chunks_and_system_prompt_survive_any_budget():
    conv = seed_turns_3_and_4()
    conv.pin(conv.chunk_by_key(4, 4, "assistant").id)
    conv.prune_to_fit(1)
    assert conv.chunk_by_key(4, 4, "assistant").live
    assert conv.chunk_by_key(4, 0, "assistant").live  # its turn keeps its anchor
    assert conv.live_input_ids()[:6].tolist() == [90, 91, 500, 501, 94, 95]


def test_prune_records_brightness_at_prune_and_fills_the_graveyard():
    conv = seed_turns_3_and_4()
    pruned = conv.prune_to_fit(conv.live_token_count() - 1)
    chunk = pruned[0]
    assert chunk.brightness_at_prune == 10 and not chunk.live
    assert conv.graveyard()[0].key == chunk.key
    assert conv.chunk_text(chunk.id).strip() == "a four here."


def test_framing_leaves_with_the_last_chunk_of_its_turn():
    conv = make(min_chunk=3)
    say(conv, "user", "only chunk here.")
    say(conv, "assistant", "reply chunk here.")
    conv.prune_chunk(conv.chunk_by_key(0, 0, "user").id)
    assert 92 not in conv.live_input_ids().tolist()  # "user\n" framing gone
    assert 93 in conv.live_input_ids().tolist()


# --------------------------------------------------------------------- resurrection and levers
def test_resurrection_returns_chunk_to_its_place_with_anchors():
    conv = seed_turns_3_and_4()
    ids_before = conv.live_input_ids().copy()
    conv.prune_to_fit(len(conv.system.ids) + 1)
    target = conv.chunk_by_key(4, 3, "assistant")
    cost = token_resurrection.cost(conv, target)
    resurrected = conv.resurrect([target.id])
    assert {c.key for c in resurrected if not c.framing} == {(4, 3, "assistant"), (3, 0, "user"), (4, 0, "assistant")}
    assert cost == sum(c.token_count for c in resurrected)
    ids = conv.live_input_ids().tolist()
    # The resurrected tokens appear in their original order and relative place.
    assert ids == [i for i in ids_before.tolist() if i in ids] and ids[:6] == ids_before[:6].tolist()
    assert np.all(np.diff(conv.table.position) > 0)
    # "no gifts": brightness as at prune
    assert conv.chunk_peak(target.id) == 8000


def test_resurrection_brightness_rules():
    conv = seed_turns_3_and_4()
    conv.prune_to_fit(conv.live_token_count() - 1)  # a4 (peak 10) goes
    chunk = conv.chunk_by_key(4, 4, "assistant")
    mean = int(round(conv.mean_brightness()))
    conv.resurrect([chunk.id], brightness="mean")
    assert conv.chunk_peak(chunk.id) == mean and not chunk.pinned


def test_manual_resurrection_pins_at_full_brightness():
    conv = seed_turns_3_and_4()
    conv.prune_to_fit(conv.live_token_count() - 1)
    chunk = conv.chunk_by_key(4, 4, "assistant")
    conv.resurrect([chunk.id], brightness=MAX_BRIGHTNESS, pin=True)
    assert chunk.live and chunk.pinned and conv.chunk_peak(chunk.id) == MAX_BRIGHTNESS
    assert conv.prune_to_fit(1) and chunk.live


def test_already_live_chunks_cost_nothing():
    conv = seed_turns_3_and_4()
    assert token_resurrection.cost(conv, conv.chunk_by_key(4, 3, "assistant")) == 0


def test_merge_with_next_joins_text_and_keeps_identity():
    conv = seed_turns_3_and_4()
    first = conv.chunk_by_key(4, 1, "assistant")
    text = conv.chunk_text(first.id) + conv.chunk_text(conv.chunk_by_key(4, 2, "assistant").id)
    kept, absorbed = conv.merge_with_next(first.id)
    assert kept is first and absorbed.key == (4, 2, "assistant")
    assert conv.chunk_text(first.id) == text
    assert conv.chunk_by_key(4, 2, "assistant") is None
    assert conv.chunk_peak(first.id) == 600
    with pytest.raises(ConversationError):
        conv.merge_with_next(conv.chunk_by_key(4, 4, "assistant").id)  # last chunk of the turn


def test_pin_sets_full_brightness_and_unpin_allows_pruning_again():
    conv = seed_turns_3_and_4()
    chunk = conv.chunk_by_key(4, 4, "assistant")
    conv.pin(chunk.id)
    assert conv.chunk_peak(chunk.id) == MAX_BRIGHTNESS
    conv.pin(chunk.id, False)
    set_peak(conv, 4, 4, "assistant", 0)
    assert [c.key for c in conv.prune_to_fit(conv.live_token_count() - 1)] == [chunk.key]


def test_pruned_chunks_from_storage_load_through_the_loader():
    conv = seed_turns_3_and_4()
    pruned = conv.prune_to_fit(conv.live_token_count() - 1)
    saved = {c.id: conv.chunk_tokens(c.id) for c in pruned}
    conv.held.drop_pruned()  # as if the conversation had just been reopened
    calls = []
    conv.use_chunk_loader(lambda ids: calls.append(list(ids)) or {i: saved[i] for i in ids})
    conv.resurrect([pruned[0].id])
    assert calls == [[pruned[0].id]] and pruned[0].live


def test_app_pruning_goes_below_the_limit_by_the_hysteresis():
    conv = seed_turns_3_and_4()
    size = conv.live_token_count()
    conv.use_settings(conv.settings.replace(max_context_tokens=size - 1, prune_hysteresis=0.75))
    pruned = conv.prune_to_fit()
    assert conv.live_token_count() <= int((size - 1) * 0.75)
    assert len([c for c in pruned if not c.framing]) > 1  # one larger step, not the minimum
    assert conv.prune_to_fit() == []  # under the limit now: nothing more happens


def test_an_anchor_pair_is_ranked_by_its_brighter_member():
    """A dim question whose answer the model keeps attending to stays with its answer."""
    conv = make(min_chunk=3)
    say(conv, "user", "old question here.")
    say(conv, "assistant", "old answer here.")
    say(conv, "user", "new question here.")
    say(conv, "assistant", "new answer here.")
    set_peak(conv, 0, 0, "user", 10)      # dim question ...
    set_peak(conv, 1, 0, "assistant", 9000)  # ... of a bright answer
    set_peak(conv, 2, 0, "user", 500)
    set_peak(conv, 3, 0, "assistant", 600)
    pruned = conv.prune_to_fit(conv.live_token_count() - 1)
    assert {c.key for c in pruned if not c.framing} == {(2, 0, "user"), (3, 0, "assistant")}
    assert conv.chunk_by_key(0, 0, "user").live


def test_automatic_pruning_keeps_the_exchange_the_user_just_read():
    conv = make(min_chunk=3)
    say(conv, "user", "old question here.")
    say(conv, "assistant", "old answer here.")
    say(conv, "user", "new question here.")
    say(conv, "assistant", "new answer here.\n\nand a dim second paragraph.")
    set_peak(conv, 3, 1, "assistant", -50)  # the dimmest chunk is in the newest answer
    pruned = conv.prune_to_fit(conv.live_token_count() - 1, keep_latest_exchange=True)
    assert {c.key for c in pruned if not c.framing} == {(0, 0, "user"), (1, 0, "assistant")}
    assert conv.chunk_by_key(3, 1, "assistant").live
    # Nothing older left to take: the latest exchange stays even over budget.
    assert conv.prune_to_fit(1, keep_latest_exchange=True) == []

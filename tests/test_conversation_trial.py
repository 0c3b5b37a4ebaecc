"""Trying a change and taking it back: :meth:`Conversation.trial` / ``snapshot`` / ``restore``.

A failed save, a failed resurrection and the memory benchmark's dry questions all lean on
it: whatever happened inside, the conversation the user goes on with is the one before —
the same chunks live, every brightness, every stamp (``resurrected_at``, ``recalled_for``,
brightness at prune), the same texts, and it goes on exactly as it would have.
"""

from __future__ import annotations

import copy
import dataclasses
import random

import numpy as np
import pytest

from halo_weave.core import recall
from halo_weave.conversation import Conversation, ConversationError
from halo_weave.core.token_table import COLUMNS
from halo_weave.settings import Settings
from test_conversation import FRAMING, make, say, words

WORDS = ("river stone lamp orchard violet ember cobalt harbour meadow lantern quartz "
         "tundra saffron beacon willow granite falcon juniper marble thistle").split()


def paragraphs(rng: random.Random) -> str:
    return "\n\n".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14)))
                       for _ in range(rng.randint(1, 4)))


def state(conv: Conversation) -> dict:
    """Everything a user could notice of the conversation, as plain values."""
    table = conv.table
    chunks = {i: dataclasses.asdict(c) for i, c in conv.chunks.items()}
    held = {}
    for chunk_id in chunks:
        tokens = conv.tokens_in_memory(chunk_id)
        held[chunk_id] = (conv.held.texts(chunk_id) and list(conv.held.texts(chunk_id)),
                          None if tokens is None else
                          (tokens.token_ids.tolist(), list(tokens.texts), tokens.brightness.tolist()))
    open_turn = conv.open_turn
    return {
        "columns": {name: getattr(table, name).tolist() for name in COLUMNS},
        "chunks": chunks,
        "turns": {i: dataclasses.asdict(t) for i, t in conv.turns.items()},
        "held": held,
        "recalls": dict(conv.recalls.items()),
        "counters": (conv.next_position, conv.next_turn_id, conv.next_chunk_id),
        "open": None if open_turn is None else open_turn.turn_id,
        "peaks": [a.tolist() for a in conv.chunk_peaks()],
        "graveyard": [c.id for c in conv.graveyard()],
        "recalled_tokens": recall.recalled_tokens(conv),
    }


def random_settings(rng: random.Random) -> Settings:
    return Settings.of(
        min_chunk_tokens=rng.choice([4, 8]), max_context_tokens=0,
        brightness_rule=rng.choice(["vote", "decay", "mass"]), brightness_half_life=rng.choice([4, 64]),
        chunk_rank=rng.choice(["peak", "topk", "mean"]), prune_order=rng.choice(["brightness", "age"]),
        new_token_brightness=rng.choice(["cap", "median"]), prune_keep_recent=rng.choice([0, 40]),
    )


def pick(rng: random.Random, chunks) -> int | None:
    ids = [c.id for c in chunks if not c.framing]
    return rng.choice(ids) if ids else None


# Each operation is one of the user's or the app's levers, with random arguments; it may
# refuse (ConversationError) like the real one would.
def op_prune(rng, conv):
    # The app never prunes the answer being written (it spares the latest exchange).
    conv.prune_to_fit(rng.randint(len(conv.system.ids), conv.live_token_count()),
                      keep_latest_exchange=conv.open_turn is not None or rng.random() < 0.5)


def op_prune_chunk(rng, conv):
    chunk_id = pick(rng, conv.live_chunks())
    if chunk_id is not None:
        conv.prune_chunk(chunk_id)


def op_resurrect(rng, conv):
    pruned = list(conv.graveyard())
    if pruned:
        ids = [c.id for c in rng.sample(pruned, rng.randint(1, min(3, len(pruned))))]
        conv.resurrect(ids, brightness=rng.choice(["at_prune", "mean", 7000]),
                       pin=rng.random() < 0.2, with_anchors=rng.random() < 0.5)


def op_pin(rng, conv):
    chunk_id = pick(rng, conv.live_chunks() + list(conv.graveyard()))
    if chunk_id is not None:
        conv.pin(chunk_id, rng.random() < 0.7)


def op_attention(rng, conv):
    values = np.random.default_rng(rng.randrange(1 << 30)).random(conv.live_token_count()).astype(np.float32)
    values[0] += values.sum()  # a sink, as real attention has
    conv.apply_attention((values / values.sum()).astype(np.float32))


def op_merge(rng, conv):
    chunk_id = pick(rng, conv.live_chunks())
    if chunk_id is not None:
        conv.merge_with_next(chunk_id)


def op_recall(rng, conv):
    user = conv.turns.last("user")
    chunk_id = pick(rng, conv.live_chunks())
    if user is not None and chunk_id is not None:
        recall.record(conv, user, [chunk_id])


def op_turn(rng, conv):
    if conv.open_turn is None:
        last = conv.turns.last()
        role = "assistant" if last is not None and conv.turns[last].role == "user" else "user"
        conv.add_turn(role, *words(paragraphs(rng)), created_at=1000.0 + conv.next_turn_id)


def op_stream(rng, conv):
    if conv.open_turn is None:
        conv.begin_turn("assistant", created_at=1000.0 + conv.next_turn_id)
    for token_id, text in zip(*words(paragraphs(rng)[: rng.randint(5, 60)])):
        conv.append_token(token_id, text)
    if rng.random() < 0.5:
        conv.end_turn()


def op_remove_last(rng, conv):
    conv.remove_turns_from()


def op_reopen(rng, conv):
    conv.reopen_answer()
    conv.append_token(4242, " more")
    conv.end_turn()


OPERATIONS = [op_prune, op_prune_chunk, op_resurrect, op_pin, op_attention, op_merge, op_recall,
              op_turn, op_stream, op_remove_last, op_reopen]


def attempt(operation, rng, conv) -> None:
    try:
        operation(rng, conv)
    except ConversationError:
        pass


@pytest.mark.parametrize("seed", range(30))
def test_every_operation_tried_and_taken_back_leaves_the_conversation_as_it_was(seed):
    rng = random.Random(seed)
    conv = Conversation(random_settings(rng), FRAMING)
    conv.set_system_prompt("Be brief.", [90, 91, 500, 94, 95], ["<|im_start|>", "system\n", "Be", "<|im_end|>", "\n"])
    for _ in range(4):
        op_turn(rng, conv)
    for step in range(25):
        operation = rng.choice(OPERATIONS)
        before = state(conv)
        twin = copy.deepcopy(conv)
        live = {c.id: c for c in conv.live_chunks()}
        with conv.trial():
            attempt(operation, rng, conv)
            attempt(rng.choice(OPERATIONS), rng, conv)
        assert state(conv) == before, f"step {step}: {operation.__name__} was not taken back"
        assert all(conv.chunks[i] is c for i, c in live.items()), "the same chunk objects"
        # Taken back exactly: the same step now gives what it gives the untouched twin.
        # (Both draw the same arguments: one random state, copied.)
        step_rng = random.Random(rng.randrange(1 << 30))
        attempt(operation, copy.deepcopy(step_rng), conv)
        attempt(operation, step_rng, twin)
        assert state(conv) == state(twin), f"step {step}: {operation.__name__} went another way"
        if conv.live_token_count() > 400:
            conv.prune_to_fit(300, keep_latest_exchange=True)


def test_a_snapshot_can_be_restored_more_than_once():
    conv = make(min_chunk=4)
    say(conv, "user", "Where is the lamp?\n\nIt was by the river stone last night.")
    say(conv, "assistant", "The lamp is in the orchard.\n\nNear the violet ember tree, by the harbour.")
    saved = conv.snapshot()
    before = state(conv)
    for _ in range(2):
        conv.prune_to_fit(conv.live_token_count() - 5)
        assert conv.graveyard()
        conv.restore(saved)
        assert state(conv) == before


def test_an_error_inside_a_trial_is_raised_and_the_change_taken_back():
    conv = make(min_chunk=4)
    say(conv, "user", "Where is the lamp?\n\nIt was by the river stone last night.")
    before = state(conv)
    with pytest.raises(RuntimeError):
        with conv.trial():
            conv.prune_to_fit(len(conv.system.ids))
            raise RuntimeError("the save failed")
    assert state(conv) == before and not conv.graveyard()

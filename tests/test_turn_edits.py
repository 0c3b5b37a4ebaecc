"""Continue, Regenerate (versions to flip through) and Edit on a real store: what the
user sees after each, and what the file holds after reopening it."""

from __future__ import annotations

import random

import pytest

from conversation_writer import FRAMING, add_user, new_conversation, settings, stream_answer, tokenize
from halo_weave.storage import turn_edits
from halo_weave.store import ConversationStore, new_conversation_path


def answer_text(conv, turn_id) -> str:
    return "".join(conv.chunk_text(c.id) for c in conv.content_chunks(turn_id))


@pytest.fixture
def chat(tmp_path):
    store = ConversationStore.open(new_conversation_path(tmp_path))
    conv = new_conversation()
    store.save_system_prompt(conv)
    for question, answer in (("Hello there", "Hi! How can I help?"),
                             ("Tell me about tea", "Tea is a drink.\n\nIt grows on bushes in")):
        store.save_turn(conv, add_user(conv, question))
        store.save_turn(conv, stream_answer(conv, answer, store))
    yield conv, store
    store.close()


def reopened(store: ConversationStore):
    path = store.path
    store.close()
    fresh = ConversationStore.open(path, create=False)
    return fresh.load(settings(), FRAMING), fresh


def test_continue_extends_the_same_answer_and_chunk(chat):
    conv, store = chat
    _, answer = turn_edits.last_exchange(conv)
    chunks_before = [c.id for c in conv.content_chunks(answer.turn_id)]
    turn = turn_edits.begin_continue(conv, store)
    assert turn is answer and conv.open_turn is answer
    assert conv.live_input_ids()[-1] != FRAMING.suffix["assistant"][0][-1], "the model goes on from the text"
    for token_id, piece in tokenize(" China and India."):
        conv.append_token(token_id, piece)
    conv.end_turn()
    store.save_turn(conv, answer)
    assert answer_text(conv, answer.turn_id) == "Tea is a drink.\n\nIt grows on bushes in China and India."
    assert [c.id for c in conv.content_chunks(answer.turn_id)] == chunks_before, "same turn, same chunking"
    for chunk in conv.live_chunks():  # positions stay contiguous within every chunk
        rows = conv.chunk_rows(chunk)
        assert conv.table.position[rows].tolist() == list(range(chunk.start, chunk.end))
    assert conv.live_input_ids()[-len(FRAMING.suffix["assistant"][0]):].tolist() == FRAMING.suffix["assistant"][0]
    again, store = reopened(store)
    assert answer_text(again, answer.turn_id) == answer_text(conv, answer.turn_id)
    assert again.next_position == conv.next_position
    assert len(again.turns) == len(conv.turns) and again.turns[answer.turn_id].complete
    store.close()


def test_regenerate_keeps_the_old_answer_as_a_version_to_flip_back_to(chat):
    conv, store = chat
    question, first = turn_edits.last_exchange(conv)
    old = answer_text(conv, first.turn_id)
    removed = turn_edits.retire_answer(conv, store)
    assert removed and turn_edits.last_exchange(conv) == (question, None)
    second = stream_answer(conv, "Tea is made from leaves of Camellia sinensis.", store)
    store.save_turn(conv, second)
    state = turn_edits.version_state(conv, store)
    assert (state.number, state.count) == (2, 2) and state.previous.text == old and state.next is None
    assert old not in "".join(conv.chunk_text(c.id) for c in conv.graveyard()), "not in the graveyard"
    turn, _ = turn_edits.show_version(conv, store, state.previous)
    assert answer_text(conv, turn.turn_id) == old
    state = turn_edits.version_state(conv, store)
    assert (state.number, state.count) == (1, 2) and "Camellia" in state.next.text
    again, store = reopened(store)
    _, shown = turn_edits.last_exchange(again)
    assert answer_text(again, shown.turn_id) == old
    assert (turn_edits.version_state(again, store).number, turn_edits.version_state(again, store).count) == (1, 2)
    store.close()


def test_edit_replaces_the_question_and_keeps_the_answer_reachable(chat):
    conv, store = chat
    assert turn_edits.question_text(conv, store) == "Tell me about tea"
    pieces = tokenize("Tell me about coffee")
    turn, removed = turn_edits.replace_question(conv, store, [i for i, _ in pieces], [t for _, t in pieces])
    assert removed
    assert turn_edits.last_exchange(conv) == (turn, None)
    assert answer_text(conv, turn.turn_id) == "Tell me about coffee"
    stored = turn_edits.versions(store, turn.turn_id)
    assert len(stored) == 1 and stored[0].question == "Tell me about tea" and "bushes" in stored[0].text
    again, store = reopened(store)
    assert turn_edits.question_text(again, store) == "Tell me about coffee"
    assert "tea" not in "".join(answer_text(again, t) for t in again.turns)
    store.close()


def test_nothing_to_change_is_refused(tmp_path):
    store = ConversationStore.open(new_conversation_path(tmp_path))
    conv = new_conversation()
    with pytest.raises(turn_edits.TurnEditError):
        turn_edits.retire_answer(conv, store)
    with pytest.raises(turn_edits.TurnEditError):
        turn_edits.begin_continue(conv, store)
    store.save_turn(conv, add_user(conv, "only a question"))
    with pytest.raises(turn_edits.TurnEditError):
        turn_edits.begin_continue(conv, store)
    store.close()

"""ChatSession, the turn's rules without Qt: real SQLite, a scripted backend (test data)."""

from __future__ import annotations

import random
import sqlite3

from conversation_writer import FRAMING, ScriptedBackend, message, settings
from halo_weave.core.chat_template import system_text
from halo_weave.events import TokenEvent
from halo_weave.session import ChatSession, token_events
from halo_weave.store import ConversationStore, new_conversation_path


def _session(tmp_path, **changes):
    backend = ScriptedBackend(random.Random(1))
    session = ChatSession(settings(**changes))
    session.connect(backend, backend.model_info(), FRAMING)
    path = new_conversation_path(tmp_path)
    session.open(ConversationStore.open(path))
    text = system_text("You are a careful assistant.")
    session.set_system_prompt(text, session.tokenize(text))
    return session, backend, path


def _turn(session, backend, rng, answer_paragraphs=2):
    pieces = session.tokenize(message(rng, 2, 20))
    user = session.add_user_message([i for i, _ in pieces], [t for _, t in pieces])
    backend.answer = message(rng, answer_paragraphs)
    session.begin_answer()
    for event in token_events(backend.stream(**session.generation_request()), backend):
        session.receive(event)
    return user, session.finish_turn("stop")


def test_user_message_is_on_disk_before_the_answer_starts(tmp_path):
    session, backend, path = _session(tmp_path)
    pieces = session.tokenize("Hello there, how are you?")
    turn = session.add_user_message([i for i, _ in pieces], [t for _, t in pieces])
    peek = sqlite3.connect(path)
    assert peek.execute("SELECT complete FROM turns WHERE turn_id = ?", (turn.turn_id,)).fetchone() == (1,)
    peek.close()


def test_a_turn_saves_streams_in_batches_and_prunes_but_keeps_the_latest_exchange(tmp_path):
    session, backend, path = _session(tmp_path, max_context_tokens=400)
    rng = random.Random(3)
    pruned_any = False
    for _ in range(6):
        user, end = _turn(session, backend, rng)
        pruned_any |= bool(end.pruned)
        latest = {user.turn_id, end.turn.turn_id}
        assert all(c.turn_id not in latest for c in end.pruned), "the exchange just read stays"
    assert pruned_any and session.streamed > 0
    conv = session.conv
    session.store.close()
    with ConversationStore.open(path, create=False) as store:
        again = store.load(session.settings, FRAMING)
    assert again.live_token_count() == conv.live_token_count()
    assert [c.id for c in again.graveyard()] == [c.id for c in conv.graveyard()]


def test_a_server_without_attention_switches_pruning_to_oldest_first(tmp_path):
    session, backend, _ = _session(tmp_path)

    class Silent(ScriptedBackend):
        def stream(self, *, input_ids, **params):
            for event in super().stream(input_ids=input_ids, **params):
                yield TokenEvent(event.token_id, event.text, None)

    silent = Silent(random.Random(2))
    _, end = _turn(session, silent, random.Random(4))
    assert end.attention_changed and not session.attention_available
    _, end = _turn(session, backend, random.Random(5))
    assert end.attention_changed and session.attention_available


def test_levers_change_and_save(tmp_path):
    session, backend, path = _session(tmp_path)
    rng = random.Random(6)
    for _ in range(2):
        _turn(session, backend, rng)
    conv = session.conv
    chunk = conv.content_chunks(0)[0]
    session.pin(chunk.id)
    assert chunk.pinned
    session.pin(chunk.id, False)
    gone = session.prune_chunk(chunk.id)
    assert chunk.id in [c.id for c in gone] and not chunk.live
    session.resurrect_chunk(chunk.id, pin=False)
    assert conv.chunks[chunk.id].live
    live = {r[0] for r in session.store.conn.execute("SELECT id FROM chunks WHERE live = 1")}
    assert chunk.id in live

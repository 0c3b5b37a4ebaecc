"""ChatSession's Continue, Regenerate (versions), Edit and resend: against the real server
and a real SQLite file, each change then streamed like any answer."""

from __future__ import annotations

import pytest

from halo_weave.session import token_events
from halo_weave.store import ConversationStore

from test_session import _session, client  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow


def _stream(session) -> None:
    for event in token_events(session.backend.stream(**session.generation_request()), session.backend):
        session.receive(event)


def _ask(session, text):
    pieces = session.server.tokenize(text)
    session.add_user_message([i for i, _ in pieces], [t for _, t in pieces])
    session.begin_answer()
    _stream(session)
    return session.finish_turn("stop").turn


def _text(conv, turn_id) -> str:
    return "".join(conv.chunk_text(c.id) for c in conv.content_chunks(turn_id))


def test_continue_regenerate_edit_through_the_session(client, tmp_path):
    session, path = _session(client, tmp_path, max_new_tokens=8, temperature=1.0, sampler_seed=-1)
    conv = session.conv
    answer = _ask(session, "Tell me a long story about the sea.")
    first = _text(conv, answer.turn_id)

    session.resume_answer()  # Continue: same turn, more tokens
    _stream(session)
    assert session.finish_turn("stop").turn is answer
    longer = _text(conv, answer.turn_id)
    assert longer.startswith(first) and len(longer) > len(first)

    session.exchange.regenerate()  # the longer answer becomes a version
    session.begin_answer()
    _stream(session)
    again = session.finish_turn("stop").turn
    state = session.exchange.answer_versions()
    assert (state.number, state.count) == (2, 2) and state.previous.text == longer
    session.exchange.show_version(-1)
    assert _text(conv, session.exchange.last_exchange()[1].turn_id) == longer

    pieces = session.server.tokenize("Tell me a short poem about the moon.")
    question = session.exchange.replace_question([i for i, _ in pieces], [t for _, t in pieces])
    session.begin_answer()
    _stream(session)
    session.finish_turn("stop")
    assert session.exchange.question_text() == "Tell me a short poem about the moon."
    assert session.exchange.answer_versions().count == 3, "both earlier answers stay reachable"
    assert again.turn_id not in conv.turns
    session.store.close()
    with ConversationStore.open(path, create=False) as store:
        reopened = store.load(session.settings, session.framing)
    assert [t.role for t in (reopened.turns[i] for i in reopened.turns)] == ["user", "assistant"]
    assert _text(reopened, question.turn_id) == "Tell me a short poem about the moon."


def test_flipping_answer_versions_leaves_the_total_as_it_was(client, tmp_path):
    """The stats bar's Total counts the conversation, not how often a version was shown."""
    session, _ = _session(client, tmp_path, max_new_tokens=8, temperature=1.0, sampler_seed=-1)
    conv = session.conv
    _ask(session, "Name a colour.")
    session.exchange.regenerate()
    session.begin_answer()
    _stream(session)
    session.finish_turn("stop")
    shown = {2: conv.total_token_count()}
    for number in (1, 2, 1, 2, 1):
        session.exchange.show_version(-1 if number == 1 else 1)
        answer = session.exchange.last_exchange()[1].turn_id
        expected = sum(c.token_count for c in conv.chunks.values() if not c.framing)
        assert conv.total_token_count() == expected
        shown.setdefault(number, conv.total_token_count())
        assert conv.total_token_count() == shown[number], "flipping back gives the same Total"
        assert answer in conv.turns


def test_another_conversation_starts_without_the_last_answers_speed(client, tmp_path):
    """After switching conversations the stats bar shows no tok/s or first-token time of
    an answer that belongs to the other one."""
    session, _ = _session(client, tmp_path, max_new_tokens=8)
    session.answer.clock.start()
    _ask(session, "Name a colour.")
    assert session.answer.tokens_per_s > 0 and session.answer.clock.first_token_s is not None
    other = ConversationStore.open(tmp_path / "other.db", create=True)
    session.store.close()
    session.open(other)
    assert session.answer.tokens_per_s == 0.0
    assert session.answer.clock.first_token_s is None and session.answer.clock.tokens_per_s is None
    other.close()


def test_a_continue_the_model_adds_nothing_to_is_said(client, tmp_path):
    """An answer that ended by itself: Continue lets the model add nothing, and the turn's
    end says so (the window shows it) instead of silently doing nothing."""
    session, _ = _session(client, tmp_path, max_new_tokens=64, temperature=0.0)
    answer = _ask(session, "Reply with the single word: yes")
    assert session.answer.streamed < 64, "the answer ended by itself, before the length limit"
    before = _text(session.conv, answer.turn_id)
    session.resume_answer()
    _stream(session)
    end = session.finish_turn("stop")
    assert _text(session.conv, answer.turn_id) == before and session.answer.streamed == 0
    assert end.nothing_added

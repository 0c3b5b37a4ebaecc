"""Branches through the real server: edit an earlier message and regenerate an earlier
answer, each answered by the bundled model with attention, then switch back and reopen."""

from __future__ import annotations

import pytest

from halo_weave.session import token_events
from halo_weave.store import ConversationStore

from test_session import _session, client  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow


def _answer(session):
    session.begin_answer()
    for event in token_events(session.backend.stream(**session.generation_request()), session.backend):
        session.receive(event)
    return session.finish_turn("stop").turn


def _ask(session, text):
    pieces = session.server.tokenize(text)
    session.add_user_message([i for i, _ in pieces], [t for _, t in pieces])
    return _answer(session)


def _chat(session) -> list[tuple[str, str]]:
    conv = session.conv
    return [(conv.turns[t].role, session.branches.message_text(t)) for t in conv.turns]


def _brightness(session) -> dict[int, tuple]:
    conv = session.conv
    return {c.id: (c.live, tuple(conv.chunk_tokens(c.id).brightness.tolist()))
            for t in conv.turns for c in conv.content_chunks(t)}


def test_edit_an_earlier_message_answer_it_and_switch_back(client, tmp_path):
    session, path = _session(client, tmp_path, max_new_tokens=12, max_context_tokens=120)
    for question in ("Name a fruit.", "Name a river.", "Name a colour.", "Name a tree."):
        _ask(session, question)
    original, bright = _chat(session), _brightness(session)
    second = list(session.conv.turns)[2]

    pieces = session.server.tokenize("Name a mountain.")
    edited = session.branches.edit_message(second, [i for i, _ in pieces], [t for _, t in pieces])
    answer = _answer(session)
    shown = _chat(session)
    assert shown[:2] == original[:2] and shown[2] == ("user", "Name a mountain.")
    assert len(shown) == 4 and session.conv.turns[answer.turn_id].role == "assistant"

    regenerated = list(session.conv.turns)[1]  # the first answer: a branch point of its own
    session.branches.regenerate_answer(regenerated)
    _answer(session)
    assert len(_chat(session)) == 2
    session.branches.switch(session.conv.turns.last(), -1)
    assert _chat(session) == shown, "the edited branch, whole"

    session.branches.switch(edited.turn_id, -1)
    assert _chat(session) == original and _brightness(session) == bright
    session.store.close()
    with ConversationStore.open(path, create=False) as store:
        conv = store.load(session.settings, session.framing)
    assert [conv.turns[t].role for t in conv.turns] == [r for r, _ in original]


def test_each_branch_keeps_its_own_cache_at_the_server_and_switching_back_reads_it(client, tmp_path):
    """The server saves a cache per branch shown (the conversation's key, and the branch
    where it is not the first made): switching back to a branch reads its cache back
    instead of running its tail again."""
    session, _path = _session(client, tmp_path, max_new_tokens=12)
    for question in ("Name a fruit.", "Name a river.", "Name a colour.", "Name a tree."):
        _ask(session, question)
    key = session.server.cache_key()
    assert "#" not in key and client.conversation == key
    first = _chat(session)
    second = list(session.conv.turns)[2]

    pieces = session.server.tokenize("Name a mountain.")
    edited = session.branches.edit_message(second, [i for i, _ in pieces], [t for _, t in pieces])
    assert client.conversation == session.server.cache_key() != key
    assert client.conversation.startswith(key + "#")
    _answer(session)

    session.branches.switch(edited.turn_id, -1)
    assert _chat(session) == first and client.conversation == key
    ids = session.server.warm_up_ids()
    warm = session.server.warm_up(ids, session.server.cache_key())
    # All but the last answer's closing framing (the server held it unread).
    assert warm["restored"] >= len(ids) - 4 and warm["ran"] <= 4, warm

"""What each message recalled, kept in the conversation file: written with the message,
unmarked by a prune, carried by an edit, read back exactly, and absent (not guessed) for
a file that never recorded it.  A real SQLite file; the turns are scripted."""

from __future__ import annotations

import sqlite3

import pytest

from halo_weave.core import recall
from halo_weave.session import ChatSession
from halo_weave.settings import Settings
from halo_weave.storage import files, integrity
from halo_weave.store import ConversationStore, new_conversation_path

FACTS = ["My cat is called Mochi and she sleeps a lot.\n\nShe likes cardboard boxes and warm places.",
         "I fly to Lisbon on the third of March from Berlin.",
         "My sister Ana works nights as a nurse at the hospital."]
SETTINGS = Settings.of(min_chunk_tokens=4, max_context_tokens=0)


def _pieces(text: str, first_id: int = 100) -> tuple[list[int], list[str]]:
    words = [(" " if i else "") + w for i, w in enumerate(text.split(" "))]
    return list(range(first_id, first_id + len(words))), words


def _exchange(session: ChatSession, text: str, recalled=()) -> int:
    """A message (with what its search ``recalled``) and a short answer; the message's turn id."""
    turn = session.add_user_message(*_pieces(text), recalled=recalled)
    session.begin_answer()
    for i, word in enumerate("Noted, thank you for telling me.".split()):
        session.conv.append_token(300 + i, (" " if i else "") + word)
    session.finish_turn("stop", prune=False)
    return turn.turn_id


@pytest.fixture
def talk(tmp_path):
    """Three facts, pruned; a question that recalls two of them.  (session, path, question,
    the recalled chunks)."""
    path = new_conversation_path(tmp_path)
    session = ChatSession(SETTINGS)
    session.open(ConversationStore.open(path))
    conv = session.conv
    for fact in FACTS:
        _exchange(session, fact)
    session.prune(limit=20)
    facts = [c for c in conv.graveyard() if c.role == "user" and "Ana" not in conv.chunk_text(c.id)]
    back = conv.resurrect([c.id for c in facts], with_anchors=False)
    session.store.save_chunks(conv, back)
    question = _exchange(session, "What is my cat called and when do I fly?", recalled=back)
    yield session, path, question, sorted(facts, key=lambda c: c.start)
    if session.store is not None:
        session.store.close()


def _reopen(session: ChatSession, path):
    session.store.close()
    session.store = None
    store = ConversationStore.open(path, create=False)
    return store, store.load(SETTINGS)


def test_what_a_message_recalled_is_read_back_with_its_marks(talk):
    session, path, question, facts = talk
    ids = tuple(c.id for c in facts)
    assert session.conv.recalls.of(question) == ids
    tokens = recall.recalled_tokens(session.conv)
    store, conv = _reopen(session, path)
    with store:
        assert conv.recalls.of(question) == ids
        assert [conv.chunks[c].recalled_for for c in ids] == [question] * len(ids) and len(ids) == 3
        assert recall.recalled_tokens(conv) == tokens > 0
        assert files.check_file(path)[0], "every row summed"


def test_a_prune_takes_the_mark_not_the_record(talk):
    session, path, question, facts = talk
    session.conv.prune_chunk(facts[0].id)
    session.store.save_chunks(session.conv, [facts[0]])
    assert facts[0].recalled_for is None and facts[1].recalled_for == question
    store, conv = _reopen(session, path)
    with store:
        assert conv.recalls.of(question) == tuple(c.id for c in facts), "the message still says what it recalled"
        assert conv.chunks[facts[0].id].recalled_for is None and conv.chunks[facts[1].id].recalled_for == question
        # Brought back by hand (pinned), it is not a recall.
        conv.pin(facts[0].id)
        store.save_chunks(conv, [conv.chunks[facts[0].id]])
    store, conv = ConversationStore.open(path, create=False), None
    with store:
        conv = store.load(SETTINGS)
        assert conv.chunks[facts[0].id].live and conv.chunks[facts[0].id].recalled_for is None


def test_an_edited_message_keeps_what_it_recalled(talk):
    session, path, question, facts = talk
    conv = session.conv
    edited = session.exchange.replace_question(*_pieces("What is the name of my cat?"))
    assert edited.turn_id != question
    assert conv.recalls.of(edited.turn_id) == tuple(c.id for c in facts) and not conv.recalls.of(question)
    assert facts[0].recalled_for == edited.turn_id
    store, again = _reopen(session, path)
    with store:
        assert again.recalls.of(edited.turn_id) == tuple(c.id for c in facts)
        assert again.chunks[facts[1].id].recalled_for == edited.turn_id


def test_merging_two_recalled_chunks_keeps_one_listed_and_marked(talk):
    session, path, question, facts = talk
    conv = session.conv
    first, second = facts[0], facts[1]
    assert (first.turn_id, second.turn_id) == (facts[0].turn_id,) * 2, "the cat's two paragraphs"
    kept, absorbed = conv.merge_with_next(first.id)
    session.store.save_merge(conv, kept, absorbed)
    assert conv.recalls.of(question) == (first.id, facts[2].id) and kept.recalled_for == question
    store, again = _reopen(session, path)
    with store:
        assert again.recalls.of(question) == (first.id, facts[2].id)
        assert again.chunks[first.id].recalled_for == question
        assert files.check_file(path)[0]


def test_a_file_without_the_record_shows_nothing_recalled(talk):
    session, path, question, facts = talk
    session.store.close()
    session.store = None
    # As a file written before the record was kept: no table, no migration.
    conn = sqlite3.connect(path)
    integrity.register(conn)
    for suffix in ("ai", "au", "ad"):
        conn.execute(f"DROP TRIGGER recalls_sum_{suffix}")
    conn.execute("DELETE FROM row_checksums WHERE tbl = 'recalls'")
    conn.execute("DROP TABLE recalls")
    conn.execute("DELETE FROM _sqlite_migrations WHERE name = 'm008_recalls'")
    conn.commit()
    conn.close()
    assert files.check_file(path)[0], "an older file checks sound"
    with ConversationStore.open(path, create=False) as store:
        conv = store.load(SETTINGS)
        assert not len(conv.recalls) and recall.recalled_tokens(conv) == 0
        assert all(conv.chunks[c.id].live for c in facts), "the chunks came back all the same"
        assert not store.read_only
    assert files.check_file(path)[0]


def test_a_changed_record_is_found_not_shown(talk):
    session, path, question, facts = talk
    other = session.conv.content_chunks(facts[0].turn_id + 1)[0]  # the answer to the cat
    session.store.close()
    session.store = None
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER recalls_sum_au")  # changed behind the app's back
    conn.execute("UPDATE recalls SET chunk_id = ? WHERE chunk_id = ?", (other.id, facts[2].id))
    conn.commit()
    conn.close()
    with ConversationStore.open(path, create=False) as store:
        conv = store.load(SETTINGS)
        assert store.read_only and any(d.table == "recalls" for d in store.damage)
        assert conv.recalls.of(question) == (facts[0].id, facts[1].id), "the changed row is left out"
    assert not files.check_file(path)[0]

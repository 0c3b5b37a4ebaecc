"""Edit any earlier message, regenerate any earlier answer, switch between the branches:
what the chat shows, what the graveyard lists and the index finds, after reopening and
after export and import.  A real SQLite file; the answers come from the scripted
backend (test data streamed through the real session: attention, brightness, prune)."""

from __future__ import annotations

import random

import pytest

from conversation_writer import FRAMING, ScriptedBackend, settings
from halo_weave.errors import TransferError
from halo_weave.session import ChatSession, token_events
from halo_weave.storage import branches as stash
from halo_weave.exchange.transfer import export_conversation, import_conversation
from halo_weave.store import ConversationStore, new_conversation_path

EXCHANGES = [
    ("Tell me about the lighthouse keeper on the northern cliff.",
     "The lighthouse keeper trims the wick every evening and logs passing ships.\n\n"
     "He has kept the lamp burning through eleven winters without a single failure."),
    ("What does she grow in the greenhouse behind the bakery?",
     "Tomatoes, basil and a stubborn lemon tree that fruits once a year.\n\n"
     "The greenhouse stays warm because the bakery ovens share a wall with it."),
    ("Which trains stop at the old mountain station?",
     "Only the slow regional train stops there, twice a day, carrying hikers.\n\n"
     "In winter the station closes and the snowplough sleeps in the engine shed."),
    ("How do the fishermen mend their nets in the harbour?",
     "They sit on upturned crates and knot the torn meshes with waxed twine.\n\n"
     "An apprentice holds the net taut while the oldest sings the counting song."),
]


def _session(path, **changes) -> tuple[ChatSession, ScriptedBackend]:
    backend = ScriptedBackend(random.Random(3))
    session = ChatSession(settings(**changes))
    session.connect(backend, backend.model_info(), FRAMING)
    session.open(ConversationStore.open(path))
    return session, backend


def _answer(session, backend, text):
    backend.answer = text
    session.begin_answer()
    for event in token_events(backend.stream(**session.generation_request()), backend):
        session.receive(event)
    return session.finish_turn("stop").turn


def _ask(session, backend, question, answer):
    pieces = session.server.tokenize(question)
    session.add_user_message([i for i, _ in pieces], [t for _, t in pieces])
    return _answer(session, backend, answer)


def _shown(session) -> list[tuple[str, str]]:
    """The chat as the window lists it: (role, words) of every message in order."""
    conv = session.conv
    return [(conv.turns[t].role, session.branches.message_text(t)) for t in conv.turns]


def _looks(session) -> dict:
    """What the heatmap and the graveyard show: each chunk's state and brightness."""
    conv = session.conv
    return {c.id: (c.live, c.pinned, tuple(conv.chunk_tokens(c.id).brightness.tolist()))
            for t in conv.turns for c in conv.content_chunks(t)}


def _chat(tmp_path, **changes):
    path = new_conversation_path(tmp_path)
    session, backend = _session(path, **changes)
    for question, answer in EXCHANGES:
        _ask(session, backend, question, answer)
    return session, backend, path


def test_editing_message_three_of_eight_starts_a_branch_and_the_old_one_comes_back(tmp_path):
    session, backend, path = _chat(tmp_path, max_context_tokens=150)
    before, looks = _shown(session), _looks(session)
    assert len(before) == 8 and session.conv.graveyard(), "some chunks were pruned"
    third = list(session.conv.turns)[2]

    pieces = session.server.tokenize("Which boats sail from the southern pier?")
    edited = session.branches.edit_message(third, [i for i, _ in pieces], [t for _, t in pieces])
    _answer(session, backend, "Ferries to the islands, every hour in summer.")

    now = _shown(session)
    assert now[:2] == before[:2]
    assert now[2:] == [("user", "Which boats sail from the southern pier?"),
                       ("assistant", "Ferries to the islands, every hour in summer.")]
    state = session.branches.state_of(edited.turn_id)
    assert (state.number, state.count) == (2, 2) and state.next is None

    session.branches.switch(edited.turn_id, -1)
    assert _shown(session) == before, "the eight original messages"
    assert _looks(session) == looks, "with their brightness and pruned chunks"
    state = session.branches.state_of(third)
    assert (state.number, state.count) == (1, 2)

    session.store.close()
    reopened, _ = _session(path)
    assert _shown(reopened) == before and _looks(reopened) == looks
    reopened.branches.switch(third, 1)
    assert _shown(reopened) == now


def test_the_graveyard_and_the_stats_follow_the_branch_shown(tmp_path):
    session, backend, _ = _chat(tmp_path, max_context_tokens=150)
    conv = session.conv
    second_answer = list(conv.turns)[3]
    hidden = {c.id for t in conv.turns if t >= second_answer for c in conv.content_chunks(t)}
    assert hidden & {c.id for c in conv.graveyard()}, "the tail has pruned chunks"
    total = conv.total_token_count()

    session.branches.regenerate_answer(second_answer)
    _answer(session, backend, "Only rosemary.")
    conv = session.conv
    assert not hidden & {c.id for c in conv.graveyard()}, "no pruned chunk of the hidden branch"
    assert not hidden & {c.id for t in conv.turns for c in conv.content_chunks(t)}
    assert conv.total_token_count() < total, "the total counts the branch shown"
    assert _shown(session)[-1] == ("assistant", "Only rosemary.")

    session.branches.switch(session.conv.turns.last(), -1)
    assert session.conv.total_token_count() == total
    assert hidden <= {c.id for t in session.conv.turns for c in session.conv.content_chunks(t)}


def test_a_search_never_recalls_a_hidden_branch(tmp_path):
    from halo_weave.memory.embedder import Embedder
    from halo_weave.semantic_index import SemanticIndex

    embedder = Embedder()
    embedder.load()
    session, backend, _ = _chat(tmp_path)
    session.recall.use_index(SemanticIndex(session.store.conn, session.settings, embedder, lock=session.store.lock))
    session.recall.index.index_pending(session.conv)
    conv = session.conv
    third = list(conv.turns)[2]
    fishing = [c.id for c in conv.content_chunks(list(conv.turns)[6])]
    assert set(fishing) & {m.chunk_id for m in session.recall.index.search("mending fishing nets in the harbour")}

    pieces = session.server.tokenize("Tell me about the bakery instead.")
    session.branches.edit_message(third, [i for i, _ in pieces], [t for _, t in pieces])
    found = {m.chunk_id for m in session.recall.index.search("mending fishing nets in the harbour")}
    assert not set(fishing) & found, "the hidden branch is not searched"

    _answer(session, backend, "The bakery opens at dawn.")
    session.branches.switch(session.conv.turns.last() - 1, -1)
    found = {m.chunk_id for m in session.recall.index.search("mending fishing nets in the harbour")}
    assert set(fishing) & found, "shown again, it is found again (without re-embedding)"


def test_export_and_import_keep_both_branches(tmp_path):
    session, backend, _ = _chat(tmp_path, max_context_tokens=150)
    before, looks = _shown(session), _looks(session)
    third = list(session.conv.turns)[2]
    pieces = session.server.tokenize("Which boats sail from the southern pier?")
    edited = session.branches.edit_message(third, [i for i, _ in pieces], [t for _, t in pieces])
    first_answer = _answer(session, backend, "Ferries to the islands.")
    _ask(session, backend, "And in winter?", "Once a day.")
    session.branches.regenerate_answer(first_answer.turn_id)  # a branch point inside the new tail
    _answer(session, backend, "Ferries and a mail boat.")
    after = _shown(session)

    out = tmp_path / "export.json"
    export_conversation(session.store, out)
    imported = import_conversation(out, tmp_path / "imported")
    copy, _ = _session(imported)
    assert _shown(copy) == after
    copy.branches.switch(copy.conv.turns.last(), -1)
    assert _shown(copy)[-3:] == [("assistant", "Ferries to the islands."), ("user", "And in winter?"),
                                 ("assistant", "Once a day.")]
    copy.branches.switch(edited.turn_id, -1)
    assert _shown(copy) == before
    assert {k: v[:2] for k, v in _looks(copy).items()} == {k: v[:2] for k, v in looks.items()}
    assert _looks(copy) == looks


def test_nested_branches_travel_with_their_tail(tmp_path):
    session, backend, path = _chat(tmp_path)
    turns = list(session.conv.turns)
    # message 6 (an answer, not the last one: the last one keeps versions)
    session.branches.regenerate_answer(turns[5])
    _answer(session, backend, "No trains at all.")
    inner = _shown(session)
    # then a branch further up: message 2's answer; the first branch point is inside its tail
    session.branches.regenerate_answer(turns[1])
    _answer(session, backend, "Only moss.")
    assert len(_shown(session)) == 2
    assert [b.parent_turn_id for b in stash.stashed(session.store)] == [turns[0]], "the nested one is inside"
    session.branches.switch(session.conv.turns.last(), -1)
    assert _shown(session) == inner
    state = session.branches.state_of(session.conv.turns.last())
    assert (state.number, state.count) == (2, 2), "the nested branch point came back with its tail"


def test_a_damaged_stashed_branch_is_refused_and_the_shown_one_kept(tmp_path):
    session, backend, _ = _chat(tmp_path)
    third = list(session.conv.turns)[2]
    pieces = session.server.tokenize("Something else.")
    edited = session.branches.edit_message(third, [i for i, _ in pieces], [t for _, t in pieces])
    _answer(session, backend, "Fine.")
    shown = _shown(session)
    conn = session.store.conn
    (blob,) = conn.execute("SELECT tail FROM branches").fetchone()
    conn.execute("DROP TRIGGER branches_sum_au")  # a disk error, not the app
    conn.execute("UPDATE branches SET tail = ?", (blob[:-1] + bytes([blob[-1] ^ 1]),))
    with pytest.raises(Exception) as caught:
        session.branches.switch(edited.turn_id, -1)
    assert "damaged" in str(caught.value)
    assert _shown(session) == shown
    assert _shown(_session(session.store.path)[0]) == shown


def _turn_id_the_file_has(tail, third):
    tail["tables"]["turns"]["rows"][0][0] = third - 1


def _short_token_blob(tail, third):
    table = tail["tables"]["chunk_tokens"]
    column = table["columns"].index("token_ids")
    table["rows"][0][column] = {"$b": "AAAA"}  # one token for a chunk of more


def _prefix_of_text(tail, third):
    tail["prefix"]["chunks"] = [["one", 1, 0, None]]


@pytest.mark.parametrize("damage", [_turn_id_the_file_has, _short_token_blob, _prefix_of_text])
def test_an_import_with_a_bad_branch_is_refused_whole(tmp_path, damage):
    import json

    session, backend, _ = _chat(tmp_path)
    third = list(session.conv.turns)[2]
    pieces = session.server.tokenize("Something else.")
    session.branches.edit_message(third, [i for i, _ in pieces], [t for _, t in pieces])
    out = tmp_path / "export.json"
    export_conversation(session.store, out)
    doc = json.loads(out.read_text())
    damage(doc["branches"][0]["tail"], third)
    out.write_text(json.dumps(doc))
    with pytest.raises(TransferError, match="branches"):
        import_conversation(out, tmp_path / "imported")
    assert not (tmp_path / "imported").exists() or not [p for p in (tmp_path / "imported").rglob("*") if p.is_file()]


def test_a_new_branch_sees_what_led_up_to_the_edited_message(tmp_path):
    session, backend, _ = _chat(tmp_path, max_context_tokens=150)
    conv = session.conv
    second_question = list(conv.turns)[2]
    before = list(conv.turns)[:2]
    assert any(not c.live for t in before for c in conv.content_chunks(t)), "later turns pruned them"

    pieces = session.server.tokenize("Which boats sail from the southern pier?")
    session.branches.edit_message(second_question, [i for i, _ in pieces], [t for _, t in pieces])
    conv = session.conv
    answer_before = conv.content_chunks(before[1])
    assert answer_before[-1].live, "the answer just before the edited message is back in the context"
    assert conv.live_token_count() <= 150, "within the context target"
    session.store.close()
    reopened, _ = _session(session.store.path)
    assert reopened.conv.content_chunks(before[1])[-1].live, "and saved so"


def test_a_regenerate_killed_before_its_answer_opens_with_the_old_branch(tmp_path):
    session, _, path = _chat(tmp_path)
    before = _shown(session)
    session.branches.regenerate_answer(list(session.conv.turns)[3])
    assert len(_shown(session)) == 3, "the question waits for its new answer"
    session.store.close()  # killed here: nothing of the new answer was saved

    reopened, _ = _session(path)
    assert _shown(reopened) == before, "no branch is left out of reach"
    assert stash.stashed(reopened.store) == []


def test_versions_of_the_last_answer_travel_with_their_branch(tmp_path):
    session, backend, _ = _chat(tmp_path)
    session.exchange.regenerate()
    _answer(session, backend, "They use a netting needle.")
    assert (session.exchange.answer_versions().number, session.exchange.answer_versions().count) == (2, 2)
    third = list(session.conv.turns)[2]
    pieces = session.server.tokenize("Something else.")
    edited = session.branches.edit_message(third, [i for i, _ in pieces], [t for _, t in pieces])
    _answer(session, backend, "Fine.")
    assert session.exchange.answer_versions().count == 1, "the new branch's answer has no other version"
    session.branches.switch(edited.turn_id, -1)
    state = session.exchange.answer_versions()
    assert (state.number, state.count) == (2, 2)
    assert state.previous.text == EXCHANGES[-1][1]


def test_the_first_message_can_be_edited_too(tmp_path):
    session, backend, _ = _chat(tmp_path)
    before = _shown(session)
    first = list(session.conv.turns)[0]
    pieces = session.server.tokenize("Start somewhere else.")
    edited = session.branches.edit_message(first, [i for i, _ in pieces], [t for _, t in pieces])
    _answer(session, backend, "Gladly.")
    assert _shown(session) == [("user", "Start somewhere else."), ("assistant", "Gladly.")]
    assert session.branches.state_of(edited.turn_id).number == 2
    session.branches.switch(edited.turn_id, -1)
    assert _shown(session) == before


def test_the_conversation_list_shows_one_title_and_count_whichever_branch_is_shown(tmp_path):
    """A newcomer took a branched conversation for another one: its list entry changed
    title and turn count with the branch shown."""
    from halo_weave.storage.library import Library

    path = new_conversation_path(tmp_path)
    session, backend = _session(path)
    for question, answer in EXCHANGES[:2]:
        _ask(session, backend, question, answer)
    library = Library(tmp_path)
    before = library.entries()[0]
    assert before.title.startswith("Tell me about the lighthouse keeper") and before.turn_count == 4

    first = next(iter(session.conv.turns))
    pieces = session.server.tokenize("Tell me about the baker instead.")
    edited = session.branches.edit_message(first, [i for i, _ in pieces], [t for _, t in pieces])
    _answer(session, backend, "She bakes rye bread at four in the morning.")
    after = library.entries()[0]
    assert after.title == before.title, "the first wording stays the title"
    assert after.turn_count == 6 and after.stashed_branches == 1, "every branch's turns count"
    session.branches.switch(edited.turn_id, -1)
    back = library.entries()[0]
    assert (back.title, back.turn_count, back.stashed_branches) == (after.title, 6, 1)
    session.store.close()

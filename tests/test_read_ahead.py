"""Read-ahead while the user types: the draft prompt the app sends early is the prompt
Enter sends, up to the last word (resurrections included), and planning it changes
nothing in the conversation or its file.

The app's ChatSession on a real SQLite file with the real MiniLM index, the chat of
tests/test_prune_for_room.py (the boat talk, then unrelated exchanges, pruned after each).
"""

from __future__ import annotations

import pytest

from halo_weave.session.read_ahead import settled_text
from test_prune_for_room import BOAT_ASKED, _chat
from test_semantic_index import embedder, tokenize  # noqa: F401

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("typed", "settled"), [
    ("What was the na", "What was the"),
    ("What was the name ", "What was the name"),
    ("  What was\nthe name\n", "What was\nthe name"),
    ("Hello", ""),
    ("   ", ""),
])
def test_the_draft_stops_before_a_word_still_being_typed(typed, settled):
    assert settled_text(typed) == settled


def test_the_draft_prompt_is_what_enter_sends_and_changes_nothing(embedder, tmp_path):  # noqa: F811
    session, _ = _chat(embedder, tmp_path / "chat.db", "after_exchange", exchanges=12)
    conv = session.conv
    boat = next(c for c in conv.graveyard() if "Marigold" in conv.chunk_text(c.id))
    live_before = conv.live_input_ids().tolist()
    graveyard_before = sorted(c.id for c in conv.graveyard())
    file_before = session.store.conn.execute("SELECT count(*), sum(live) FROM chunks").fetchone()

    draft = settled_text(BOAT_ASKED[:-6])  # typed up to "moor h": the last word left out
    ids, _ = tokenize(embedder, draft)
    early = session.draft_ids(session.index, session.index.search(draft), ids)

    # Nothing moved: the same live context, the same graveyard, the same file.
    assert conv.live_input_ids().tolist() == live_before
    assert sorted(c.id for c in conv.graveyard()) == graveyard_before
    assert session.store.conn.execute("SELECT count(*), sum(live) FROM chunks").fetchone() == file_before
    # The boat paragraph is in the draft prompt (the search for the draft found it) ...
    boat_ids = conv.chunk_tokens(boat.id).token_ids.tolist()
    assert any(early[i:i + len(boat_ids)] == boat_ids for i in range(len(early)))

    # ... and Enter sends the same prompt, the draft being its start.
    full, texts = tokenize(embedder, BOAT_ASKED)
    session.resurrect_for(session.index, session.index.search(BOAT_ASKED), len(full))
    session.add_user_message(full, texts)
    session.fit_model_window()
    session.begin_answer()
    sent = session.generation_request()["input_ids"]
    assert boat.live
    assert len(sent) > len(early) > len(live_before)
    assert sent[:len(early)] == early

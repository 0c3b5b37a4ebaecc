"""Read-ahead while the user types: the draft prompt the app sends early is the prompt
Enter sends, up to the last word (resurrections included), and planning it changes
nothing in the conversation or its file.

The app's ChatSession on a real SQLite file with the real MiniLM index, the chat of
tests/test_prune_for_room.py (the boat talk, then unrelated exchanges, pruned after each).
"""

from __future__ import annotations

import pytest

from halo_weave.session.read_ahead import settled_text
from test_prune_for_room import BOAT_ASKED, TIGHT, _chat
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
    # The room as pruning after the exchange leaves it, and 12 candidates (which leave it
    # room, the recall note's included): the plan prunes nothing, so the draft, recall
    # note and all, is the start of what Enter sends (a plan that prunes: the next test).
    session, _ = _chat(embedder, tmp_path / "chat.db", "after_exchange", exchanges=12,
                       resurrection_keep_share=1.0, query_max_results=12, recall_note=True)
    conv = session.conv
    boat = next(c for c in conv.graveyard() if "Marigold" in conv.chunk_text(c.id))
    live_before = conv.live_input_ids().tolist()
    graveyard_before = sorted(c.id for c in conv.graveyard())
    file_before = session.store.conn.execute("SELECT count(*), sum(live) FROM chunks").fetchone()

    draft = settled_text(BOAT_ASKED[:-6])  # typed up to "moor h": the last word left out
    ids, _ = tokenize(embedder, draft)
    early = session.server.draft_ids(session.recall.index, session.recall.index.search(draft), ids, text=draft)

    # Nothing moved: the same live context, the same graveyard, the same file.
    assert conv.live_input_ids().tolist() == live_before
    assert sorted(c.id for c in conv.graveyard()) == graveyard_before
    assert session.store.conn.execute("SELECT count(*), sum(live) FROM chunks").fetchone() == file_before
    # The boat paragraph is in the draft prompt (the search for the draft found it) ...
    boat_ids = conv.chunk_tokens(boat.id).token_ids.tolist()
    assert any(early[i:i + len(boat_ids)] == boat_ids for i in range(len(early)))

    # ... and Enter sends the same prompt, the draft being its start.
    full, texts = tokenize(embedder, BOAT_ASKED)
    back = session.recall.recall_for(session.recall.index, session.recall.index.search(BOAT_ASKED), len(full))
    session.add_user_message(full, texts, recalled=back)
    session.fit_model_window()
    session.begin_answer()
    sent = session.generation_request()["input_ids"]
    assert boat.live
    assert len(sent) > len(early) > len(live_before)
    assert sent[:len(early)] == early
    assert session.recall.note() is not None, "a recall note was part of both"


#: Every match the search returns may come back (no absolute or relative floor, no cap).
EVERY_MATCH = dict(min_similarity=0.0, recall_relative_floor=0.0, recall_max_chunks=0)


def test_a_draft_whose_plan_makes_room_leaves_out_what_enter_prunes(embedder, tmp_path):  # noqa: F811
    """resurrection_keep_share < 1 (the default): the message's plan prunes older context;
    the draft plans the same choice without making it.

    Guards that the draft's room prune is the one Enter makes (or a little less of it, the
    draft being a word shorter) and that the draft resurrects what Enter does, so the
    server's cache keeps all of what Enter sends.  With every match allowed back (30
    matches, no floor, no cap, a 1,024-token window) the plan fills its room past the boat talk with unrelated chunks
    of cosine ~0, so it also guards that those rank the same on every CPU: with bfloat16
    vectors (~1e-3 apart between CPUs' kernels) their order, and whether a 16-token one
    fitted by a token, moved, and this failed on an Intel AMX machine; float32 vectors and
    the rank grid (halo_weave.core.ties) keep it.
    """
    session, _ = _chat(embedder, tmp_path / "room.db", "after_exchange", exchanges=12,
                       resurrection_keep_share=0.5, **EVERY_MATCH)
    _draft_plans_what_enter_prunes(session, embedder)


def test_a_draft_plans_the_room_enter_makes_for_the_matches_alone(embedder, tmp_path):  # noqa: F811
    """The same, with a plan made of the boat talk's matches alone (cosine 0.6-0.96, the
    next match 0.05 lower) in a window where they need the room: the claim holds with a
    margin far above any CPU's rounding (20 of 20 runs with ±1e-3 noise on the vectors)."""
    session, _ = _chat(embedder, tmp_path / "room.db", "after_exchange", exchanges=12,
                       window=TIGHT, resurrection_keep_share=0.5, query_max_results=5)
    _draft_plans_what_enter_prunes(session, embedder)


def _draft_plans_what_enter_prunes(session, embedder) -> None:  # noqa: F811
    conv = session.conv
    live_before = conv.live_input_ids().tolist()
    live_chunks = {c.id for c in conv.live_chunks()}
    file_before = session.store.conn.execute("SELECT count(*), sum(live) FROM chunks").fetchone()

    draft = settled_text(BOAT_ASKED[:-6])
    ids, _ = tokenize(embedder, draft)
    early = session.server.draft_ids(session.recall.index, session.recall.index.search(draft), ids, text=draft)
    assert conv.live_input_ids().tolist() == live_before
    assert {c.id for c in conv.live_chunks()} == live_chunks
    assert session.store.conn.execute("SELECT count(*), sum(live) FROM chunks").fetchone() == file_before
    boat = next(c for c in conv.graveyard() if "Marigold" in conv.chunk_text(c.id))
    boat_ids = conv.chunk_tokens(boat.id).token_ids.tolist()
    assert any(early[i:i + len(boat_ids)] == boat_ids for i in range(len(early)))

    full, texts = tokenize(embedder, BOAT_ASKED)
    back = session.recall.recall_for(session.recall.index, session.recall.index.search(BOAT_ASKED), len(full))
    pruned = live_chunks - {c.id for c in conv.live_chunks()}
    assert pruned, "Enter pruned older context to make room"
    session.add_user_message(full, texts, recalled=back)
    session.fit_model_window()
    session.begin_answer()
    sent = session.generation_request()["input_ids"]
    # What Enter sends before the message is the draft's context with only what Enter
    # pruned besides (the draft, a word shorter, may plan its room to prune a little less):
    # in order, so the server's cache keeps all of it and only drops the rest.
    prefix = [int(i) for i in conv.framing.prefix.get("user", ([], []))[0]]
    def opening(ids):  # where the message's turn opens (its recall note follows)
        return max(i for i in range(len(ids)) if ids[i:i + len(prefix)] == prefix)

    context, draft_context = sent[:opening(sent)], early[:opening(early)]
    it = iter(draft_context)
    assert all(token in it for token in context), "the sent context is the draft's, less what was pruned"
    framing = 8 * len(pruned)  # a turn left empty takes its framing too; the draft keeps it
    assert len(draft_context) - len(context) <= sum(conv.chunks[i].token_count for i in pruned) + framing


def test_the_draft_keeps_the_part_of_its_recall_enter_keeps_and_its_note(embedder, tmp_path):  # noqa: F811
    """Enter keeps only the part of what came back most relevant to the message
    (``recall_keep_share``, the default 0.5) and the recall note copies that part, most
    relevant first.  The draft ranks what it would bring back the same way, so what the
    server read ahead, note and all, is still the start of what Enter sends: only the
    last word and the framing are left to read at Enter (else the note and the message
    were read again, ~65 tokens, a second on a slow CPU)."""
    session, _ = _chat(embedder, tmp_path / "keep.db", "after_exchange", exchanges=12,
                       resurrection_keep_share=1.0, query_max_results=12, recall_note=True)
    assert session.settings.recall.recall_keep_share < 1
    draft = settled_text(BOAT_ASKED[:-6])
    ids, _ = tokenize(embedder, draft)
    index = session.recall.index
    plan = session.server.draft_plan(index, index.search(draft), ids)
    assert session.recall.keeps_part(plan.recalled)
    order = session.recall.ranking(plan.recalled, draft)()
    early = session.server.draft_prompt(plan, ids, order, draft)
    everything = session.server.draft_prompt(plan, ids, text=draft)

    full, texts = tokenize(embedder, BOAT_ASKED)
    back = session.recall.recall_for(index, index.search(BOAT_ASKED), len(full))
    kept = session.recall.keep_relevant(back, BOAT_ASKED)
    assert session.recall.given_back > 0, "part of what came back went back"
    session.add_user_message(full, texts, recalled=kept)
    session.fit_model_window()
    session.begin_answer()
    sent = session.generation_request()["input_ids"]
    assert session.recall.note() is not None
    assert "".join(session.recall.note().texts).endswith("(Answer with the place.)\n\n"), "it asks where"
    assert sent[:len(early)] == early, "the draft is the start of what Enter sends, its note's cue included"
    assert sent[:len(everything)] != everything, "without the ranking, the note would differ"

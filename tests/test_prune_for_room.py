"""Pruning only for room (``prune_when = "for_room"``) through the app's ChatSession: a
real SQLite file, the real MiniLM index, the app's order of a turn (resurrect for the
message, add it, fit the window, stream the answer, finish and prune).

The model's window is declared (``ModelInfo.max_context``) and the answers are scripted
with an attention that favours the newest tokens, as tests/test_resurrection.py does; the
same chat is run pruned after every exchange and pruned only for room, side by side.
"""

from __future__ import annotations

import numpy as np
import pytest

from halo_weave.core.anchors import anchors_of
from halo_weave.events import ModelInfo, TokenEvent
from halo_weave.semantic_index import SemanticIndex
from halo_weave.session import ChatSession
from halo_weave.store import ConversationStore
from test_resurrection import BOAT_ANSWER, BOAT_QUESTION, TOPICS
from test_semantic_index import chunk_with, embedder, new_conversation, tokenize  # noqa: F401

pytestmark = pytest.mark.slow

WINDOW = 1024  # the model's context
NEW_TOKENS = 200  # room kept for the answer
KEEP = 300  # max_context_tokens (P)
BOAT_ASKED = "What was the name you suggested for my sailing boat, and where should I moor her?"


def _model_info(window: int) -> ModelInfo:
    return ModelInfo("scripted", 1, 1, 1, 1, window, None, None, None, True, {})


def _session(embedder, path, prune_when: str, window: int = WINDOW, **changes):  # noqa: F811
    # The room's arithmetic without a recall note (its 160 tokens are a sixth of this
    # small window; tests/test_recall_note.py and the first read-ahead test have notes).
    changes.setdefault("recall_note", False)
    conv = new_conversation(embedder, max_context_tokens=KEEP, prune_hysteresis=1.0,
                            max_new_tokens=NEW_TOKENS, prune_when=prune_when, **changes)
    store = ConversationStore.open(path)
    session = ChatSession(conv.settings)
    session.adopt(conv, store)
    session.model_info = _model_info(window)
    session.recall.use_index(SemanticIndex(store.conn, conv.settings, embedder, lock=store.lock))
    return session


def _send(session, embedder, question, *answer):  # noqa: F811
    """One exchange in the app's order; returns what was resurrected and what the finish pruned."""
    ids, texts = tokenize(embedder, question + "\n\n")
    back = []
    if session.recall.can_recall():
        back = session.recall.recall_for(session.recall.index, session.recall.index.search(question), len(ids))
    session.add_user_message(ids, texts, recalled=back)
    session.fit_model_window()
    session.begin_answer()
    for token_id, piece in zip(*tokenize(embedder, "\n\n".join(answer) + "\n\n")):
        n = session.conv.live_token_count()
        attention = np.full(n, 0.2 / n, np.float32)  # the newest tokens read most
        attention[0] = 0.5
        attention[-120:] += 0.3 / 120
        session.receive(TokenEvent(token_id, piece, attention))
    end = session.finish_turn("stop")
    session.recall.index.index_pending(session.conv)
    return back, end


def _chat(embedder, path, prune_when, exchanges=24, window=WINDOW, **changes):  # noqa: F811
    """The boat talk, then unrelated exchanges; live tokens after each exchange."""
    session = _session(embedder, path, prune_when, window, **changes)
    _send(session, embedder, BOAT_QUESTION, *BOAT_ANSWER)
    live = []
    for i in range(exchanges):
        _send(session, embedder, *TOPICS[i % len(TOPICS)])
        live.append(session.conv.live_token_count())
    return session, live


@pytest.mark.parametrize("order", ["brightness", "age"])
def test_pruning_for_room_keeps_the_window_full_and_still_brings_the_boat_back(embedder, tmp_path, order):  # noqa: F811
    # The room as pruning after the exchange leaves it, and the 20 candidates this was
    # measured with (no share of the recent context given up for recall: the next test).
    old_room = dict(prune_order=order, resurrection_keep_share=1.0, query_max_results=20)
    after, after_live = _chat(embedder, tmp_path / "after.db", "after_exchange", **old_room)
    lazy, lazy_live = _chat(embedder, tmp_path / "lazy.db", "for_room", **old_room)
    limit = WINDOW - NEW_TOKENS
    # Between messages: after every exchange the context goes down to P; only for room it
    # keeps what the window holds, so the recent exchanges the model goes on from stay.
    assert max(after_live[5:]) <= KEEP < min(lazy_live[14:])
    assert max(lazy_live) <= limit and min(lazy_live[14:]) > 0.8 * limit
    recent = {t for t in after.conv.turns if t >= after.conv.next_turn_id - 12}  # the last 6 exchanges

    def recent_live(session) -> int:
        return sum(c.token_count for c in session.conv.live_chunks() if not c.framing and c.turn_id in recent)

    assert recent_live(lazy) > recent_live(after)
    for session in (after, lazy):
        assert not chunk_with(session.conv, "Marigold Drifter").live, "the boat talk was pruned long ago"

    before = lazy.conv.live_token_count()
    latest = {lazy.conv.next_turn_id - 2, lazy.conv.next_turn_id - 1}
    back, _ = _send(lazy, embedder, BOAT_ASKED, "She is the Marigold Drifter, moored at Port Quillan.")
    assert any("Marigold Drifter" in lazy.conv.chunk_text(c.id) for c in back)
    boat_back, _ = _send(after, embedder, BOAT_ASKED, "She is the Marigold Drifter, moored at Port Quillan.")
    assert any("Marigold Drifter" in after.conv.chunk_text(c.id) for c in boat_back)
    # Room was made by pruning, not more than pruning after the exchange would give, and
    # never the exchange the user just read.
    question_tokens = len(tokenize(embedder, BOAT_ASKED + "\n\n")[0])
    room = WINDOW - KEEP - question_tokens - NEW_TOKENS
    brought = sum(c.token_count for c in back)
    assert 0 < brought <= room
    graveyard = {c.id for c in lazy.conv.graveyard()}
    assert not any(c.id in graveyard for t in latest for c in lazy.conv.content_chunks(t))
    assert before > KEEP

    # What the prune for room did is on disk: the file reopens to the same live chunks.
    conv = lazy.conv
    lazy.store.close()
    with ConversationStore.open(tmp_path / "lazy.db", create=False) as store:
        again = store.load(lazy.settings, conv.framing)
    assert {c.id for c in again.live_chunks()} == {c.id for c in conv.live_chunks()}
    after.store.close()


TIGHT = 500  # a model window that leaves the boat no room when the context is at P


def test_a_message_prunes_older_context_to_make_room_for_what_it_brings_back(embedder, tmp_path):  # noqa: F811
    """resurrection_keep_share: the room is counted as if the context
    held only its newest share of P, and just enough older context is pruned for the plan."""
    ids, _ = tokenize(embedder, BOAT_ASKED + "\n\n")
    found = {}
    for share in (1.0, 0.5):
        session, _ = _chat(embedder, tmp_path / f"share{share}.db", "after_exchange", exchanges=12,
                           window=TIGHT, prune_order="age", resurrection_keep_share=share,
                           query_max_results=5)  # few matches: most of the context is not one
        conv = session.conv
        latest = {conv.next_turn_id - 2, conv.next_turn_id - 1}
        live_before = {c.id: c for c in conv.live_chunks() if not c.framing}
        matches = session.recall.index.search(BOAT_ASKED)
        spared = {m.chunk_id for m in matches} | {a.id for m in matches if m.chunk_id in conv.chunks
                                                  for a in anchors_of(conv, conv.chunks[m.chunk_id])}
        back = session.recall.recall_for(session.recall.index, matches, len(ids))
        live_after = {c.id for c in conv.live_chunks() if not c.framing}
        pruned = [live_before[i] for i in live_before if i not in live_after]
        found[share] = (session, back, pruned, live_before, latest, spared)

    # The room pruning left at P is too small for the boat; nothing is pruned for it.
    session, back, pruned, _, _, _ = found[1.0]
    assert not any("Marigold Drifter" in session.conv.chunk_text(c.id) for c in back)
    assert not pruned

    # Counted from half of P, the boat comes back, paid for by the oldest live context.
    session, back, pruned, live_before, latest, spared = found[0.5]
    conv = session.conv
    assert any("Marigold Drifter" in conv.chunk_text(c.id) for c in back)
    assert chunk_with(conv, "Marigold Drifter").live
    assert pruned, "the room was made by pruning"
    # A match of this search stays where it is; the exchange just read stays.
    assert not spared & {c.id for c in pruned}
    assert all(c.live for t in latest for c in conv.content_chunks(t)), "the exchange just read stays"
    # What was live stays down to half of P at least (system prompt and framing counted).
    assert conv.live_token_count() - sum(c.token_count for c in back) >= KEEP // 2
    assert conv.live_token_count() + len(ids) + NEW_TOKENS <= TIGHT
    # The prune and the resurrection are on disk together.
    session.store.close()
    with ConversationStore.open(tmp_path / "share0.5.db", create=False) as store:
        again = store.load(session.settings, conv.framing)
    assert {c.id for c in again.live_chunks()} == {c.id for c in conv.live_chunks()}
    found[1.0][0].store.close()


def test_pruning_for_room_needs_the_window_and_falls_back_without_it(embedder, tmp_path):  # noqa: F811
    session = _session(embedder, tmp_path / "unknown.db", "for_room")
    session.model_info = _model_info(0)  # a server that does not say: prune after exchanges
    assert not session.server.prunes_for_room
    for i in range(8):
        _send(session, embedder, *TOPICS[i])
    assert session.conv.live_token_count() <= KEEP + 120
    session.store.close()

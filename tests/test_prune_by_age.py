"""Oldest-first pruning (``prune_to_fit(order="age")``) for servers that send no attention."""

from __future__ import annotations

import re

from halo_weave.conversation import Conversation
from halo_weave.settings import Settings

PARAGRAPHS = "\n\n".join(f"Paragraph {i} has a handful of words in it to fill a chunk." for i in range(3))


def _say(conv: Conversation, role: str, text: str):
    pieces = re.findall(r"\n|[^\S\n]*[^\s]+", text)
    return conv.add_turn(role, [1000 + i for i in range(len(pieces))], pieces)


def _conversation(turns: int = 4) -> Conversation:
    conv = Conversation(Settings.of(min_chunk_tokens=8))
    for t in range(turns):
        _say(conv, "user" if t % 2 == 0 else "assistant", PARAGRAPHS)
    return conv


def test_prunes_oldest_chunks_first_until_it_fits():
    conv = _conversation()
    newest = [c.id for c in conv.content_chunks(3)]
    limit = conv.live_token_count() // 2
    pruned = conv.prune_to_fit(limit, order="age")
    assert conv.live_token_count() <= limit
    assert pruned and all(c.turn_id <= 1 for c in pruned if not c.framing)
    assert all(conv.chunks[c].live for c in newest)
    assert [c.start for c in pruned] == sorted(c.start for c in pruned)


def test_anchor_pairs_leave_together_and_only_last():
    conv = _conversation()
    pruned = conv.prune_to_fit(conv.live_token_count() - 5, order="age")
    # The oldest non-anchor goes first; the question's S0 stays while its turn has more.
    assert [(c.turn_id, c.chunk_index) for c in pruned if not c.framing] == [(0, 1)]
    conv.prune_to_fit(conv.live_token_count() // 2, order="age")
    user_s0, answer_s0 = conv.chunk_by_key(0, 0, "user"), conv.chunk_by_key(1, 0, "assistant")
    assert user_s0.live == answer_s0.live


def test_pinned_chunks_stay_and_zero_means_never():
    conv = _conversation()
    conv.pin(conv.content_chunks(0)[1].id)
    before = conv.live_token_count()
    assert conv.prune_to_fit(0, order="age") == []
    assert conv.live_token_count() == before
    conv.prune_to_fit(1, order="age")
    assert conv.content_chunks(0)[1].live


def test_a_resurrected_chunk_survives_the_exchange_it_came_back_for_then_ages_from_then():
    conv = _conversation(6)
    oldest = conv.content_chunks(0)[1]
    conv.prune_to_fit(conv.live_token_count() - 5, order="age")
    assert not oldest.live
    # Brought back for the next message (before it is added, as the session does).
    conv.resurrect([oldest.id], with_anchors=False)
    assert oldest.live
    _say(conv, "user", PARAGRAPHS)
    _say(conv, "assistant", PARAGRAPHS)
    # The prune after the answer: the chunk is at the very start, but it is part of this exchange.
    pruned = conv.prune_to_fit(conv.live_token_count() * 2 // 3, order="age", keep_latest_exchange=True)
    assert pruned and oldest.live, "pruned again right after the answer it was brought back for"
    # One exchange later it ranks by when it came back: the turns before that go first.
    _say(conv, "user", PARAGRAPHS)
    _say(conv, "assistant", PARAGRAPHS)
    before_resurrection = [c for c in conv.live_chunks() if not c.framing and c.turn_id in (2, 3, 4, 5)]
    assert before_resurrection
    conv.prune_to_fit(conv.live_token_count() - 5, order="age", keep_latest_exchange=True)
    assert oldest.live and not all(c.live for c in before_resurrection)

"""The stats bar's "Total": every word written in the conversation, whatever is live.

A newcomer saw it go down after a restart (1,710 → 1,704): it counted the live chat
template and the system prompt, which pruning, recalling and reopening change.  Real
SQLite file in ``tmp_path``; the conversation is written through the app's own store.
"""

from __future__ import annotations

import random

from conversation_writer import FRAMING, message, new_conversation, settings, tokenize
from halo_weave.store import ConversationStore


def _write(store, conv, role: str, text: str) -> None:
    pieces = tokenize(text)
    store.save_turn(conv, conv.add_turn(role, [i for i, _ in pieces], [t for _, t in pieces]))


def test_the_total_stays_through_prunes_recalls_and_a_restart(tmp_path):
    rng = random.Random(5)
    path = tmp_path / "chat.sqlite"
    with ConversationStore.open(path) as store:
        conv = new_conversation()
        for i in range(6):
            _write(store, conv, "user" if i % 2 == 0 else "assistant", message(rng, 2))
        words = sum(c.token_count for c in conv.chunks.values() if not c.framing)
        assert conv.total_token_count() == words > 0
        first = conv.content_chunks(next(iter(conv.turns)))[0]
        pruned = conv.prune_chunk(first.id)
        store.save_chunks(conv, pruned)
        assert not conv.chunks[first.id].live
        assert conv.total_token_count() == words, "pruning moves words, it writes none"
        back = conv.resurrect([first.id])
        store.save_chunks(conv, back)
        assert conv.total_token_count() == words, "a recall writes nothing new"
        store.save_chunks(conv, conv.prune_to_fit(conv.live_token_count() // 2) or [])
        assert conv.total_token_count() == words
    with ConversationStore.open(path, create=False) as store:
        reopened = store.load(settings(), FRAMING)
    assert reopened.total_token_count() == words, "reopening the file gives the same Total"

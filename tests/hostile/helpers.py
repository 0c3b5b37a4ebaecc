"""Shared builders for the hostile tests: a saved conversation and what a user would see of it."""

from __future__ import annotations

import random
from pathlib import Path

from conversation_writer import FRAMING, add_user, message, new_conversation, settings, stream_answer
from halo_weave.store import ConversationStore


def build_conversation(path: Path, exchanges: int = 4, seed: int = 5) -> None:
    """A closed conversation file with live, pruned and pinned chunks and notes (no -wal)."""
    rng = random.Random(seed)
    with ConversationStore.open(path) as store:
        conv = new_conversation()
        store.save_system_prompt(conv)
        for _ in range(exchanges):
            store.save_turn(conv, add_user(conv, message(rng, 2)))
            store.save_turn(conv, stream_answer(conv, message(rng, 3), store, rng=rng))
            store.save_brightness(conv)
            store.save_chunks(conv, conv.prune_to_fit(300))
        store.save_chunks(conv, [conv.pin(conv.live_chunks()[-2].id)])
        store.save_tool_data("notes", {"user": {"name": "Ada", "pets": ["cat", "heron"]}})
        with store.transaction() as db:
            for chunk in list(conv.chunks.values())[:8]:
                db.execute(
                    "INSERT INTO semantic_entries (chunk_id, turn_id, chunk_index, role, text, token_count,"
                    " context_hash, embedding, model, dim, reference_count, updated_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'all-MiniLM-L6-v2', 384, 0, 1700000000.5)",
                    (chunk.id, *chunk.key, conv.chunk_text(chunk.id), chunk.token_count,
                     f"hash{chunk.id}", bytes(1536)),
                )


def what_the_user_sees(store: ConversationStore) -> dict:
    """Everything a user can read of a conversation: prompt, turns, every chunk's text, notes.

    Pruned chunks' tokens are read too (as the graveyard and resurrection do), so a damaged
    pruned chunk raises like it would in the app.
    """
    conv = store.load(settings(), FRAMING)
    ids = sorted(conv.chunks)
    pruned = store.load_chunk_tokens([i for i in ids if not conv.chunks[i].live])
    chunks = {}
    for i in ids:
        chunk = conv.chunks[i]
        tokens = conv.chunk_tokens(i) if chunk.live else pruned[i]
        chunks[i] = (chunk.turn_id, chunk.start, chunk.live, chunk.pinned,
                     "".join(tokens.texts), tokens.token_ids.tolist())
    return {
        "system": (conv.system.text, conv.system.ids.tolist(), list(conv.system.texts)),
        "turns": {t: (turn.role, turn.complete) for t, turn in conv.turns.items()},
        "chunks": chunks,
        "notes": store.load_tool_data("notes"),
    }

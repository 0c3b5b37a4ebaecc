"""Chunks on their way into the semantic index: read from the conversation, then embedded.

:func:`prepare` reads what embedding needs (the chunk's turn-pair context, see
:mod:`.turn_pair`, and its digest) on the UI thread, cheaply and without the model;
:func:`embed` fills the vectors (slow, touches neither conversation nor database), so a
worker thread can run it.  :class:`~halo_weave.semantic_index.SemanticIndex` stores them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from ..conversation import Conversation
from .embedder import Embedder
from .turn_pair import context_parts, context_pieces, fit_context, signature_hash, text_hash


@dataclass
class EntryDraft:
    """One chunk on its way into the index (see :mod:`halo_weave.semantic_index`)."""

    chunk_id: int
    turn_id: int
    chunk_index: int
    role: str
    text: str
    token_count: int
    pieces: list[tuple[int, str]]
    context_hash: str
    vector: np.ndarray | None = field(default=None, repr=False)


def prepare(conv: Conversation, chunk_ids: Iterable[int], limit: int) -> list[EntryDraft]:
    """Drafts of ``chunk_ids``, their contexts cut for ``limit`` embedding tokens (no model)."""
    drafts = []
    for chunk_id in chunk_ids:
        chunk = conv.chunks[chunk_id]
        parts = context_parts(conv, chunk)
        pieces = context_pieces(conv, parts)
        digest = f"{signature_hash(parts, limit)}:{text_hash(chr(30).join(t for _, t in pieces))}"
        drafts.append(EntryDraft(chunk.id, chunk.turn_id, chunk.chunk_index, chunk.role,
                                 pieces[0][1], chunk.token_count, pieces, digest))
    return drafts


def embed(embedder: Embedder, drafts: Sequence[EntryDraft], limit: int,
          batch_size: int = 32) -> Sequence[EntryDraft]:
    """Fill each draft's vector, its context fitted to ``limit`` tokens (and the model's)."""
    limit = min(limit, embedder.max_tokens)
    contexts = [fit_context(d.pieces, embedder.count, embedder.truncate, limit) for d in drafts]
    vectors = embedder.encode(contexts, batch_size=batch_size)
    for draft, vector in zip(drafts, vectors):
        draft.vector = vector
    return drafts

"""Turn-pair embedding context (seed 001 §8): what a chunk is embedded *with*.

We resurrect with conversational context, so we embed with it:

* assistant chunk of turn N: ``[user S0 of turn N-1] [assistant S0 of turn N] [target]``
* user chunk of turn N: ``[user S0 of turn N] [target] [assistant S0 of turn N+1]``
  (the answer's S0 only once that turn is complete)
* system chunk: ``[target]`` alone
* a target that *is* S0 is not added twice.

The parts are chosen by priority within the model's word-piece limit (256 for MiniLM,
[CLS]/[SEP] included): the target first (cut to fit if it alone is too long), then the
cross-turn S0 (the other role's), then the same-turn S0, each cut to what is left, and
are written in conversation order.

A context's *signature* names the chunks it is made of and their sizes.  Chunk tokens
never change except through a merge (which changes the kept chunk's size and removes
the absorbed one), so an unchanged signature means an unchanged context: checking
every chunk for re-embedding needs no text at all.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ..conversation import Chunk, Conversation

#: Word-piece parts shorter than this are dropped rather than cut to a stub.
MIN_PART_PIECES = 8

Signature = tuple[int, ...]


@dataclass(frozen=True)
class ContextParts:
    """The chunks one target is embedded with, in priority order."""

    target: Chunk
    cross: Chunk | None  # the other role's S0
    same: Chunk | None  # the target's own turn's S0 (None when the target is S0)

    @property
    def signature(self) -> Signature:
        sig = [self.target.id, self.target.token_count]
        for part in (self.cross, self.same):
            sig += [part.id, part.token_count] if part is not None else [-1, 0]
        return tuple(sig)



def context_parts(conv: Conversation, chunk: Chunk) -> ContextParts:
    """Which chunks ``chunk`` is embedded with (see the module docstring)."""
    if chunk.role == "system":
        return ContextParts(chunk, None, None)
    same = None if chunk.anchor else conv.chunk_by_key(chunk.turn_id, 0, chunk.role)
    if chunk.role == "assistant":
        cross = conv.chunk_by_key(chunk.turn_id - 1, 0, "user")
    else:
        cross = conv.chunk_by_key(chunk.turn_id + 1, 0, "assistant")
        if cross is not None and not conv.turns[cross.turn_id].complete:
            cross = None  # an answer still streaming: wait for its whole opening
    return ContextParts(chunk, cross, same)


def signature_hash(parts: ContextParts, max_tokens: int) -> str:
    """Short digest of a context's structure (and of the word-piece limit)."""
    raw = f"{max_tokens}|" + ",".join(map(str, parts.signature))
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def context_pieces(conv: Conversation, parts: ContextParts) -> list[tuple[int, str]]:
    """``(position, text)`` of each part, in priority order (target, cross, same)."""
    present = [c for c in (parts.target, parts.cross, parts.same) if c is not None]
    return [(c.start, conv.chunk_text(c.id).strip()) for c in present]


def fit_context(pieces: list[tuple[int, str]], count, truncate, limit: int) -> str:
    """The context string within ``limit`` word-pieces ([CLS]/[SEP] included).

    ``pieces`` come from :func:`context_pieces`; ``count(texts) -> list[int]`` and
    ``truncate(text, n) -> str`` are the embedder's word-piece functions.  The first
    piece (the target) is always kept, cut if it alone is too long.
    """
    budget = max(limit - 2, 1)
    chosen: list[tuple[int, str]] = []
    sizes = count([text for _, text in pieces])
    for i, ((start, text), size) in enumerate(zip(pieces, sizes)):
        if budget <= 0:
            break
        if size > budget:
            if i > 0 and budget < MIN_PART_PIECES:
                continue
            text, size = truncate(text, budget), budget
        chosen.append((start, text))
        budget -= size
    return "\n\n".join(text for _, text in sorted(chosen))

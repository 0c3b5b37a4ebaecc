"""Turn-pair embedding context: what a chunk is embedded *with*.

We resurrect with conversational context, so we embed with it:

* assistant chunk of turn N: ``[user S0 of turn N-1] [assistant S0 of turn N] [target]``
* user chunk of turn N: ``[user S0 of turn N] [target] [assistant S0 of turn N+1]``
  (the answer's S0 only once that turn is complete)
* system chunk, and a paragraph of an attached document: ``[target]`` alone (its text
  starts with its file's name and page)
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
from typing import Sequence

import numpy as np

from ..conversation import Chunk, Conversation
from ..core.registry import ROLE_CODE

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
    if chunk.role in ("system", "document"):
        return ContextParts(chunk, None, None)
    same = None if chunk.anchor else conv.chunk_by_key(chunk.turn_id, 0, chunk.role)
    if chunk.role == "assistant":
        cross = conv.chunk_by_key(chunk.turn_id - 1, 0, "user")
    else:
        cross = conv.chunk_by_key(chunk.turn_id + 1, 0, "assistant")
        if cross is not None and not conv.turns[cross.turn_id].complete:
            cross = None  # an answer still streaming: wait for its whole opening
    return ContextParts(chunk, cross, same)


def signature_hash(parts: ContextParts | Signature, max_tokens: int) -> str:
    """Short digest of a context's structure (and of the word-piece limit)."""
    signature = parts.signature if isinstance(parts, ContextParts) else parts
    raw = f"{max_tokens}|" + ",".join(map(str, signature))
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def signatures(ids, turn_ids, chunk_index, roles, counts, incomplete: Sequence[int]) -> np.ndarray:
    """The :attr:`ContextParts.signature` of many chunks at once, from their columns
    (:meth:`ChunkRegistry.current_columns`), one row each: the same parts
    :func:`context_parts` picks, without a chunk object.  ``incomplete``: turn ids not
    complete (an answer still streaming is no user chunk's part yet)."""
    system, user, assistant, document = (ROLE_CODE[r] for r in ("system", "user", "assistant", "document"))
    key = turn_ids * 4 + roles  # (turn, role) of a turn's S0
    s0 = np.flatnonzero(chunk_index == 0)
    order = np.argsort(key[s0], kind="stable")
    s0_keys, s0_rows = key[s0][order], s0[order]

    def s0_row(keys: np.ndarray) -> np.ndarray:
        if not len(s0_keys):
            return np.full(len(keys), -1, np.int64)
        at = np.minimum(np.searchsorted(s0_keys, keys), len(s0_keys) - 1)
        return np.where(s0_keys[at] == keys, s0_rows[at], -1)

    cross = s0_row(np.where(roles == assistant, (turn_ids - 1) * 4 + user, (turn_ids + 1) * 4 + assistant))
    if len(incomplete):
        cross[(roles == user) & np.isin(turn_ids + 1, np.asarray(incomplete, np.int64))] = -1
    same = s0_row(key)
    same[chunk_index == 0] = -1
    alone = (roles == system) | (roles == document)
    cross[alone] = same[alone] = -1
    out = np.empty((len(ids), 6), np.int64)
    out[:, 0], out[:, 1] = ids, counts
    for column, part in ((2, cross), (4, same)):
        found = part >= 0
        out[:, column] = np.where(found, ids[part], -1)
        out[:, column + 1] = np.where(found, counts[part], 0)
    return out


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

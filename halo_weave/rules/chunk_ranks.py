"""Chunk ranks: how a chunk's token brightness makes the one score pruning ranks it by
and the heatmap colours it by.

Each rank is a small object with its words and ``scores(brightness, starts, k)``: one
score per run of rows starting at ``starts`` (the chunks of the token table, in order).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from .choice import Choice


class ChunkRank(Protocol):
    """What every chunk rank offers."""

    choice: Choice

    def scores(self, brightness: np.ndarray, starts: np.ndarray, k: int) -> np.ndarray:
        """One int32 score per run of rows (``starts`` not empty)."""


class Peak:
    """A chunk is as bright as its brightest token."""

    choice = Choice(
        "peak", "Its brightest word (peak)",
        "A paragraph is as bright as its brightest word: one word the model keeps "
        "reading keeps the whole paragraph.",
        "peak")

    def scores(self, brightness, starts, k):
        return np.maximum.reduceat(brightness, starts)


class TopK:
    """The mean of a chunk's ``k`` brightest tokens."""

    choice = Choice(
        "topk", "Mean of its k brightest words",
        "A paragraph's score is the mean of its k brightest words: harder for a single "
        "stray word to keep a paragraph alive.",
        "top-{chunk_rank_k} mean",
        uses=("chunk_rank_k",))

    def scores(self, brightness, starts, k):
        n = len(brightness)
        counts = np.diff(np.append(starts, n))
        chunk_of = np.repeat(np.arange(len(starts)), counts)
        order = np.lexsort((-brightness.astype(np.int64), chunk_of))  # by chunk, brightest first
        within = np.arange(n) - starts[chunk_of]  # rank inside the chunk (order keeps chunks in place)
        top = within < k
        sums = np.bincount(chunk_of[top], weights=brightness[order][top].astype(np.float64),
                           minlength=len(starts))
        return (sums // np.minimum(counts, k)).astype(np.int32)


class Mean:
    """The mean of all a chunk's tokens: the attention it gets per token."""

    choice = Choice(
        "mean", "Mean of all its words",
        "A paragraph's score is the mean brightness of all its words: the attention it gets "
        "per word, so a long paragraph read in one place ranks below a short one read "
        "throughout.",
        "mean")

    def scores(self, brightness, starts, k):
        counts = np.diff(np.append(starts, len(brightness)))
        sums = np.add.reduceat(brightness.astype(np.int64), starts)
        return (sums // counts).astype(np.int32)


#: Every chunk rank by its setting's value, in the order the dialog lists them.
CHUNK_RANKS: dict[str, ChunkRank] = {rank.choice.value: rank for rank in (Peak(), TopK(), Mean())}


def chunk_rank(name: str) -> ChunkRank:
    """The rank called ``name`` (a clear error for any other)."""
    try:
        return CHUNK_RANKS[name]
    except KeyError:
        raise ValueError(f"unknown chunk rank {name!r}") from None

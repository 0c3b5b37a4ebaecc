"""Ranks that every CPU agrees on: scores on a fixed grid, ties broken by a stable key.

A score the memory ranks by is a float sum: a cosine over 384 dimensions, a blend of it
with normalised BM25, a chunk's brightness accumulated from attention.  The last bits of
such a sum depend on the SIMD kernel that added it up (torch, numpy and llama.cpp add in
another order with AVX2 than with AVX-512 or AMX), so two entries tied in exact
arithmetic, or closer than that noise, come out in an order the CPU picks, and so does
every plan that follows from the order: which matches fit the resurrection budget, which
chunks are pruned to make room for them.  Every ranking and selection of the search, the
resurrection plan and pruning therefore ranks by :func:`level` (the score on the grid
:data:`GRID`) and then by a stable key (chunk id or position), through :func:`rank_key`
or :func:`best`.

The grid cannot remove the edge, only place it: a score within the noise of a step
boundary may still fall on either side of it (about noise / step, ~1 % of the scores
for 1e-6 noise), but entries tied in exact arithmetic (a repeated line, identical vectors,
a neighbour that carries its match's score) now rank the same on every machine, which
the raw floats almost never did.
"""

from __future__ import annotations

import numpy as np

#: The step scores are ranked on: 1e-4 of a unit, and above 1 the same share of the
#: score's decade (five significant digits).  Search scores live on a unit scale
#: (cosine, BM25 normalised to 1, their blend, plus ``date_weight``); the noise between
#: CPU kernels on a float32 cosine of 384 dimensions is ~1e-7 to 1e-6, a hundred times
#: finer, while two different lines' cosines rarely lie within 1e-4 of each other (those
#: that do are a tie in all but the last bits, and ranking them by chunk id is as good
#: as any).  Brightness is an integer: the vote rule's peaks (at most 10,000) keep every
#: unit; the mass rule's sums (up to 2**30) are ranked to five significant digits, about
#: the precision of the float32 attention they were summed from.
GRID = 1e-4
#: Significant digits a level keeps from 10 up (below 10 every step of GRID counts).
DIGITS = 5
_WIDE = 10 ** DIGITS
_POWERS = 10 ** np.arange(19, dtype=np.int64)


def level(score: float) -> int:
    """``score`` on the grid, as a whole number of steps of :data:`GRID` (monotone: a
    higher score never gets a lower level).

    >>> level(0.51234), level(0.51236), level(0.5123400001) == level(0.5123399999)
    (5123, 5124, True)
    >>> level(9_873), level(1_234_567)
    (98730000, 12346000000)
    """
    steps = round(float(score) / GRID)  # half to even, as np.rint in levels()
    size = abs(steps)
    if size < _WIDE:
        return steps
    cut = 10 ** (len(str(size)) - DIGITS)
    size = (size + cut // 2) // cut * cut
    return size if steps > 0 else -size


def levels(scores: np.ndarray) -> np.ndarray:
    """:func:`level` of every score, as int64 (the same numbers, element by element)."""
    # float64 first: float32 / GRID would round differently from the scalar path.
    steps = np.rint(np.asarray(scores, np.float64) / GRID).astype(np.int64)
    size = np.abs(steps)
    wide = size >= _WIDE
    if wide.any():
        digits = np.searchsorted(_POWERS, size[wide], side="right")
        cut = _POWERS[digits - DIGITS]
        rounded = (size[wide] + cut // 2) // cut * cut
        steps[wide] = np.where(steps[wide] > 0, rounded, -rounded)
    return steps


def rank_key(score: float, key: int) -> tuple[int, int]:
    """Sort key that puts the best ``score`` first: the higher :func:`level`, then the
    lower ``key`` (a chunk id or position, the same on every machine)."""
    return -level(score), key


def best(scores: np.ndarray, keys: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` best ``scores``, best first, by :func:`rank_key`
    (``keys[i]`` breaks a tie of levels, lower first)."""
    n = len(scores)
    k = min(k, n)
    if k <= 0:
        return np.zeros(0, np.int64)
    keys = np.asarray(keys)
    if k < n:  # only the k-th best level and above can be among the best
        pool = _pool(np.asarray(scores), k)
        on_grid = levels(np.asarray(scores)[pool])
    else:
        pool = np.arange(n)
        on_grid = levels(scores)
    order = np.lexsort((keys[pool], -on_grid))
    return pool[order[:k]]


def best_set(scores: np.ndarray, keys: np.ndarray, k: int) -> np.ndarray:
    """The indices :func:`best` picks, ascending (their order left out, which saves the
    sort of a long pool: a stage that hands its best on as a set needs no more)."""
    n = len(scores)
    k = min(k, n)
    if k <= 0:
        return np.zeros(0, np.int64)
    if k == n:
        return np.arange(n)
    pool = _pool(np.asarray(scores), k)
    if len(pool) == k:
        return pool
    on_grid = levels(np.asarray(scores)[pool])
    least = np.partition(on_grid, len(pool) - k)[len(pool) - k]  # the k-th best level
    above = on_grid > least
    tied = pool[on_grid == least]
    # The tied level is cut by key, as best() does: the lowest keys first (a stable sort,
    # so equal keys keep index order there too).
    tied = tied[np.argsort(np.asarray(keys)[tied], kind="stable")[: k - int(above.sum())]]
    return np.sort(np.concatenate([pool[above], tied]))


def _pool(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices (ascending) of the scores whose level is at least the ``k``-th best level.

    The k-th best level is the level of the k-th best score (:func:`level` is monotone),
    so the raw scores are partitioned, not their levels, and only the scores near or
    above it are put on the grid: at 100k scores and k = 1,562 that halves the time.
    """
    n = len(scores)
    kth = float(np.partition(scores, n - k)[n - k])
    if np.isfinite(kth):
        least = level(kth)
        # Every score whose level is >= least lies above this bound: a level is the score
        # in steps of GRID, rounded to the nearest step (and from _WIDE steps on, to
        # DIGITS digits, which moves it by at most 1e-4 of itself); the margin covers both.
        bound = (least - 2 - abs(least) * 1e-3) * GRID
        near = np.flatnonzero(scores >= bound)
        pool = near[levels(scores[near]) >= least]
        if len(pool) >= k:  # fewer only where NaN (partitioned as the largest) pushed kth up
            return pool
    on_grid = levels(scores)
    return np.flatnonzero(on_grid >= np.partition(on_grid, n - k)[n - k])

"""One search over the vectors: what its first query reads, kept for the moved query.

A search ranks twice: the query, then the query moved by relevance feedback
(:func:`.ranking.feedback`), which stays near the first one.  A :class:`SearchPass` makes
the second ranking cheap without changing what it finds:

- the shortlist of the first pass over the head axes (:meth:`VectorMatrix.shortlist`)
  and its rows of the coarse matrix are gathered once; the moved query's candidates are
  chosen among the same rows, scored from that copy;
- the rows scored exactly are copied out once; the moved query's candidates are mostly
  the same rows, so only those not copied yet are read from the full matrix.

At 100k entries every gather reads rows scattered over a 154 MB matrix, a cache miss
per row; reading them once instead of twice is most of what a second ranking cost.
A pass belongs to one search: it is valid while the matrix does not change (the index
holds its lock across the search).
"""

from __future__ import annotations

import numpy as np

from . import scan
from .vector_matrix import VectorMatrix


class SearchPass:
    """The candidates and exact cosines of one search's queries over ``vectors``."""

    def __init__(self, vectors: VectorMatrix, boost: float, limit: int) -> None:
        self.vectors = vectors
        self.boost = boost
        self.limit = limit
        self._shortlisted = False
        self._shortlist: np.ndarray | None = None  # rows kept by the first pass (ascending)
        self._coarse: np.ndarray | None = None  # their coarse rows, gathered
        self._rows: list[np.ndarray] = []  # rows copied out for exact scoring, block by block
        self._blocks: list[np.ndarray] = []

    def candidates(self, query: np.ndarray) -> np.ndarray | None:
        """Rows that may hold the best ``limit`` boosted scores for a unit ``query``, in
        row order (None: every row).  The first query fixes the shortlist."""
        vm = self.vectors
        if not self._shortlisted:
            self._shortlisted = True
            self._shortlist = vm.shortlist(query, self.boost, self.limit)
            if self._shortlist is not None and scan.kernel() is None:  # else the int8 codes score it
                self._coarse = np.take(vm.coarse, self._shortlist, axis=0)
        return vm.candidates(query, self.boost, self.limit, self._shortlist, self._coarse)

    def similarity(self, query: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
        """Exact cosine of ``rows`` (ascending, unique; every row when None) with a unit
        ``query``; rows an earlier call copied out are not read again."""
        vm = self.vectors
        if rows is None:
            return vm.similarity(query, None)
        if not self._rows:
            self._rows, self._blocks = [rows], [np.take(vm.matrix, rows, axis=0)]
            return self._blocks[0] @ query
        known = np.concatenate(self._rows)
        order = np.argsort(known, kind="stable")
        at = np.searchsorted(known, rows, sorter=order)
        found = at < len(known)
        found[found] = known[order[at[found]]] == rows[found]
        missing = rows[~found]
        if len(missing):
            self._rows.append(missing)
            self._blocks.append(np.take(vm.matrix, missing, axis=0))
        scores = np.concatenate([block @ query for block in self._blocks])
        out = np.empty(len(rows), scores.dtype)
        out[found] = scores[order[at[found]]]
        out[~found] = scores[len(known):]  # the rows just read, ascending as asked
        return out

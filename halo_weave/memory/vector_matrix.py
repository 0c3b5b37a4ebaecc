"""The semantic index's vectors in memory: one contiguous matrix, two-stage search, snapshots.

:class:`VectorMatrix` holds unit float32 vectors row by row (``ids``, ``user`` flags and
``structure`` digests alongside) and answers "which rows could be the best for this
query".  Below :attr:`SearchTuning.two_stage_min` entries that is every row: brute force
over the matrix is already a few milliseconds.  Above it the search has two stages:

1. a *coarse* matrix, every vector projected onto the top ``coarse_dim`` principal axes of
   the vectors' second moment (uncentred PCA: the axes that keep most of each dot
   product), scores all rows with a sixth of the memory traffic; the best
   ``candidates`` by coarse score (user rows boosted like the final score) go on;
2. the caller scores those candidates exactly against the float32 rows.

The coarse stage itself starts with one pass over every row that keeps a shortlist.
With the compiled scan (:mod:`.scan`, a C loop built on first use) the pass reads each
row's ``coarse_dim`` axes as int8 :attr:`VectorMatrix.codes` (64 bytes a row, summed
exactly in int32) and keeps one row in ``code_share`` (at least ``head_factor`` x the
candidates); the codes of the shortlisted rows then pick the candidates.  Without it
(no C compiler) the pass reads the first ``head_dim`` float32 axes (a copy of those
columns), keeps one row in ``head_share``, and those rows are scored on all
``coarse_dim`` float32 axes.  A query moved by relevance feedback is ranked again within
that shortlist (:mod:`.search_pass`), so one pass per search reads every row.  Measured
at 100k realistic rows (``scripts/bench_index.py``): docs/benchmarks.md, "The compiled
first pass".

Why PCA rather than int8 of the whole vector: the full float32 product at 100k x 384 is
bound by reading 154 MB, and a 384-byte int8 row would still be 38 MB; the 64 principal
axes keep most of each dot product in 64 bytes a row (numpy itself has no BLAS path for
int8, hence the C scan).  Measured
recall@20 of the two-stage top 20 against exact search on real MiniLM vectors of LoCoMo
text (6,639 entries, 1,156 questions, 64 axes, 1,024 candidates): 1.000, every query's
top 20 identical; ``scripts/bench_index.py`` measures it again at 100k.  The axes are fitted on (a sample of) the vectors themselves
when the matrix first reaches ``two_stage_min`` rows and refitted each time it doubles.

Snapshots (:meth:`write` / :meth:`read`) put the whole state in one file: a JSON header
and the arrays back to back, read with ``readinto`` straight into preallocated arrays.
Whether a snapshot is still the database's truth is the caller's business (see
:mod:`semantic_index`); :meth:`read` only refuses files that are not whole.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..core import ties
from ..errors import SnapshotInvalid
from . import scan

_MAGIC = b"HALOVEC1"
_ALIGN = 64
_DIGEST = np.dtype("S16")


@dataclass(frozen=True)
class SearchTuning:
    """How the index searches and snapshots (defaults measured on a 2-core machine)."""

    #: Below this many entries every row is scored exactly (brute force is fast enough).
    two_stage_min: int = 20_000
    #: Principal axes kept in the coarse matrix.
    coarse_dim: int = 64
    #: The first this many of them (the axes that keep the most) are also held as a
    #: matrix of their own: a first pass over every row reads only these, and
    #: ``head_share`` of the rows (at least ``head_factor`` x the candidates) go on to be
    #: scored on all ``coarse_dim`` axes.  0: one pass over the whole coarse matrix.
    head_dim: int = 32
    head_share: int = 12
    head_factor: int = 4
    #: With the compiled first pass (:mod:`.scan`) the pass reads every row's
    #: ``coarse_dim`` axes as int8 codes instead (closer to the coarse score, in half the
    #: bytes of the head) and keeps this share of the rows (at least ``head_factor`` x
    #: the candidates: 6,248 of 100k).
    code_share: int = 24
    #: Rows the coarse stage hands to the exact stage: the most of ``candidates``,
    #: ``candidate_factor`` x the limit and one in ``candidate_share`` of the rows.
    candidates: int = 1024
    candidate_factor: int = 16
    candidate_share: int = 64
    #: Rows sampled to fit the axes (the second moment of more rows barely moves them).
    fit_sample: int = 16_384
    #: Indexes smaller than this keep no snapshot file (their table scan is fast).
    snapshot_min: int = 5_000
    #: A snapshot is rewritten once this share of its entries changed since it was written.
    snapshot_stale_fraction: float = 0.05


class VectorMatrix:
    """Unit vectors keyed by chunk id, contiguous, with an optional coarse projection."""

    def __init__(self, dim: int, capacity: int = 1024, tuning: SearchTuning | None = None) -> None:
        self.dim = dim
        self.tuning = tuning or SearchTuning()
        self.n = 0
        capacity = max(capacity, 1)
        self.matrix = np.zeros((capacity, dim), np.float32)
        self.ids = np.zeros(capacity, np.int64)
        self.user = np.zeros(capacity, np.bool_)
        self.structure = np.zeros(capacity, _DIGEST)
        self.row: dict[int, int] = {}
        self.basis: np.ndarray | None = None  # (dim, coarse_dim) once fitted
        self.coarse = np.zeros((0, 0), np.float32)
        self.head = np.zeros((0, 0), np.float32)  # coarse[:, :head_dim], contiguous
        #: ``coarse`` as int8 codes, ``coarse ~ codes * code_scale``.  An axis' scale fits
        #: its largest value when the axes were fitted (or the boost changed); later rows
        #: are clipped to it.  Snapshots keep the scale: reopened, the codes are the same.
        self.codes = np.zeros((0, 0), np.int8)
        self.code_scale = np.ones(0, np.float32)
        #: User rows of ``coarse`` are stored times this (the ranking's boost): no extra pass.
        self.coarse_boost = 1.0
        self.fitted_at = 0  # rows when the axes were fitted

    # ------------------------------------------------------------------ facts
    @property
    def capacity(self) -> int:
        return len(self.ids)

    @property
    def two_stage(self) -> bool:
        """True when searches go through the coarse matrix."""
        return self.basis is not None and self.n >= self.tuning.two_stage_min

    def nbytes(self) -> int:
        """Bytes held by the arrays (capacity included)."""
        return (self.matrix.nbytes + self.ids.nbytes + self.user.nbytes + self.structure.nbytes
                + self.coarse.nbytes)

    def brute_force(self) -> VectorMatrix:
        """The same rows with every one scored exactly (no coarse stage): a view that
        shares this matrix's arrays, the reference a two-stage search is measured
        against.  Read it while this matrix does not change (it keeps today's row count)."""
        view = copy.copy(self)
        view.tuning = dataclasses.replace(self.tuning, two_stage_min=sys.maxsize)
        return view

    # ------------------------------------------------------------------ changes
    def put_many(self, ids: Sequence[int], user: Sequence[bool], vectors: np.ndarray,
                 structure: Sequence[str]) -> None:
        """Insert or replace rows (vectors must be unit length, ``(len(ids), dim)``)."""
        if not len(ids):
            return
        vectors = np.asarray(vectors, np.float32).reshape(len(ids), self.dim)
        rows = np.empty(len(ids), np.int64)
        for i, chunk_id in enumerate(ids):
            row = self.row.get(int(chunk_id))
            if row is None:
                row = self.n
                self._grow(row + 1)
                self.row[int(chunk_id)] = row
                self.n += 1
            rows[i] = row
        self.matrix[rows] = vectors
        self.ids[rows] = ids
        self.user[rows] = user
        self.structure[rows] = [s.encode() for s in structure]
        if self.basis is not None:
            self.coarse[rows] = self._project(vectors, np.asarray(user, np.bool_))
            self.head[rows] = self.coarse[rows, : self.head.shape[1]]
            self.codes[rows] = _encode(self.coarse[rows], self.code_scale)
        self._maybe_fit()

    def fill(self, ids: Sequence[int], user: Sequence[bool], vectors: np.ndarray,
             structure: Sequence[str]) -> None:
        """Replace every row at once (``ids`` unique; the table scan of a load)."""
        n = len(ids)
        self.n = 0
        self.row = {}
        self._grow(n)
        self.matrix[:n] = vectors
        self.ids[:n] = ids
        self.user[:n] = user
        self.structure[:n] = structure
        self.n = n
        self.row = dict(zip(self.ids[:n].tolist(), range(n)))
        self.basis, self.fitted_at = None, 0
        self._maybe_fit()

    def drop(self, chunk_id: int) -> bool:
        """Remove a row (the last row moves into the hole); False when absent."""
        row = self.row.pop(chunk_id, None)
        if row is None:
            return False
        last = self.n - 1
        if row != last:
            moved = int(self.ids[last])
            self.matrix[row] = self.matrix[last]
            self.ids[row] = moved
            self.user[row] = self.user[last]
            self.structure[row] = self.structure[last]
            if self.basis is not None:
                self.coarse[row] = self.coarse[last]
                self.head[row] = self.head[last]
                self.codes[row] = self.codes[last]
            self.row[moved] = row
        self.n = last
        return True

    def structure_of(self) -> dict[int, str]:
        """Chunk id -> structure digest of its vector, for every row."""
        n = self.n
        return dict(zip(self.ids[:n].tolist(), self.structure[:n].astype("U16").tolist()))

    # ------------------------------------------------------------------ search
    def shortlist(self, query: np.ndarray, boost: float, limit: int) -> np.ndarray | None:
        """Rows a first pass over every row keeps for a unit ``query``, ascending; None
        when the coarse stage reads every row (no head, or too few rows).  The pass reads
        the int8 :attr:`codes` through the compiled scan (:mod:`.scan`), or where there is
        none the ``head_dim`` float32 head axes.

        The pass keeps every row at or above the keep-th score: no tie-break is needed,
        the rows near this generous cut are never near the final best.  A query moved a
        little (relevance feedback) can be ranked again within the same shortlist.
        """
        n, t = self.n, self.tuning
        count, head, compiled = self._count(limit), self.head.shape[1], scan.kernel()
        share = t.code_share if compiled is not None else t.head_share
        keep = max(t.head_factor * count, n // max(share, 1))
        if not self.two_stage or count * 4 >= n or not head or keep * 2 >= n:
            return None
        self._use_boost(boost)
        if compiled is None:
            first = self.head[:n] @ (query @ self.basis[:, :head])
            return top_rows(first, keep, lambda cut: np.flatnonzero(first >= cut))
        first = compiled.scan(self.codes[:n], self._code_query(query))
        return top_rows(first, keep, lambda cut: compiled.at_least(first, cut))

    def _code_query(self, query: np.ndarray) -> np.ndarray:
        """``query`` projected and scaled for the int8 :attr:`codes`, as int16 (the
        largest weight 32,767: an int32 sum of 64 products cannot overflow)."""
        weights = (query @ self.basis) * self.code_scale
        top = float(np.abs(weights).max())
        return np.rint(weights * (32767 / top if top > 0 else 0.0)).astype(np.int16)

    def candidates(self, query: np.ndarray, boost: float, limit: int,
                   shortlist: np.ndarray | None = None,
                   gathered: np.ndarray | None = None) -> np.ndarray | None:
        """Rows that may hold the best ``limit`` boosted scores, in row order (a tie at
        the cut goes to the lower chunk id, :func:`.ties.best`); None means every row.
        The coarse scores are those of ``shortlist``'s rows (:meth:`shortlist`) when
        given, else of every row; ``gathered``: those rows of :attr:`coarse`, already
        copied out (:class:`.search_pass.SearchPass` reads them once per search).  With
        the compiled scan (:mod:`.scan`) a shortlist is scored on its int8 :attr:`codes`
        instead, and every row at or above the count-th best score goes on (integer
        sums, rounded nowhere: all the rows of a tie at the cut go on)."""
        count = self._count(limit)
        if not self.two_stage or count * 4 >= self.n:
            return None
        n = self.n
        self._use_boost(boost)
        compiled = scan.kernel() if shortlist is not None else None
        if compiled is not None:  # every row whose int8 score reaches the count-th best
            coded = compiled.scan(self.codes, self._code_query(query), shortlist)
            cut = len(coded) - min(count, len(coded))
            return shortlist[coded >= np.partition(coded, cut)[cut]] if len(coded) else shortlist
        projected = query @ self.basis
        if shortlist is None:
            return ties.best_set(self.coarse[:n] @ projected, self.ids[:n], count)
        if gathered is None:
            gathered = np.take(self.coarse, shortlist, axis=0)
        return shortlist[ties.best_set(gathered @ projected, self.ids[shortlist], count)]

    def _count(self, limit: int) -> int:
        t = self.tuning
        return max(t.candidates, t.candidate_factor * limit, self.n // t.candidate_share)

    def _use_boost(self, boost: float) -> None:
        if boost != self.coarse_boost and self.basis is not None:  # a changed setting: rescale once
            self.coarse[: self.n][self.user[: self.n]] *= boost / self.coarse_boost
            self._scale_codes()
            self._split_head()
            self.coarse_boost = boost

    def similarity(self, query: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
        """Exact cosine of ``rows`` (every row when None) with a unit ``query``."""
        if rows is None:
            return self.matrix[: self.n] @ query
        return np.take(self.matrix, rows, axis=0) @ query  # the same rows, gathered faster than [rows]

    # ------------------------------------------------------------------ coarse axes
    def fit(self) -> None:
        """Fit the coarse axes on (a sample of) the rows and project every row."""
        n, t = self.n, self.tuning
        sample = self.matrix[: n : max(1, n // t.fit_sample)]
        moment = sample.T @ sample
        _, vectors = np.linalg.eigh(moment.astype(np.float64))
        self.basis = np.ascontiguousarray(vectors[:, ::-1][:, : t.coarse_dim], np.float32)
        self.coarse = np.zeros((self.capacity, self.basis.shape[1]), np.float32)
        self.coarse[:n] = self._project(self.matrix[:n], self.user[:n])
        self._scale_codes()
        self._split_head()
        self.fitted_at = n

    def _split_head(self) -> None:
        """Copy the first ``head_dim`` coarse axes into :attr:`head` and make the int8
        :attr:`codes` of the coarse rows (every row) at :attr:`code_scale`."""
        head = min(self.tuning.head_dim, self.coarse.shape[1]) if self.basis is not None else 0
        self.head = np.ascontiguousarray(self.coarse[:, :head])
        self.codes = np.zeros(self.coarse.shape, np.int8)
        self.codes[: self.n] = _encode(self.coarse[: self.n], self.code_scale)

    def _scale_codes(self) -> None:
        """Fit :attr:`code_scale` to the largest value of each coarse axis."""
        top = np.abs(self.coarse[: self.n]).max(axis=0) if self.n else np.zeros(self.coarse.shape[1])
        self.code_scale = (np.maximum(top, 1e-12) / 127).astype(np.float32)

    def _project(self, vectors: np.ndarray, user: np.ndarray) -> np.ndarray:
        coarse = vectors @ self.basis
        coarse[user] *= self.coarse_boost
        return coarse

    def _maybe_fit(self) -> None:
        if self.n >= self.tuning.two_stage_min and self.n >= 2 * self.fitted_at:
            self.fit()

    def _grow(self, n: int) -> None:
        capacity = self.capacity
        if n <= capacity:
            return
        while capacity < n:
            capacity *= 2
        self.matrix = _resized(self.matrix, capacity, self.n)
        self.ids = _resized(self.ids, capacity, self.n)
        self.user = _resized(self.user, capacity, self.n)
        self.structure = _resized(self.structure, capacity, self.n)
        if self.basis is not None:
            self.coarse = _resized(self.coarse, capacity, self.n)
            self.head = _resized(self.head, capacity, self.n)
            self.codes = _resized(self.codes, capacity, self.n)

    # ------------------------------------------------------------------ snapshots
    def write(self, path: Path, header: dict) -> None:
        """Write every row (and the coarse axes) to ``path`` atomically."""
        n = self.n
        arrays = self._arrays(n, with_coarse=self.basis is not None)
        head = dict(header, n=n, dim=self.dim, fitted_at=self.fitted_at,
                    coarse_boost=self.coarse_boost, code_scale=self.code_scale.tolist(),
                    coarse_dim=0 if self.basis is None else self.basis.shape[1])
        raw = json.dumps(head).encode()
        raw += b" " * (-(len(_MAGIC) + 4 + len(raw)) % _ALIGN)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(_MAGIC + len(raw).to_bytes(4, "little") + raw)
            for array in arrays:
                f.write(memoryview(np.ascontiguousarray(array)).cast("B"))
        os.replace(tmp, path)

    @classmethod
    def read(cls, path: Path, tuning: SearchTuning | None = None,
             spare: float = 0.125) -> tuple["VectorMatrix", dict]:
        """The matrix a snapshot holds (with ``spare`` room to grow) and its header."""
        try:
            with open(path, "rb") as f:
                head, offset = _header(f)
                n, dim, coarse_dim = int(head["n"]), int(head["dim"]), int(head["coarse_dim"])
                vm = cls(dim, max(1024, n + int(n * spare)), tuning)
                if coarse_dim:
                    vm.basis = np.zeros((dim, coarse_dim), np.float32)
                    vm.coarse = np.zeros((vm.capacity, coarse_dim), np.float32)
                arrays = vm._arrays(n, with_coarse=bool(coarse_dim))
                if os.fstat(f.fileno()).st_size != offset + sum(a.nbytes for a in arrays):
                    raise SnapshotInvalid(f"{path.name} is truncated")
                for array in arrays:
                    if f.readinto(memoryview(array).cast("B")) != array.nbytes:
                        raise SnapshotInvalid(f"{path.name} is truncated")
        except (OSError, KeyError, ValueError, TypeError) as exc:
            if isinstance(exc, SnapshotInvalid):
                raise
            raise SnapshotInvalid(f"{path.name}: {exc}") from exc
        vm.n = n
        vm.fitted_at = int(head.get("fitted_at", 0))
        vm.coarse_boost = float(head.get("coarse_boost", 1.0))
        if coarse_dim:
            try:
                scale = np.asarray(head.get("code_scale", []), np.float32)
            except (TypeError, ValueError):
                scale = np.zeros(0, np.float32)
            if scale.shape == (coarse_dim,) and np.all(scale > 0):
                vm.code_scale = scale
            else:  # a snapshot from before the codes (or a damaged scale): fit it again
                vm._scale_codes()
            vm._split_head()
        vm.row = dict(zip(vm.ids[:n].tolist(), range(n)))
        if len(vm.row) != n:
            raise SnapshotInvalid(f"{path.name} repeats a chunk id")
        return vm, head

    def _arrays(self, n: int, with_coarse: bool) -> list[np.ndarray]:
        arrays = [self.ids[:n], self.user[:n], self.structure[:n], self.matrix[:n]]
        if with_coarse:
            arrays += [self.basis, self.coarse[:n]]
        return arrays


_blas = None


def one_blas_thread() -> contextlib.AbstractContextManager:
    """A context in which numpy's BLAS runs on one thread.

    A matrix-vector product is bound by memory, not arithmetic; measured on a busy
    2-core machine, OpenBLAS's second thread (which spins while it waits) made the 64-dim
    coarse product 2.8x slower (8.0 vs 2.9 ms at 100k rows).  threadpoolctl comes with
    sentence-transformers (through scikit-learn); without it nothing is limited.
    """
    global _blas
    if _blas is None:
        try:
            from threadpoolctl import ThreadpoolController

            _blas = ThreadpoolController()
        except Exception:  # noqa: BLE001 - an optional speed-up, never a failure
            _blas = False
    return _blas.limit(limits=1, user_api="blas") if _blas else contextlib.nullcontext()


def _header(f) -> tuple[dict, int]:
    start = f.read(len(_MAGIC) + 4)
    if len(start) != len(_MAGIC) + 4 or not start.startswith(_MAGIC):
        raise SnapshotInvalid("not a vector snapshot")
    size = int.from_bytes(start[len(_MAGIC):], "little")
    try:
        head = json.loads(f.read(size))
    except ValueError as exc:
        raise SnapshotInvalid(f"bad snapshot header: {exc}") from exc
    if not isinstance(head, dict):
        raise SnapshotInvalid("bad snapshot header")
    return head, len(start) + size


#: The first pass's cut is found on every ``SAMPLE_STRIDE``-th score first (see
#: :func:`top_rows`).
SAMPLE_STRIDE = 16


def top_rows(scores: np.ndarray, keep: int, at_least) -> np.ndarray:
    """The rows (ascending) whose score is at least the ``keep``-th largest of ``scores``:
    ``np.flatnonzero(scores >= np.partition(scores, n - keep)[n - keep])``, the same
    rows, without a partition of every score.

    numpy's partition runs x86-simd-sort's AVX-512 code where the CPU has AVX-512, and on
    AMD Zen 4 that code's compress-stores are microcoded: a partition of 100k int32
    scores took 0.42 ms there against 0.04 ms with numpy held to AVX2
    (``NPY_DISABLE_CPU_FEATURES``).  So the cut is first estimated on a strided sample,
    set low on purpose (half as many rows again as asked, and 16 more); the rows at or
    above that low cut (``at_least(cut)``: one pass) hold every row at or above the true
    cut, which is then the ``keep``-th largest among them, found by partitioning those
    few.  Should the estimate not hold ``keep`` rows, every score is partitioned.  The
    result is the same on every CPU; only the work differs.
    """
    n = len(scores)
    if keep <= 0:
        return np.zeros(0, np.int64)
    if keep >= n:
        return np.arange(n)
    sample = scores[::SAMPLE_STRIDE]
    want = min(len(sample), (keep * 3) // (2 * SAMPLE_STRIDE) + 16)
    if n >= 64 * SAMPLE_STRIDE and want < len(sample):
        low = np.partition(sample, len(sample) - want)[len(sample) - want]
        rows = at_least(low)
        if len(rows) >= keep:
            near = scores[rows]
            return rows[near >= np.partition(near, len(near) - keep)[len(near) - keep]]
    return at_least(np.partition(scores, n - keep)[n - keep])


def _encode(coarse: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """int8 codes of coarse rows (``coarse ~ codes * scale``), clipped to +-127."""
    codes = np.multiply(coarse, 1 / scale, dtype=np.float32)  # in place from here: a load's 100k rows
    np.rint(codes, out=codes)
    np.clip(codes, -127, 127, out=codes)
    return codes.astype(np.int8)


def _resized(array: np.ndarray, capacity: int, keep: int) -> np.ndarray:
    out = np.zeros((capacity, *array.shape[1:]), array.dtype)
    out[:keep] = array[:keep]
    return out

"""The live token table: columnar numpy arrays of the tokens the model sees.

Rows are sorted by absolute position.  Appending (a new turn, a streamed token) is
amortised O(1); pruning compresses the columns with a mask; resurrection inserts a
chunk's rows at its place.  Chunks occupy contiguous positions, so every live chunk is a
contiguous run of rows, which makes per-chunk reductions (peak brightness) a single
``np.maximum.reduceat``.
"""

from __future__ import annotations

import numpy as np

#: Column name -> dtype.  Text lives per chunk (see Conversation), not here.
COLUMNS: dict[str, type] = {
    "position": np.int64,
    "token_id": np.int32,
    "brightness": np.int32,
    "chunk_id": np.int32,
    "turn_id": np.int32,
    "framing": np.bool_,
}

_INITIAL_CAPACITY = 1024


class TokenTable:
    """Columnar storage with views of the first ``len(self)`` rows as attributes."""

    def __init__(self) -> None:
        self._n = 0
        self._cols = {name: np.zeros(_INITIAL_CAPACITY, dtype) for name, dtype in COLUMNS.items()}

    def __len__(self) -> int:
        return self._n

    def __getattr__(self, name: str) -> np.ndarray:
        cols = self.__dict__.get("_cols")
        if cols is None or name not in cols:
            raise AttributeError(name)
        return cols[name][: self._n]

    def _reserve(self, extra: int) -> None:
        need = self._n + extra
        capacity = len(self._cols["position"])
        if need <= capacity:
            return
        while capacity < need:
            capacity *= 2
        for name, col in self._cols.items():
            grown = np.zeros(capacity, col.dtype)
            grown[: self._n] = col[: self._n]
            self._cols[name] = grown

    def append_rows(self, **values) -> None:
        """Append rows; every column must be given as an array (or scalar) of one length."""
        count = len(np.atleast_1d(values["position"]))
        self._reserve(count)
        for name, col in self._cols.items():
            col[self._n : self._n + count] = values[name]
        self._n += count

    def append_chunks(self, starts, counts, chunk_ids, turn_ids, framing, token_ids, brightness) -> None:
        """Append whole chunks, in position order: ``starts`` .. ``framing`` have one value
        per chunk, ``token_ids`` and ``brightness`` one per token (``counts`` per chunk)."""
        counts = np.asarray(counts, np.int64)
        offset = np.asarray(starts, np.int64) - (np.cumsum(counts) - counts)  # position - row
        self.append_rows(
            position=np.repeat(offset, counts) + np.arange(int(counts.sum())),
            token_id=token_ids,
            brightness=brightness,
            chunk_id=np.repeat(chunk_ids, counts),
            turn_id=np.repeat(turn_ids, counts),
            framing=np.repeat(framing, counts),
        )

    def append_one(self, position: int, token_id: int, brightness: int, chunk_id: int,
                   turn_id: int, framing: bool) -> None:
        """Append one row without building arrays (the per-streamed-token path)."""
        self._reserve(1)
        i = self._n
        cols = self._cols
        cols["position"][i] = position
        cols["token_id"][i] = token_id
        cols["brightness"][i] = brightness
        cols["chunk_id"][i] = chunk_id
        cols["turn_id"][i] = turn_id
        cols["framing"][i] = framing
        self._n += 1

    def insert_rows(self, **values) -> None:
        """Insert a contiguous run of rows at its sorted place by position."""
        positions = np.atleast_1d(values["position"])
        count = len(positions)
        at = int(np.searchsorted(self.position, positions[0]))
        self._reserve(count)
        n = self._n
        for name, col in self._cols.items():
            col[at + count : n + count] = col[at:n].copy()
            col[at : at + count] = values[name]
        self._n += count

    def keep(self, mask: np.ndarray) -> None:
        """Keep only the rows where ``mask`` is true (order preserved)."""
        kept = int(mask.sum())
        for name, col in self._cols.items():
            col[:kept] = col[: self._n][mask]
        self._n = kept

    def snapshot(self) -> dict[str, np.ndarray]:
        """A copy of every column's rows (for :meth:`restore`)."""
        return {name: col[: self._n].copy() for name, col in self._cols.items()}

    def restore(self, snapshot: dict[str, np.ndarray]) -> None:
        """Hold exactly the rows :meth:`snapshot` copied (the snapshot stays usable)."""
        count = len(snapshot["position"])
        self._n = 0
        self._reserve(count)
        for name, col in self._cols.items():
            col[:count] = snapshot[name]
        self._n = count

    def rows_of_chunk(self, chunk_id: int, start_position: int, count: int) -> slice:
        """The row slice of a live chunk whose first position is ``start_position``."""
        at = int(np.searchsorted(self.position, start_position))
        return slice(at, at + count)

    def chunk_spans(self) -> tuple[np.ndarray, np.ndarray]:
        """(chunk ids, first row of each) for the runs of equal chunk id, in order."""
        if self._n == 0:
            return np.zeros(0, np.int32), np.zeros(0, np.int64)
        ids = self.chunk_id
        starts = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))
        return ids[starts], starts

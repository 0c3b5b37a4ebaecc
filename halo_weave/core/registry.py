"""Every chunk and turn of a conversation by id, without a Python object per record.

A conversation of a million tokens holds ~20k chunks and ~5k turns, nearly all of them
long pruned.  Building an object for each when the file is opened cost more than the rest
of rehydration together, and a session looks at few of them.  So the records read from
storage stay in numpy columns (*cold*); a record becomes a :class:`Chunk` / :class:`Turn`
object (*hot*) the first time it is asked for by id, and from then on the object is the
truth and its row is ignored.  Records made during the session are objects from the start,
and so are the live chunks (the context works on them all the time).

Both registries are mappings by id, so code that reads ``conv.chunks[i]`` or iterates
``conv.turns`` works unchanged (iterating every value materialises every record: the
questions asked of all records on a hot path — the graveyard, incomplete turns, the last
user turn — have column answers here instead).
"""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass, fields
from typing import Callable, Iterator

import numpy as np

from .framing import ROLES
from .records import Chunk, Turn

#: ``at_prune`` of a chunk that has none (NULL in the file).
NO_VALUE = np.iinfo(np.int64).min
ROLE_CODE = {role: code for code, role in enumerate(ROLES)}


@dataclass
class _Columns:
    def __len__(self) -> int:
        return len(getattr(self, fields(self)[0].name))

    def take(self, rows: np.ndarray):
        return type(self)(*(getattr(self, f.name)[rows] for f in fields(self)))


@dataclass
class ChunkColumns(_Columns):
    """Chunk records as columns (``role`` indexes :data:`ROLES`)."""

    id: np.ndarray  # int64, like every integer column
    turn_id: np.ndarray
    chunk_index: np.ndarray
    role: np.ndarray  # int8
    start: np.ndarray
    token_count: np.ndarray
    live: np.ndarray  # bool
    pinned: np.ndarray  # bool
    at_prune: np.ndarray  # NO_VALUE where None
    tool_result: np.ndarray  # bool

    @classmethod
    def empty(cls) -> "ChunkColumns":
        i8, b = np.zeros(0, np.int64), np.zeros(0, bool)
        return cls(i8, i8, i8, np.zeros(0, np.int8), i8, i8, b, b, i8, b)

    def record(self, row: int) -> Chunk:
        at = self.at_prune.item(row)
        return Chunk(
            self.id.item(row), self.turn_id.item(row), self.chunk_index.item(row),
            ROLES[self.role.item(row)], self.start.item(row), self.token_count.item(row),
            self.live.item(row), self.pinned.item(row), None if at == NO_VALUE else at,
            self.tool_result.item(row),
        )

    def records(self, rows: np.ndarray) -> list[Chunk]:
        """The rows as objects (one ``tolist`` per column: no numpy scalars leak out)."""
        cols = self.take(rows)
        at = cols.at_prune.astype(object)
        at[cols.at_prune == NO_VALUE] = None
        return list(map(
            Chunk, cols.id.tolist(), cols.turn_id.tolist(), cols.chunk_index.tolist(),
            map(ROLES.__getitem__, cols.role.tolist()), cols.start.tolist(),
            cols.token_count.tolist(), cols.live.tolist(), cols.pinned.tolist(), at.tolist(),
            cols.tool_result.tolist(),
        ))


@dataclass
class TurnColumns(_Columns):
    """Turn records as columns (``role`` indexes :data:`ROLES`)."""

    turn_id: np.ndarray  # int64
    role: np.ndarray  # int8
    created_at: np.ndarray  # float64
    complete: np.ndarray  # bool

    @classmethod
    def empty(cls) -> "TurnColumns":
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int8), np.zeros(0), np.zeros(0, bool))


class _Registry(MutableMapping):
    """Objects by id (hot) in front of columns (cold); see the module docstring."""

    def __init__(self) -> None:
        self._hot: dict = {}
        self._ids = np.zeros(0, np.int64)  # id of each column row
        self._row_of: list[int] | dict[int, int] = []  # id -> row (-1: none)
        self._cold = np.zeros(0, bool)  # rows still only in the columns
        self._cold_count = 0

    def _load_ids(self, ids: np.ndarray, cold: np.ndarray) -> None:
        self._ids = ids
        self._cold = cold
        self._cold_count = int(cold.sum())
        top = int(ids.max()) + 1 if len(ids) else 0
        if len(ids) and (ids.min() < 0 or top > 8 * len(ids) + 4096):
            self._row_of = dict(zip(ids.tolist(), range(len(ids))))  # sparse ids (odd files)
        else:  # ids are counters: a list indexed by id is the fastest lookup
            dense = np.full(top, -1, np.int64)
            dense[ids] = np.arange(len(ids))
            self._row_of = dense.tolist()

    def _row(self, key) -> int:
        row_of = self._row_of
        if isinstance(row_of, list):
            return row_of[key] if 0 <= key < len(row_of) else -1
        return row_of.get(key, -1)

    def _cold_row(self, key) -> int:
        """The row of a record that is still cold, else -1."""
        if not self._cold_count or not isinstance(key, (int, np.integer)):
            return -1
        row = self._row(key)
        return row if row >= 0 and self._cold[row] else -1

    def _cold_rows(self, keys: list[int]) -> np.ndarray:
        """Rows of those ``keys`` whose records are still cold."""
        if not self._cold_count or not keys:
            return np.zeros(0, np.int64)
        rows = np.fromiter(map(self._row, keys), np.int64, len(keys))
        rows = rows[rows >= 0]
        return np.unique(rows[self._cold[rows]])

    def _make(self, row: int):
        raise NotImplementedError

    def _ordered(self, cold_ids: np.ndarray, hot_ids: np.ndarray, cold_rows: np.ndarray) -> np.ndarray:
        """Every id in iteration order (ascending id unless overridden)."""
        return np.sort(np.concatenate((cold_ids, hot_ids)), kind="stable")

    def __getitem__(self, key):
        record = self._hot.get(key)
        if record is not None:
            return record
        row = self._cold_row(key)
        if row < 0:
            raise KeyError(key)
        record = self._make(row)
        self._cold[row] = False
        self._cold_count -= 1
        self._hot[int(key)] = record
        return record

    def __setitem__(self, key, record) -> None:
        row = self._cold_row(key)
        if row >= 0:
            self._cold[row] = False
            self._cold_count -= 1
        self._hot[key] = record

    def __delitem__(self, key) -> None:
        if key in self._hot:
            del self._hot[key]
            return
        row = self._cold_row(key)
        if row < 0:
            raise KeyError(key)
        self._cold[row] = False
        self._cold_count -= 1

    def __contains__(self, key) -> bool:
        return key in self._hot or self._cold_row(key) >= 0

    def __len__(self) -> int:
        return len(self._hot) + self._cold_count

    def __iter__(self) -> Iterator[int]:
        rows = np.flatnonzero(self._cold)
        hot = np.fromiter(self._hot, np.int64, len(self._hot))
        return iter(self._ordered(self._ids[rows], hot, rows).tolist())

    def clear(self) -> None:
        self._hot.clear()
        self._cold[:] = False
        self._cold_count = 0

    def snapshot(self) -> tuple:
        """Every record as it is now, copied (for :meth:`restore`): which ids exist, the
        objects and each one's fields (lists copied); cold rows are never written, so
        their columns are not copied."""
        hot = dict(self._hot)
        return dict(vars(self)), hot, {k: _fields(r) for k, r in hot.items()}, self._cold.copy()

    def restore(self, snapshot: tuple) -> None:
        """Hold exactly the records :meth:`snapshot` saw: the same objects, with the
        fields they had then; records added since are gone, records removed are back
        (the snapshot stays usable)."""
        attrs, hot, state, cold = snapshot
        vars(self).update(attrs)
        self._hot = dict(hot)
        self._cold = cold.copy()
        for key, record in self._hot.items():
            vars(record).update(_fields(state[key]))

    @property
    def materialised(self) -> int:
        """How many records are objects now (the rest are columns only)."""
        return len(self._hot)


class ChunkRegistry(_Registry):
    """Every chunk by id; iteration is in position order."""

    def __init__(self) -> None:
        super().__init__()
        self._cols = ChunkColumns.empty()
        self._turns_in_runs = True

    def load(self, cols: ChunkColumns) -> list[Chunk]:
        """Take the chunks read from storage, in position order, in place of any here.

        The live ones become objects at once; they are returned, in position order.
        """
        self._hot.clear()
        self._cols = cols
        self._load_ids(cols.id, ~cols.live)
        # Turns occupy contiguous positions, so their chunks are runs of rows (unless a
        # file says otherwise: then each lookup scans).
        self._turns_in_runs = bool((np.diff(cols.turn_id) >= 0).all())
        live = cols.records(np.flatnonzero(cols.live))
        self._hot.update(zip(map(_chunk_id, live), live))
        return live

    def _make(self, row: int) -> Chunk:
        return self._cols.record(row)

    def many(self, ids: list[int]) -> list[Chunk]:
        """The chunks of ``ids``; the cold ones are made objects in one step."""
        rows = self._cold_rows(ids)
        if len(rows):
            made = self._cols.records(rows)
            self._cold[rows] = False
            self._cold_count -= len(rows)
            self._hot.update(zip(map(_chunk_id, made), made))
        return list(map(self.__getitem__, ids))

    def values(self):
        self.many(self._ids[self._cold].tolist())
        return super().values()

    def items(self):
        self.values()
        return super().items()

    def _ordered(self, cold_ids, hot_ids, cold_rows):
        starts = np.concatenate((
            self._cols.start[cold_rows],
            np.fromiter((c.start for c in self._hot.values()), np.int64, len(self._hot)),
        ))
        return np.concatenate((cold_ids, hot_ids))[np.argsort(starts, kind="stable")]

    def ids_of_turn(self, turn_id: int) -> list[int]:
        """Ids of a stored turn's chunks that still exist, in position order."""
        turn_ids = self._cols.turn_id
        if self._turns_in_runs:
            rows = slice(turn_ids.searchsorted(turn_id), turn_ids.searchsorted(turn_id, "right"))
        else:
            rows = turn_ids == turn_id
        hot = self._hot
        return [c for c, cold in zip(self._ids[rows].tolist(), self._cold[rows].tolist())
                if cold or c in hot]

    def current_columns(self) -> tuple[np.ndarray, ...]:
        """(id, turn_id, chunk_index, role code, token_count) of every chunk as it is now:
        cold rows as read, the others from their objects; no object is made."""
        rows = np.flatnonzero(self._cold)
        hot = list(self._hot.values())
        cols = self._cols

        def column(cold: np.ndarray, values) -> np.ndarray:
            return np.concatenate((cold[rows].astype(np.int64), np.fromiter(values, np.int64, len(hot))))

        return (column(cols.id, (c.id for c in hot)), column(cols.turn_id, (c.turn_id for c in hot)),
                column(cols.chunk_index, (c.chunk_index for c in hot)),
                column(cols.role, (ROLE_CODE[c.role] for c in hot)),
                column(cols.token_count, (c.token_count for c in hot)))

    def pruned_content_tokens(self) -> int:
        """Tokens of the pruned content chunks, all together."""
        rows = self._cold & (self._cols.chunk_index >= 0)
        hot = sum(c.token_count for c in self._hot.values() if not c.live and not c.framing)
        return int(self._cols.token_count[rows].sum()) + hot

    def live_framing_tokens(self) -> int:
        """Tokens of the live framing chunks (the chat template around messages)."""
        return sum(c.token_count for c in self._hot.values() if c.live and c.framing)

    def pruned_content(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, starts) of the pruned content chunks, in position order."""
        rows = np.flatnonzero(self._cold & (self._cols.chunk_index >= 0))
        hot = [c for c in self._hot.values() if not c.live and not c.framing]
        ids = np.concatenate((self._ids[rows], np.fromiter(map(_chunk_id, hot), np.int64, len(hot))))
        starts = np.concatenate((
            self._cols.start[rows], np.fromiter((c.start for c in hot), np.int64, len(hot)),
        ))
        order = np.argsort(starts, kind="stable")
        return ids[order], starts[order]


class TurnRegistry(_Registry):
    """Every turn by id; iteration is in id (= time) order."""

    def __init__(self, chunk_ids_of: Callable[[int], list[int]]) -> None:
        super().__init__()
        self._cols = TurnColumns.empty()
        self._chunk_ids_of = chunk_ids_of

    def load(self, cols: TurnColumns) -> None:
        """Take the turns read from storage in place of any here."""
        self._hot.clear()
        self._cols = cols
        self._load_ids(cols.turn_id, np.ones(len(cols), bool))

    def _make(self, row: int) -> Turn:
        cols = self._cols
        turn_id = cols.turn_id.item(row)
        return Turn(turn_id, ROLES[cols.role.item(row)], cols.created_at.item(row),
                    self._chunk_ids_of(turn_id), cols.complete.item(row))

    def incomplete(self) -> list[int]:
        """Ids of the turns not marked complete, ascending."""
        cold = self._ids[self._cold & ~self._cols.complete].tolist()
        return sorted(cold + [t for t, turn in self._hot.items() if not turn.complete])

    def last(self, role: str | None = None) -> int | None:
        """The highest turn id (of ``role``, when given), or None."""
        mask = self._cold if role is None else self._cold & (self._cols.role == ROLE_CODE[role])
        cold = self._ids[mask]
        hot = [t for t, turn in self._hot.items() if role is None or turn.role == role]
        return max(hot + ([int(cold.max())] if cold.size else []), default=None)


class ChunkList(Sequence):
    """Chunks by a list of ids, each made an object when it is first read."""

    def __init__(self, chunks: ChunkRegistry, ids: list[int]) -> None:
        self._chunks = chunks
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self._chunks.many(self.ids[index])
        return self._chunks[self.ids[index]]

    def __iter__(self) -> Iterator[Chunk]:
        return iter(self._chunks.many(self.ids))


def _fields(record) -> dict:
    """A record's fields (an object's, or a dict of them), lists copied."""
    values = record if isinstance(record, dict) else vars(record)
    return {k: list(v) if isinstance(v, list) else v for k, v in values.items()}


def _chunk_id(chunk: Chunk) -> int:
    return chunk.id

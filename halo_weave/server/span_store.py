"""The keys and values of pruned spans, kept in host memory for a later resurrection.

A prune takes a span out of the KV cache; a later turn often brings it back (semantic
resurrection).  Running it again costs a prefill of every token (~5-20 ms each on two
cores), so an engine saves a span's states here when it prunes it, and a resurrection
that finds its tokens here puts them back at their new place (a RoPE rotation of the
keys) without a model run.

The store is bounded in bytes (``--kv-store-mb``) and forgets the least recently used
entry first.  Entries are at most :data:`MAX_ENTRY_TOKENS` long (a long prune is saved
in pieces), so restoring one never needs more than that many spare cells.  What an entry
holds is the engine's business (llama.cpp: a sequence-state blob; transformers: key and
value tensors); the store only knows its token ids, the position its keys were rotated
for, and its size.

:meth:`SpanStore.cover` splits a span to insert into stored runs and runs to compute,
longest stored match first, so a resurrected span made of two chunks pruned at different
times, or starting a token earlier than the chunk it came from, is still found.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Sequence

#: Tokens that must agree for a stored run to count (shorter runs are chat framing that
#: repeats everywhere, and are cheaper to run than to look up).
MIN_RUN = 8
#: Longest entry; a longer pruned span is saved as several.
MAX_ENTRY_TOKENS = 512
#: Default bound on the store (SmolLM2-135M: ~23 KB per token in f16, ~46k tokens).
DEFAULT_STORE_BYTES = 1 << 30
#: Candidates examined per lookup (most recent first): framing runs repeat in many entries.
CANDIDATES = 32


@dataclass(eq=False)
class Entry:
    """A stored span: ``ids`` whose keys were rotated for positions ``pos..``; ``owner``:
    the conversation it was pruned from (None: unnamed), ``on_disk``: whether it is in
    that conversation's span file already (:mod:`.span_files`)."""

    ids: tuple[int, ...]
    pos: int
    payload: Any = field(repr=False)
    nbytes: int = 0
    owner: str | None = None
    on_disk: bool = False


@dataclass(frozen=True)
class Piece:
    """``[start, end)`` of a span to insert: from ``entry`` (at ``offset``), or run if None."""

    start: int
    end: int
    entry: Entry | None = None
    offset: int = 0

    def __len__(self) -> int:
        return self.end - self.start


@dataclass
class SpanStore:
    """Stored spans by token ids, least recently used forgotten first (see the module)."""

    max_bytes: int = DEFAULT_STORE_BYTES
    entries: OrderedDict = field(default_factory=OrderedDict)  # ids -> Entry, oldest first
    nbytes: int = 0
    #: The conversation whose prunes are being stored now (the engine's requests name it).
    owner: str | None = None
    _index: dict = field(default_factory=dict)  # first MIN_RUN ids -> {Entry: [offsets]}

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def tokens(self) -> int:
        return sum(len(e.ids) for e in self.entries.values())

    def wants(self, n_tokens: int, bytes_per_token: int) -> bool:
        """Whether a span of this size could be stored at all."""
        return self.max_bytes > 0 and n_tokens >= MIN_RUN and n_tokens * bytes_per_token <= self.max_bytes

    def put(self, ids: Sequence[int], pos: int, payload: Any, nbytes: int) -> Entry | None:
        """Store a span (replacing one with the same ids) for :attr:`owner`; None if it
        cannot fit at all."""
        if nbytes > self.max_bytes or len(ids) < MIN_RUN:
            return None
        key = tuple(ids)
        if key in self.entries:
            self._drop(self.entries[key])
        while self.entries and self.nbytes + nbytes > self.max_bytes:
            self._drop(next(iter(self.entries.values())))
        entry = Entry(key, pos, payload, nbytes, self.owner)
        self.entries[key] = entry
        self.nbytes += nbytes
        for o in range(len(key) - MIN_RUN + 1):
            self._index.setdefault(key[o:o + MIN_RUN], {}).setdefault(entry, []).append(o)
        return entry

    def add_saved(self, ids: Sequence[int], pos: int, payload: Any, nbytes: int, owner: str) -> bool:
        """Take a span read back from ``owner``'s span file, unless one with the same ids
        is stored already; whether it was taken.  Read-back spans count as least recently
        used: what this server stored itself stays longer."""
        if tuple(ids) in self.entries or nbytes > self.max_bytes - self.nbytes:
            return False
        saved_owner, self.owner = self.owner, owner
        try:
            entry = self.put(ids, pos, payload, nbytes)
        finally:
            self.owner = saved_owner
        if entry is None:
            return False
        entry.on_disk = True
        self.entries.move_to_end(entry.ids, last=False)
        return True

    def unsaved(self, owner: str) -> list[Entry]:
        """``owner``'s entries not in its span file yet, oldest first."""
        return [e for e in self.entries.values() if e.owner == owner and not e.on_disk]

    def touch(self, entry: Entry) -> None:
        """Mark ``entry`` as just used."""
        if self.entries.get(entry.ids) is entry:
            self.entries.move_to_end(entry.ids)

    def clear(self) -> None:
        self.entries.clear()
        self._index.clear()
        self.nbytes = 0

    def _drop(self, entry: Entry) -> None:
        del self.entries[entry.ids]
        self.nbytes -= entry.nbytes
        ids = entry.ids
        for o in range(len(ids) - MIN_RUN + 1):
            where = self._index.get(ids[o:o + MIN_RUN])
            if where is not None:
                where.pop(entry, None)
                if not where:
                    del self._index[ids[o:o + MIN_RUN]]

    def longest(self, span: Sequence[int], k: int) -> tuple[Entry, int, int] | None:
        """The longest stored run equal to ``span[k:]``'s start: ``(entry, offset, length)``."""
        where = self._index.get(tuple(span[k:k + MIN_RUN]))
        if not where:
            return None
        best, seen = None, 0
        for entry in reversed(list(where)):
            ids = entry.ids
            for o in where[entry]:
                n = MIN_RUN
                limit = min(len(ids) - o, len(span) - k)
                while n < limit and ids[o + n] == span[k + n]:
                    n += 1
                if best is None or n > best[2]:
                    best = (entry, o, n)
                seen += 1
                if seen >= CANDIDATES:
                    return best
        return best

    def _reaching(self, span: Sequence[int], k: int) -> tuple[Entry, int, int] | None:
        """A stored run that starts up to ``MIN_RUN - 1`` tokens before ``k`` and goes on
        past it, cut to start at ``k`` (a gap too short to look up was stored with the
        text before it, :meth:`missing`)."""
        for d in range(1, min(k, MIN_RUN - 1) + 1):
            found = self.longest(span, k - d) if len(span) - (k - d) >= MIN_RUN else None
            if found is not None and found[2] > d:
                entry, offset, length = found
                return entry, offset + d, length - d
        return None

    def cover(self, span: Sequence[int]) -> list[Piece]:
        """``span`` as stored pieces and pieces to run, in order (see the module docstring)."""
        pieces: list[Piece] = []
        k, run_from, n = 0, 0, len(span)
        while k < n:
            found = self.longest(span, k) if n - k >= MIN_RUN else None
            if found is None:
                found = self._reaching(span, k)
            if found is None:
                k += 1
                continue
            if run_from < k:
                pieces.append(Piece(run_from, k))
            entry, offset, length = found
            pieces.append(Piece(k, k + length, entry, offset))
            k += length
            run_from = k
        if run_from < n:
            pieces.append(Piece(run_from, n))
        return pieces


    def missing(self, ids: Sequence[int]) -> list[tuple[int, int]]:
        """The ``[start, end)`` ranges of ``ids`` to save: what no stored run holds yet.

        A chat prunes the same paragraph again and again (resurrected, then pruned with
        different neighbours), and saving every pruned span whole stored each copy: in a
        60-message chat 101k tokens went through the store for ~25k distinct ones, and the
        1 GiB bound then forgot paragraphs a later turn had to run again.  Runs already
        stored are marked used instead; a gap shorter than :data:`MIN_RUN` is widened into
        its stored neighbours (a lookup needs that many tokens), and ranges that then touch
        are merged.
        """
        n = len(ids)
        ranges: list[tuple[int, int]] = []
        for piece in self.cover(ids):
            if piece.entry is not None:
                self.touch(piece.entry)
                continue
            a, b = piece.start, piece.end
            if b - a < MIN_RUN:
                a = max(0, min(a - (MIN_RUN - (b - a)) // 2, n - MIN_RUN))
                b = min(n, a + MIN_RUN)
            if ranges and a <= ranges[-1][1]:
                ranges[-1] = (ranges[-1][0], max(ranges[-1][1], b))
            else:
                ranges.append((a, b))
        return ranges


    def save(self, ids: Sequence[int], start: int, copy_out) -> int:
        """Store what of ``ids`` (cached at positions ``start..``) no entry holds yet
        (:meth:`missing`); ``copy_out(a, b)`` returns ``(payload, nbytes)`` for cached
        positions ``[a, b)`` or None.  Returns how many of ``ids`` the store now holds."""
        if self.max_bytes <= 0 or len(ids) < MIN_RUN:
            return 0
        for a, b in self.missing(ids):
            for lo, hi in entry_bounds(a, b):
                copied = copy_out(start + lo, start + hi)
                if copied is not None:
                    self.put(ids[lo:hi], start + lo, *copied)
        return len(ids) - to_run(self.cover(ids))


def entry_bounds(start: int, end: int) -> list[tuple[int, int]]:
    """``[start, end)`` cut into entries of at most :data:`MAX_ENTRY_TOKENS`, of even
    length (so that no last piece is too short to be stored)."""
    n = end - start
    parts = max(1, -(-n // MAX_ENTRY_TOKENS))
    cuts = [start + (n * k) // parts for k in range(parts + 1)]
    return list(zip(cuts[:-1], cuts[1:]))


def to_run(pieces: list[Piece]) -> int:
    """Tokens of ``pieces`` that are not stored."""
    return sum(len(p) for p in pieces if p.entry is None)

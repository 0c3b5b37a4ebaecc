"""The keys and values of pruned spans, kept in host memory for a later resurrection.

A prune takes a span out of the KV cache; a later turn often brings it back (semantic
resurrection).  Running it again costs a prefill of every token (~5-20 ms each on two
cores), so an engine saves a span's states here when it prunes it, and a resurrection
that finds its tokens here puts them back at their new place (a RoPE rotation of the
keys) without a model run.

**Only in the context they were kept in** (:data:`SAME_CONTEXT`, the default).  A span's
states hold what its tokens saw before them when they ran.  Put back after the chat
before it changed (other paragraphs pruned or recalled since), they are states of a
context the model no longer reads, and on LoCoMo questions that cost answers: 0.164 F1
against 0.202 re-reading exactly, where running the recalled span in place answered as
exact re-reading did (docs/answers.md).  So each entry keeps a digest of the tokens
the cache held before it when it was pruned, and is put back only where the tokens
before the place it goes to are the same: a prune undone, a branch switched back, a
conversation reopened; elsewhere the span is run.  (The cache's own tokens, not the
request's: where repeated text makes the planned edit a replacement rather than a clean
cut, the request's tokens before the span are not what its states saw.)
:data:`ANY_CONTEXT` puts stored states back wherever their tokens match (faster, and what
the measurement above cost).

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

import numpy as np

#: Tokens that must agree for a stored run to count (shorter runs are chat framing that
#: repeats everywhere, and are cheaper to run than to look up).
MIN_RUN = 8
#: Longest entry; a longer pruned span is saved as several.
MAX_ENTRY_TOKENS = 512
#: Default bound on the store (SmolLM2-135M: ~23 KB per token in f16, ~46k tokens).
DEFAULT_STORE_BYTES = 1 << 30
#: Candidates examined per lookup (most recent first): framing runs repeat in many entries.
CANDIDATES = 32
#: Where stored states may be put back (see the module docstring).
SAME_CONTEXT = "same-context"
ANY_CONTEXT = "any"
RESTORE_POLICIES = (SAME_CONTEXT, ANY_CONTEXT)
#: Bytes of a context digest (:func:`context_digest`).
DIGEST_BYTES = 16


#: Two odd multipliers of the prefix hashes (any fixed odd values do) and their inverses
#: modulo 2**64.
_BASES = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F)
_INVERSES = tuple(pow(b, -1, 1 << 64) for b in _BASES)


_POWERS: list[np.ndarray] = []  # per base: [B**j, B**-j] rows, grown on demand


def _powers(n: int) -> list[np.ndarray]:
    """Per base, ``[2, >= n]`` uint64: ``B**j`` and ``B**-j`` modulo 2**64."""
    if not _POWERS or _POWERS[0].shape[1] < n:
        size = max(n, 2 * (_POWERS[0].shape[1] if _POWERS else 4096))
        table = []
        with np.errstate(over="ignore"):
            for base, inverse in zip(_BASES, _INVERSES):
                rows = np.empty((2, size), dtype=np.uint64)
                rows[0], rows[1] = base, inverse
                rows[:, 0] = 1
                table.append(np.cumprod(rows, axis=1, dtype=np.uint64))
        _POWERS[:] = table
    return _POWERS


def prefix_hashes(ids: Sequence[int]) -> np.ndarray:
    """``[len(ids) + 1, 2]`` uint64: row ``i`` is a hash of ``ids[:i]`` (two polynomial
    hashes modulo 2**64, each ``sum(x_j * B**(i-1-j))``), computed for every ``i`` at
    once: ``B**(i-1) * cumsum(x_j * B**-j)``."""
    x = np.fromiter(ids, dtype=np.int64, count=len(ids)).view(np.uint64) + np.uint64(1)
    n = len(x)
    out = np.zeros((n + 1, 2), dtype=np.uint64)
    if n == 0:
        return out
    with np.errstate(over="ignore"):
        for c, rows in enumerate(_powers(n)):
            out[1:, c] = rows[0, :n] * np.cumsum(x * rows[1, :n], dtype=np.uint64)
    return out


def context_digest(ids: Sequence[int], n: int) -> bytes:
    """A digest of ``ids[:n]``: the tokens before a stored span."""
    return prefix_hashes(ids[:n])[n].astype("<u8").tobytes()


class Context:
    """The token sequence a span sits in: ``ids`` with the span at ``start``.  The hashes
    of every prefix are computed once and shared by :meth:`at`."""

    def __init__(self, ids: Sequence[int], start: int, _hashes: list | None = None) -> None:
        self.ids, self.start = ids, start
        self._hashes = _hashes if _hashes is not None else []

    def at(self, start: int) -> "Context":
        """The same sequence with the span at ``start``."""
        return Context(self.ids, start, self._hashes)

    def digest(self, n: int) -> bytes:
        """:func:`context_digest` of ``ids[:n]``."""
        return self._shared()[0][n]

    def holds(self, entry: "Entry", k: int, offset: int) -> bool:
        """Whether ``entry``'s run at ``offset``, put at the span's ``k``-th token, finds
        the tokens before it that the entry was kept with."""
        begin = self.start + k - offset
        if entry.context is None or begin < 0 or begin not in self._shared()[1].get(entry.context, ()):
            return False
        return tuple(self.ids[begin:self.start + k]) == entry.ids[:offset]

    def _shared(self) -> tuple[list[bytes], dict[bytes, set[int]]]:
        """Every prefix's digest, and the prefix lengths of each digest (computed once
        for the sequence: a span's lookups check thousands of stored runs' contexts)."""
        if not self._hashes:
            raw = prefix_hashes(self.ids).astype("<u8").tobytes()
            digests = [raw[at:at + DIGEST_BYTES] for at in range(0, len(raw), DIGEST_BYTES)]
            lengths: dict[bytes, set[int]] = {}
            for n, digest in enumerate(digests):
                lengths.setdefault(digest, set()).add(n)
            self._hashes.append((digests, lengths))
        return self._hashes[0]


@dataclass(eq=False)
class Entry:
    """A stored span: ``ids`` whose keys were rotated for positions ``pos..``; ``owner``:
    the conversation it was pruned from (None: unnamed), ``on_disk``: whether it is in
    that conversation's span file already (:mod:`.span_files`); ``context``: the
    :func:`context_digest` of the cached tokens before it when it was pruned (None: unknown)."""

    ids: tuple[int, ...]
    pos: int
    payload: Any = field(repr=False)
    nbytes: int = 0
    owner: str | None = None
    on_disk: bool = False
    context: bytes | None = None


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
    #: :data:`SAME_CONTEXT` or :data:`ANY_CONTEXT` (``--kv-restore``).
    restore: str = SAME_CONTEXT
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

    def put(self, ids: Sequence[int], pos: int, payload: Any, nbytes: int,
            context: bytes | None = None) -> Entry | None:
        """Store a span (replacing one with the same ids) for :attr:`owner`, kept in
        ``context`` (a :func:`context_digest`); None if it cannot fit at all."""
        if nbytes > self.max_bytes or len(ids) < MIN_RUN:
            return None
        key = tuple(ids)
        if key in self.entries:
            self._drop(self.entries[key])
        while self.entries and self.nbytes + nbytes > self.max_bytes:
            self._drop(next(iter(self.entries.values())))
        entry = Entry(key, pos, payload, nbytes, self.owner, context=context)
        self.entries[key] = entry
        self.nbytes += nbytes
        for o in range(len(key) - MIN_RUN + 1):
            self._index.setdefault(key[o:o + MIN_RUN], {}).setdefault(entry, []).append(o)
        return entry

    def add_saved(self, ids: Sequence[int], pos: int, payload: Any, nbytes: int, owner: str,
                  context: bytes | None = None) -> bool:
        """Take a span read back from ``owner``'s span file, unless one with the same ids
        is stored already; whether it was taken.  Read-back spans count as least recently
        used: what this server stored itself stays longer."""
        if tuple(ids) in self.entries or nbytes > self.max_bytes - self.nbytes:
            return False
        saved_owner, self.owner = self.owner, owner
        try:
            entry = self.put(ids, pos, payload, nbytes, context)
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

    def longest(self, span: Sequence[int], k: int, context: Context | None = None) -> tuple[Entry, int, int] | None:
        """The longest stored run equal to ``span[k:]``'s start: ``(entry, offset, length)``;
        with ``context`` (where ``span`` sits) and :data:`SAME_CONTEXT`, only runs kept
        with the tokens before them that they find there."""
        where = self._index.get(tuple(span[k:k + MIN_RUN]))
        if not where:
            return None
        check = context is not None and self.restore == SAME_CONTEXT
        best, seen = None, 0
        for entry in reversed(list(where)):
            ids = entry.ids
            for o in where[entry]:
                if check and not context.holds(entry, k, o):
                    continue  # not counted: repeated text may offer many such runs
                seen += 1
                n = MIN_RUN
                limit = min(len(ids) - o, len(span) - k)
                while n < limit and ids[o + n] == span[k + n]:
                    n += 1
                if best is None or n > best[2]:
                    best = (entry, o, n)
                if seen >= CANDIDATES:
                    return best
        return best

    def _reaching(self, span: Sequence[int], k: int, context: Context | None = None) -> tuple[Entry, int, int] | None:
        """A stored run that starts up to ``MIN_RUN - 1`` tokens before ``k`` and goes on
        past it, cut to start at ``k`` (a gap too short to look up was stored with the
        text before it, :meth:`missing`)."""
        for d in range(1, min(k, MIN_RUN - 1) + 1):
            found = self.longest(span, k - d, context) if len(span) - (k - d) >= MIN_RUN else None
            if found is not None and found[2] > d:
                entry, offset, length = found
                return entry, offset + d, length - d
        return None

    def cover(self, span: Sequence[int], context: Context | None = None) -> list[Piece]:
        """``span`` as stored pieces and pieces to run, in order (see the module docstring);
        ``context``: where the span goes (None: anywhere, every stored run matches)."""
        pieces: list[Piece] = []
        k, run_from, n = 0, 0, len(span)
        while k < n:
            found = self.longest(span, k, context) if n - k >= MIN_RUN else None
            if found is None:
                found = self._reaching(span, k, context)
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


    def missing(self, ids: Sequence[int], context: Context | None = None) -> list[tuple[int, int]]:
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
        for piece in self.cover(ids, context):
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


    def save(self, ids: Sequence[int], start: int, copy_out, before: Sequence[int] | None = None) -> int:
        """Store what of ``ids`` (cached at positions ``start..``) no entry holds yet
        (:meth:`missing`); ``copy_out(a, b)`` returns ``(payload, nbytes)`` for cached
        positions ``[a, b)`` or None; ``before``: the cached tokens before the span
        (None: unknown, restored only with :data:`ANY_CONTEXT`).  Returns how many of ``ids`` the store now holds."""
        if self.max_bytes <= 0 or len(ids) < MIN_RUN:
            return 0
        context = None
        if before is not None:
            context = Context(list(before) + list(ids), len(before))
        for a, b in self.missing(ids, context):
            for lo, hi in entry_bounds(a, b):
                copied = copy_out(start + lo, start + hi)
                if copied is not None:
                    digest = context.digest(context.start + lo) if context is not None else None
                    self.put(ids[lo:hi], start + lo, *copied, context=digest)
        return len(ids) - to_run(self.cover(ids, context))


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

"""KV surgery: make the cache hold a new prompt without re-running the context behind it.

A chat client resends the whole live context every turn.  Between turns it changes in
three ways: new tokens at the end (a turn), spans taken out (a prune) and spans put
back at their old place (a resurrection).  :func:`plan_edits` lines the cached ids up
with the requested ones and returns the differences as :class:`Edit`\\ s; an engine then

* drops a removed span's keys and values and moves the later ones back by its length
  (RoPE rotations compose, so moving a key is a rotation: llama.cpp's ``seq_rm`` +
  ``seq_add``, :func:`rotate_keys` for transformers);
* for an inserted span moves the later keys forward by its length and runs only the
  inserted tokens at their positions: they see what precedes them, and the states after
  them were computed without them (the same approximation as a prune, the other way round);
* runs new tokens at the end as usual.

Re-running from the first edit is the exact path: chosen by the engine's ``kv_mode``
(``"exact"``) or by :func:`prefer_exact` when the inserted tokens that must be *run*
(not those put back from stored states, :mod:`.span_store`) cost nearly as much as
re-running.  :class:`SyncReport` says what happened; it travels in the done event.

**Tail first** (:func:`sync`): a resurrection can triple the context for one turn (the
chat was pruned to its budget after the last answer, the resurrected spans fill the
model's window), and the new tokens at the end then run over all of it, 2-3x slower per
token.  So when a request both inserts spans and appends new tokens, the engine syncs
twice: first to :func:`tail_first_ids` (the removals made, the tail run at the pruned
context's size), then to the request (the insertions put back or run in place, the
tail's cells moved forward).  The tail's states are then computed without the inserted
spans, the approximation every insertion already makes for the tokens after it; the
prompt's last token (run after the sync) still sees everything.

Pure Python (torch is imported by :func:`rotate_keys` only).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import asdict, dataclass

from .span_store import Context, to_run

#: Tokens that must agree to line two spans up (shorter runs match by accident:
#: chat framing repeats every turn).
ANCHOR_TOKENS = 16

#: Surgery runs the inserted spans; when that is at least this share of re-running
#: everything after the first edit, re-running (exact) costs little more.
EXACT_WHEN_INSERTED_SHARE = 0.5

SURGERY = "surgery"
EXACT = "exact"
KV_MODES = (SURGERY, EXACT)


@dataclass(frozen=True)
class Edit:
    """Cached tokens ``[cached_start, cached_end)`` give way to requested ``[start, end)``.

    Before an edit both sequences agree, so ``start`` is also where the edit sits in
    the new sequence.  ``cached_end == cached_start``: a pure insertion; ``end ==
    start``: a pure removal.
    """

    cached_start: int
    cached_end: int
    start: int
    end: int

    @property
    def removed(self) -> int:
        return self.cached_end - self.cached_start

    @property
    def inserted(self) -> int:
        return self.end - self.start


@dataclass
class SyncReport:
    """How one prompt met the cache (token counts)."""

    mode: str = "prefix"  # "prefix" (plain reuse), "surgery", "exact" (re-run from the first edit)
    reused: int = 0  # cached tokens kept, moved or not
    moved: int = 0  # of those, tokens whose position changed
    dropped: int = 0  # cached tokens removed (pruned spans and a changed tail)
    inserted: int = 0  # tokens run at their own place inside the context (surgery)
    restored: int = 0  # inserted tokens put back from stored states instead of being run
    stored: int = 0  # pruned tokens whose states were saved for a later resurrection
    appended: int = 0  # new tokens run at the end
    rerun: int = 0  # tokens re-run because the exact path was taken
    grown_to: int = 0  # cells of the new, larger cache made for this request (0: none)
    carried: int = 0  # live tokens whose states were copied into it (no run)
    regrown: int = 0  # live tokens re-run into it (when they could not be copied)
    grow_s: float = 0.0  # seconds making it and re-running them
    spans_removed: int = 0
    spans_inserted: int = 0
    store_s: float = 0.0  # seconds saving pruned spans' states
    restore_s: float = 0.0  # seconds putting stored states back
    insert_s: float = 0.0  # seconds running inserted tokens
    tail_first: int = 0  # of ``appended``, tokens run before the insertions (tail first; 0: not)

    @property
    def computed(self) -> int:
        """Prompt tokens the model ran."""
        return self.inserted + self.appended + self.rerun + self.regrown

    def as_dict(self) -> dict:
        out = asdict(self)
        for key in ("store_s", "restore_s", "insert_s", "grow_s"):
            out[key] = round(out[key], 4)
        return out


def plan_edits(cached: list[int], wanted: list[int], anchor: int = ANCHOR_TOKENS) -> list[Edit]:
    """The edits that turn ``cached`` into ``wanted``, in order (empty if equal).

    At each disagreement the candidates are: a removal (the requested tokens reappear
    later in the cache), an insertion (the cached tokens reappear later in the request)
    and the first place both agree again for ``anchor`` tokens; the candidate followed
    by the longest agreement, less the tokens it skips, wins (repeated text, such as a
    paragraph quoted twice, would otherwise line up the wrong copies).  The last edit
    may be a tail (``cached_end == len(cached)`` and ``end == len(wanted)``).
    """
    nc, nw = len(cached), len(wanted)
    edits: list[Edit] = []
    index: dict[tuple, list[int]] | None = None
    i = j = 0
    while True:
        i, j = _agree(cached, wanted, i, j)
        if i == nc or j == nw:
            if i < nc or j < nw:
                edits.append(Edit(i, nc, j, nw))
            return edits
        if index is None:
            index = {}
            for p in range(nc - anchor + 1):
                index.setdefault(tuple(cached[p : p + anchor]), []).append(p)
        candidates = []
        removal = index.get(tuple(wanted[j : j + anchor]), [])
        candidates += [(ii, j) for ii in removal[bisect_left(removal, i + 1):][:CANDIDATES]]
        key = cached[i : i + anchor]
        if len(key) == anchor:
            found = 0
            for jj in range(j + 1, nw - anchor + 1):
                if wanted[jj] == key[0] and wanted[jj : jj + anchor] == key:
                    candidates.append((i, jj))
                    found += 1
                    if found == CANDIDATES:
                        break
        for jj in range(j, nw - anchor + 1):
            where = index.get(tuple(wanted[jj : jj + anchor]))
            if where:
                k = bisect_left(where, i)
                if k < len(where):
                    candidates.append((where[k], jj))
                    break
        if not candidates:
            edits.append(Edit(i, nc, j, nw))
            return edits
        ii, jj = max(candidates, key=lambda c: _agree_length(cached, wanted, *c) - (c[0] - i) - (c[1] - j))
        edits.append(Edit(i, ii, j, jj))
        i, j = ii, jj


#: Places tried per kind of candidate at one disagreement, and how far agreement is counted.
CANDIDATES = 8
AGREEMENT_HORIZON = 4096


def _agree(cached, wanted, i: int, j: int) -> tuple[int, int]:
    """Advance ``i`` and ``j`` while the tokens agree."""
    nc, nw = len(cached), len(wanted)
    while i < nc and j < nw and cached[i] == wanted[j]:
        i += 1
        j += 1
    return i, j


def _agree_length(cached, wanted, i: int, j: int) -> int:
    n = min(len(cached) - i, len(wanted) - j, AGREEMENT_HORIZON)
    k = 0
    while k < n and cached[i + k] == wanted[j + k]:
        k += 1
    return k


def split_tail(edits: list[Edit], cached_len: int, wanted_len: int) -> tuple[list[Edit], Edit | None]:
    """``(middle edits, tail edit or None)``."""
    if edits and edits[-1].cached_end == cached_len and edits[-1].end == wanted_len:
        return edits[:-1], edits[-1]
    return edits, None


def prefer_exact(middle: list[Edit], wanted_len: int, inserted_cost: int | None = None) -> bool:
    """Whether re-running from the first edit is the better way (see the module docstring)."""
    if not middle:
        return False
    inserted = sum(e.inserted for e in middle) if inserted_cost is None else inserted_cost
    rerun = wanted_len - middle[0].start
    return inserted >= EXACT_WHEN_INSERTED_SHARE * rerun and inserted > 0


#: Tail tokens from which running the tail before the insertions may pay.
TAIL_FIRST_MIN_TOKENS = 16
#: ... and (tail tokens) x (inserted tokens) from which it does: each pair is attention
#: the tail no longer computes, ~2 us on two cores here (a token's prefill goes from
#: ~6 ms at 1k context to 14-20 ms at 5-7.6k), so 32k pairs save ~65 ms, about what the
#: second pass's extra llama.cpp K-shift costs when the first one moved cells as well
#: (measured ~30 ms for 2,560 cells, ~180 ms for 8,192, one-token decodes at load ~3.5).
#: A chat turn that resurrects a few hundred tokens under an 80-token message is past it.
TAIL_FIRST_MIN_PAIRS = 32_768
#: Whether engines sync tail first unless told otherwise (``--kv-tail-first``).  Off: on a
#: chat-sized resurrection (2.0k -> 5.8k tokens, 3,963 restored, a 36-token message) it
#: was no faster here (0.58 s against 0.55 s, load ~3.8) and doubled the KL against exact
#: (0.0144 against 0.0069 nats; top-1 agreed both ways): bench_kv_surgery.py --big.
TAIL_FIRST_DEFAULT = False


def tail_first_ids(cached: list[int], wanted: list[int], edits: list[Edit], running: int | None = None,
                   min_tail: int | None = None, min_pairs: int | None = None) -> list[int] | None:
    """The ids to sync to before ``wanted`` when the tail should run first, else ``None``.

    ``edits``: :func:`plan_edits` of ``cached`` and ``wanted``.  The answer is ``wanted``
    with every middle edit's inserted tokens left out: the cache with the removals made
    and the tail appended.  ``None`` unless a middle edit inserts tokens, the tail
    appends at least ``min_tail`` (default :data:`TAIL_FIRST_MIN_TOKENS`), tail times
    inserted tokens reach ``min_pairs`` (:data:`TAIL_FIRST_MIN_PAIRS`) and surgery is the way (not :func:`prefer_exact`, given
    ``running``, the inserted tokens that would be run rather than restored; and no edit
    at position 0, which an engine may re-run from the start).
    """
    middle, tail = split_tail(edits, len(cached), len(wanted))
    inserted = sum(e.inserted for e in middle)
    min_tail = TAIL_FIRST_MIN_TOKENS if min_tail is None else min_tail
    min_pairs = TAIL_FIRST_MIN_PAIRS if min_pairs is None else min_pairs
    if tail is None or not inserted or tail.inserted < min_tail or tail.inserted * inserted < min_pairs:
        return None
    if middle[0].start == 0 or prefer_exact(middle, len(wanted), running):
        return None
    out, at = [], 0
    for e in middle:
        out += cached[at:e.cached_start]
        at = e.cached_end
    return out + cached[at:tail.cached_start] + wanted[tail.start:]


def merge_reports(first: SyncReport, second: SyncReport) -> SyncReport:
    """One report for a tail-first sync: ``first`` to the intermediate ids, ``second`` on.

    Work is summed over both passes (moved counts a token once per pass that moved it);
    ``reused`` is what the first pass kept of the cache (the second reuses the tail the
    first ran), the cache growth is the first's, and ``tail_first`` the tail's tokens.
    """
    out = SyncReport(**{k: v for k, v in asdict(first).items()})
    for key in ("moved", "dropped", "inserted", "restored", "stored", "appended", "rerun",
                "spans_removed", "spans_inserted", "store_s", "restore_s", "insert_s"):
        setattr(out, key, getattr(first, key) + getattr(second, key))
    out.mode = EXACT if EXACT in (first.mode, second.mode) else SURGERY
    out.tail_first = first.appended
    return out


def sync(cache, ids: list[int], should_stop=lambda: False) -> SyncReport | None:
    """Make ``cache`` hold ``ids``: ``cache.sync_pass(ids, edits, should_stop)`` once, or
    twice with the tail first (see the module docstring) when ``cache.tail_first`` is set,
    ``cache.mode`` is surgery and :func:`tail_first_ids` says so (the inserted tokens to
    run are those ``cache.store`` does not hold).  ``None``: stopped."""
    edits = plan_edits(cache.ids, ids)
    between = None
    if cache.tail_first and cache.mode == SURGERY:
        middle, _ = split_tail(edits, len(cache.ids), len(ids))
        where = Context(ids, 0)
        running = sum(to_run(cache.store.cover(ids[e.start:e.end], where.at(e.start)))
                      for e in middle if e.inserted)
        between = tail_first_ids(cache.ids, ids, edits, running)
    if between is None:
        return cache.sync_pass(ids, edits, should_stop)
    first = cache.sync_pass(between, plan_edits(cache.ids, between), should_stop)
    if first is None:
        return None
    second = cache.sync_pass(ids, plan_edits(cache.ids, ids), should_stop)
    return None if second is None else merge_reports(first, second)


def rope_factors(delta, n: int, inv_freq, device, dtype):
    """``(cos, sin)`` ``[n, head_dim]`` that rotate ``n`` keys by ``delta`` positions each
    (a 1-D tensor or an int); the same for every layer, so a caller rotating many layers
    by the same shifts computes them once (:func:`rotate_keys`'s ``factors``)."""
    import torch

    if not torch.is_tensor(delta):
        delta = torch.full((n,), int(delta), device=device)
    freqs = delta[:, None].to(torch.float32) * inv_freq.to(device, torch.float32)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_keys(keys, delta, inv_freq, factors=None):
    """RoPE-rotate ``keys`` ``[..., tokens, head_dim]`` by ``delta`` positions each (torch).

    ``delta``: a 1-D tensor (one shift per token) or an int.  Uses the half-split layout
    of Llama-family models (``rotate_half``), as transformers does.  ``factors``: the
    :func:`rope_factors` of ``delta``, if the caller has them.
    """
    import torch

    cos, sin = factors or rope_factors(delta, keys.shape[-2], inv_freq, keys.device, keys.dtype)
    half = keys.shape[-1] // 2
    rotated = torch.cat((-keys[..., half:], keys[..., :half]), dim=-1)
    return keys * cos + rotated * sin

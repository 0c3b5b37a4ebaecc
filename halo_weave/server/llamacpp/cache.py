"""A llama.cpp context as the server's KV cache: decoding, cells and KV surgery.

**Attention** is read by ggml's evaluation callback, in :mod:`.readout`
(:class:`~.readout.AttentionReadout`, which :class:`LlamaCache` extends): the softmax rows of
a decode's last query, mapped from KV cells to positions with ``cells``.

**Surgery** (see :mod:`halo_weave.server.kv_surgery`) on sequence 0, the live context:

* removal: the span's states are saved to host memory (:mod:`.states`, a bounded
  :class:`~halo_weave.server.span_store.SpanStore`), then ``seq_rm`` the span (every
  removal of a sync before anything else) and ``seq_add`` the rest back (llama.cpp
  re-rotates the keys at the next decode);
* insertion: ``seq_add`` the later cells forward and put back what the store holds (no
  model run); the pieces the store does not hold are run after every edit is in place:
  ``seq_cp`` each piece's prefix into a scratch sequence of its own, decode up to seven
  pieces in one batch, each in its sequence at its positions (a decode below a
  sequence's last position is refused), ``seq_cp`` them into sequence 0 and drop the
  scratch sequences.  Every ``seq_add`` makes llama.cpp re-rotate the keys
  of *every* cell of the cache at the next decode (its K-shift): running the pieces
  between the moves paid that once per piece, now once per sync.  Needs ``kv_unified``
  (``seq_cp`` works on a unified cache only).
* tail first (:func:`~halo_weave.server.kv_surgery.sync`): two syncs, so two K-shifts
  when the first one prunes as well (one when it only appends).

Every surgery ends with the scratch sequences empty, so the cache holds the live context
and nothing else: a decode attends over as many cells as the context has (plus padding).
"""

from __future__ import annotations

import logging
import threading
import time
import numpy as np

from .. import kv_surgery
from ..kv_surgery import EXACT, SURGERY, SyncReport
from ..span_store import SpanStore, to_run
from . import growth
from .bindings import Bindings
from . import live_state
from .readout import AttentionReadout
from .states import StateSpill

log = logging.getLogger("halo_weave.server")

LIVE_SEQ = 0
SCRATCH_SEQ = 1
#: Sequences in the context: live, and scratch sequences (states restored from the
#: store pass through the first; pieces run in place use up to all of them at once).
N_SEQ = 8
#: Compact the live context once its cells spread over this many more than it needs
#: (two of llama.cpp's 256-cell pads): below that a decode attends over little extra.
COMPACT_MIN_CELLS = 512


class DecodeError(RuntimeError):
    """llama_decode refused a batch or the evaluation callback failed."""


class LlamaCache(AttentionReadout):
    """Sequence 0 of a llama.cpp context, mirrored by ``ids`` and ``cells``."""

    #: Stored spans are sequence-state blobs, which a span file keeps (:mod:`..span_files`).
    spans_on_disk = True

    def __init__(self, lib: Bindings, ctx, model, n_layer: int, n_head: int, n_cells: int,
                 n_batch: int, n_vocab: int, store: SpanStore | None = None, c_filter=None) -> None:
        self.lib, self.L = lib, lib.llama
        self.model = model
        self.n_layer, self.n_head, self.n_vocab, self.n_batch = n_layer, n_head, n_vocab, n_batch
        self.mode = SURGERY
        #: Run a request's new tokens before its insertions (see :func:`.kv_surgery.sync`).
        self.tail_first = kv_surgery.TAIL_FIRST_DEFAULT
        #: Threads for prefill and plain decoding, and for a decode whose attention is read
        #: (set by the engine; with passive waiting, 2 threads helped both here).
        self.threads = self.capture_threads = 1
        self.ids: list[int] = []
        self.cells = np.zeros(0, dtype=np.int64)
        self.store = store if store is not None else SpanStore()
        #: The most cells :meth:`reserve` grows to, and ``new_context(n_cells)`` making
        #: such a context (set by the engine; without it the cache never grows).
        self.max_cells = n_cells
        self.new_context = None
        self.grown: tuple[int, int, int, float] | None = None  # cells, copied, re-run, seconds
        #: :meth:`compact` packs the cache once it spreads over this many extra cells.
        self.compact_min_cells = COMPACT_MIN_CELLS
        #: No position shift pending (llama.cpp applies one at the next decode).
        self.settled = True
        self.bind(ctx, n_cells)
        self._batch = self.L.llama_batch_init(n_batch, 0, 1)
        self._row_width = 0
        self._layers_seen = 0
        self._new_cells: list[np.ndarray] = []
        self._idx_tensor: int | None = None
        self._capture = False
        #: While :meth:`decode` runs with a hook: called with every layer's softmax block.
        self._hook = None
        self._block_scratch = np.zeros(0, dtype=np.float32)
        self._error: BaseException | None = None
        self._layout_checked = False
        self._lock = threading.Lock()
        #: The C filter answering ggml's asks (None: this callback sees every node).
        self.c_filter = c_filter

    def bind(self, ctx, n_cells: int) -> None:
        """Work on ``ctx`` (empty, ``n_cells`` cells) from now on."""
        self.ctx, self.n_cells = ctx, n_cells
        self.mem = self.L.llama_get_memory(ctx)
        self._threads_set = None
        self.spill = StateSpill(self.lib, ctx, self.mem, self.store, LIVE_SEQ, SCRATCH_SEQ,
                                tuple(range(SCRATCH_SEQ + 1, N_SEQ)))
        # Filled by the callback: per-layer softmax rows of the last query, and cell indices.
        self._rows = np.zeros((self.n_layer, self.n_head, n_cells), dtype=np.float32)

    def reserve(self, n_tokens: int, should_stop=lambda: False) -> bool:
        """Make room for ``n_tokens`` positions (see :func:`.growth.reserve`)."""
        return growth.reserve(self, n_tokens, should_stop)

    # ------------------------------------------------------------ decoding

    def decode(self, ids: list[int], *, hook=None) -> np.ndarray:
        """Run one batch (at most ``n_batch``) after the live context, with the logits of
        every token (float32 ``[len(ids), n_vocab]``).  ``hook(layer, probs)`` is called
        during the decode with each layer's softmax, ``[n_head, len(ids), n_kv cells]``
        (a scratch buffer: read it there); ``self.cells`` maps cells to positions after.
        """
        try:
            cells = self._decode(ids, len(self.ids), LIVE_SEQ, logits=True, all_logits=True, hook=hook)
            self._append(ids, cells)
        except BaseException:
            self.reset()
            raise
        ptr = self.L.llama_get_logits(self.ctx)
        return np.ctypeslib.as_array(ptr, shape=(len(ids), self.n_vocab)).copy()

    def _decode(self, ids: list[int], pos, seq, *, logits: bool, capture: bool = False,
                all_logits: bool = False, hook=None) -> np.ndarray:
        """Run ``ids`` at ``pos..`` in ``seq`` (or at the positions, in the sequences, of
        two lists, one item per token); returns the cells they were written to.
        ``logits``: for the last token (every token with ``all_logits``); ``capture``: the
        last query's rows into ``_rows``; ``hook``: see :meth:`decode`."""
        L, batch = self.L, self._batch
        n = len(ids)
        positions = range(pos, pos + n) if isinstance(pos, int) else pos
        seqs = [seq] * n if isinstance(seq, int) else seq
        for i, token in enumerate(ids):
            batch.token[i] = token
            batch.pos[i] = positions[i]
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seqs[i]
            batch.logits[i] = 1 if logits and (all_logits or i == n - 1) else 0
        batch.n_tokens = n
        capture = capture or hook is not None
        threads = (self.capture_threads if capture else self.threads, self.threads)
        if threads != self._threads_set:
            L.llama_set_n_threads(self.ctx, *threads)
            self._threads_set = threads
        self._new_cells, self._error, self._capture, self._hook = [], None, capture and hook is None, hook
        self._layers_seen = 0
        direct = self.c_filter is not None and self._capture and self._layout_checked
        if self.c_filter is not None:  # every decode is made here, so set for each
            self.c_filter.want_softmax = capture
            self.c_filter.read_rows_into(self._rows if direct else None)
        try:
            status = L.llama_decode(self.ctx, batch)
        finally:
            self._capture, self._hook = False, None
        if direct:  # the filter copied the rows (or left a layer it could not to the callback)
            layers, width = self.c_filter.rows_read()
            self._layers_seen += layers
            self._row_width = width or self._row_width
        if self._error is not None:
            raise DecodeError(f"attention readout failed: {self._error!r}") from self._error
        if status != 0:
            raise DecodeError(f"llama_decode returned {status}")
        self.settled = True
        cells = np.concatenate(self._new_cells) if self._new_cells else np.zeros(0, np.int64)
        if len(cells) != n:
            raise DecodeError(f"saw the cells of {len(cells)} of {n} tokens")
        if capture and self._layers_seen < self.n_layer:
            raise DecodeError(f"read attention from {self._layers_seen} of {self.n_layer} layers")
        return cells

    def _run(self, ids: list[int], pos: int, seq: int, should_stop=lambda: False) -> np.ndarray | None:
        """Decode ``ids`` in batches without logits; ``None`` if stopped."""
        found = []
        for start in range(0, len(ids), self.n_batch):
            if should_stop():
                return None
            found.append(self._decode(ids[start:start + self.n_batch], pos + start, seq, logits=False))
        return np.concatenate(found) if found else np.zeros(0, np.int64)

    def step(self, ids: list[int], *, attention: bool, per_layer: bool = False):
        """Run ``ids`` after the context; ``(logits, row)`` (see :mod:`..engine_base`)."""
        try:
            # The last batch carries the last token's logits and attention (the server steps
            # one token; a caller stepping several gets one decode, not two, for the last batch).
            tail = ids[-self.n_batch:]
            head = ids[:len(ids) - len(tail)]
            if head:
                self._append(head, self._run(head, len(self.ids), LIVE_SEQ))
            cells = self._decode(tail, len(self.ids), LIVE_SEQ, logits=True, capture=attention)
            self._append(tail, cells)
        except BaseException:
            self.reset()
            raise
        ptr = self.L.llama_get_logits_ith(self.ctx, -1)
        logits = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()
        if not attention:
            return logits, None
        return logits, self.attention_row(per_layer)

    def attend_all(self, ids: list[int], block: int = 32) -> np.ndarray:
        """Run ``ids`` after the context reading *every* one's attention (teacher forcing).

        Returns float32 ``[len(ids), positions after]``: row *i* is the layer-and-head
        mean attention of ``ids[i]`` as a query over every position up to its own (the
        causal mask leaves the later ones 0).  ``block`` queries share one decode, so a
        whole answer costs about a prefill plus the readout, not a decode per token.
        """
        start = len(self.ids)
        out = np.zeros((len(ids), start + len(ids)), dtype=np.float32)
        scale = np.float32(1.0 / (self.n_layer * self.n_head))
        try:
            for first in range(0, len(ids), block):
                part = ids[first:first + block]
                sums = np.zeros((len(part), self._rows.shape[2]), dtype=np.float32)

                def add(_layer, probs, sums=sums):
                    sums[:, :probs.shape[2]] += probs.sum(axis=0)

                cells = self._decode(part, len(self.ids), LIVE_SEQ, logits=False, hook=add)
                self._append(part, cells)
                out[first:first + len(part), :len(self.ids)] = sums[:, self.cells] * scale
        except BaseException:
            self.reset()
            raise
        return out

    def probe(self) -> None:
        """Run one token in the scratch sequence and drop it: the evaluation callback then
        sees this context's layer-0 key cache (:meth:`.StateSpill.see_key_tensor`)."""
        try:
            self._decode(self.ids[-1:] or [0], 0, SCRATCH_SEQ, logits=False)
        finally:
            self.L.llama_memory_seq_rm(self.mem, SCRATCH_SEQ, -1, -1)

    def settle(self) -> bool:
        """Apply a pending position shift now, so that the cache can be copied out (grown,
        packed, saved) instead of re-run: llama.cpp shifts at the next decode, so one
        token is run in the scratch sequence and dropped.  Whether the cache is settled."""
        if not self.settled and self.ids:
            self.probe()
        return self.settled

    def spread(self) -> int:
        """Cells a decode attends over beyond the live context's own: llama.cpp attends
        up to the highest used cell (padded), holes included."""
        if not len(self.cells):
            return 0
        return growth.padded(int(self.cells.max()) + 1) - growth.padded(len(self.cells))

    def compact(self) -> bool:
        """Move the live context into the first cells when prunes and restores have
        spread it out by at least ``compact_min_cells`` (see :func:`.growth.compact`)."""
        if self.spread() < self.compact_min_cells:
            return False
        return growth.compact(self)

    def export_state(self) -> bytes | None:
        """The live context's states as a blob (see :mod:`.live_state`); None when empty
        or a position shift is pending."""
        return live_state.export_live(self)

    def import_state(self, ids: list[int], blob: bytes, keep: int | None = None) -> bool:
        """Hold ``ids`` from a blob of :meth:`export_state` without a model run, then only
        their first ``keep`` (default all); False when it does not fit this cache (see
        :func:`.live_state.import_live`)."""
        try:
            if not live_state.import_live(self, ids, blob):
                return False
            self._truncate(len(ids) if keep is None else keep)
            return True
        except BaseException:
            self.reset()
            raise

    def _append(self, ids: list[int], cells: np.ndarray) -> None:
        self.ids.extend(ids)
        self.cells = np.concatenate([self.cells, cells])

    def reset(self) -> None:
        """Forget everything (also after a failed decode, which may leave half a step)."""
        self.L.llama_memory_clear(self.mem, True)
        self.ids, self.cells = [], np.zeros(0, np.int64)
        self.settled = True

    # ------------------------------------------------------------ sync and surgery

    def sync(self, ids: list[int], should_stop=lambda: False) -> SyncReport | None:
        """Make sequence 0 hold exactly ``ids``, by surgery where it pays (``None``: stopped)."""
        try:
            return kv_surgery.sync(self, ids, should_stop)
        except BaseException:
            self.reset()
            raise

    def _sync(self, ids: list[int], edits, should_stop) -> SyncReport | None:
        """One pass of :meth:`sync`: apply ``edits`` (planned from ``self.ids`` to ``ids``)."""
        middle, tail = kv_surgery.split_tail(edits, len(self.ids), len(ids))
        report = SyncReport()
        if self.grown is not None:
            report.grown_to, report.carried, report.regrown, report.grow_s = self.grown
            self.grown = None
        if middle:
            surgery = self.mode != EXACT
            if surgery:  # before anything moves: no K-shift is pending now
                started = time.perf_counter()
                for e in middle:
                    if e.removed:
                        report.stored += self.spill.save(self.ids[e.cached_start:e.cached_end],
                                                         e.cached_start, e.cached_end)
                report.store_s = time.perf_counter() - started
            covers = [self.store.cover(ids[e.start:e.end]) if surgery else [] for e in middle]
            running = sum(to_run(c) for c in covers)
            if not surgery or kv_surgery.prefer_exact(middle, len(ids), running):
                keep = middle[0].start
                report.mode, report.reused = EXACT, keep
                report.dropped = len(self.ids) - keep
                self._truncate(keep)
                report.rerun = len(ids) - keep
                return report if self.extend(ids, should_stop) else None
            report.mode = SURGERY
            self.settled = False  # moves ahead: shifted at the next decode
            if not self._surgery(middle, covers, ids, report, should_stop):
                return None
        if tail:
            report.dropped += tail.removed
            self._truncate(tail.start)
        report.reused = len(self.ids) - report.inserted - report.restored
        report.appended = len(ids) - len(self.ids)
        return report if self.extend(ids, should_stop) else None

    def extend(self, ids: list[int], should_stop) -> bool:
        """Run the tokens of ``ids`` after the cached ones, a batch at a time; False when
        stopped (the batches run so far stay cached: a stopped read-ahead leaves the
        generate that stopped it less to run)."""
        rest = ids[len(self.ids):]
        for start in range(0, len(rest), self.n_batch):
            if should_stop():
                return False
            batch = rest[start:start + self.n_batch]
            self._append(batch, self._decode(batch, len(self.ids), LIVE_SEQ, logits=False))
        return True

    def _truncate(self, keep: int) -> None:
        if keep < len(self.ids):
            self.L.llama_memory_seq_rm(self.mem, LIVE_SEQ, keep, -1)
            del self.ids[keep:]
            self.cells = self.cells[:keep]

    def _surgery(self, middle, covers, ids, report: SyncReport, should_stop) -> bool:
        """Apply the edits: every removal first, then the moves and stored pieces, then
        the pieces to run, so that llama.cpp re-rotates the cache's keys (its K-shift,
        over every cell) once per sync, at the first run, not once per piece run between
        two moves.  Removing first frees the pruned cells before anything is restored: a
        restore copies a whole stored entry into free cells for a moment, and near a full
        cache the restores of an early edit found no room while a later edit's pruned
        span still held its cells (the span was then run instead, seconds at 8k)."""
        L, mem = self.L, self.mem
        in_use = np.zeros(self.n_cells, dtype=bool)
        in_use[self.cells] = True
        for edit in middle:  # nothing has moved yet: the cached positions are the cache's
            if edit.removed:
                L.llama_memory_seq_rm(mem, LIVE_SEQ, edit.cached_start, edit.cached_end)
                in_use[self.cells[edit.cached_start:edit.cached_end]] = False
                report.dropped += edit.removed
                report.spans_removed += 1
        pending: list[tuple[int, list[int]]] = []  # (position, ids) of pieces to run
        for edit, pieces in zip(middle, covers):
            s, removed, added = edit.start, edit.removed, edit.inserted
            if removed != added:  # the removed positions are empty already
                L.llama_memory_seq_add(mem, LIVE_SEQ, s + removed, -1, added - removed)
                report.moved += len(self.ids) - s - removed
            found = []
            for group in _by_entry(pieces, len(self.spill.helpers)):
                started = time.perf_counter()
                restored = (self.spill.restore_group([(p, s + p.start) for p in group], in_use)
                            if group[0].entry is not None else [None] * len(group))
                for piece, cells in zip(group, restored):
                    if cells is not None:
                        report.restored += len(piece)
                        in_use[cells] = True
                    else:
                        pending.append((s + piece.start, ids[s + piece.start:s + piece.end]))
                        cells = np.full(len(piece), -1, dtype=np.int64)  # filled by _run_pending
                    found.append(cells)
                if restored[0] is not None:
                    report.restore_s += time.perf_counter() - started
            if added:
                report.spans_inserted += 1
            self.ids[s:s + removed] = ids[s:s + added]
            new_cells = np.concatenate(found) if found else np.zeros(0, np.int64)
            self.cells = np.concatenate([self.cells[:s], new_cells, self.cells[s + removed:]])
        if pending:
            # Stopping here drops the whole cache (the pieces' cells are not filled yet):
            # worth it only for long pieces, never for the few framing tokens a read-ahead
            # stopped by its generate usually has left.
            if sum(len(span) for _, span in pending) > self.n_batch and should_stop():
                self.reset()
                return False
            started = time.perf_counter()
            for at, cells in self._run_pending(pending):
                self.cells[at:at + len(cells)] = cells
            report.inserted += sum(len(span) for _, span in pending)
            report.insert_s += time.perf_counter() - started
        return True

    def _run_pending(self, pending: list[tuple[int, list[int]]]):
        """Decode each ``(at, span)`` at positions ``at..`` seeing what precedes it in the
        live sequence; yields ``(at, cells)``.

        A span's prefix is copied into a scratch sequence of its own (a decode below a
        sequence's last position is refused), and up to :data:`N_SEQ` - 1 spans run in one
        batch: each decode attends over the whole cache, so running the spans one by one
        paid that per span (a few framing tokens cost ~40 ms each at 7k).  Spans of one
        batch do not see each other (a later batch sees the earlier ones), like a span's
        later context does not see it; see :func:`_batches` for which share one."""
        L, mem = self.L, self.mem
        for group in _batches(pending, N_SEQ - SCRATCH_SEQ):
            seqs = list(range(SCRATCH_SEQ, SCRATCH_SEQ + len(group)))
            try:
                for (at, _span), seq in zip(group, seqs):
                    L.llama_memory_seq_rm(mem, seq, -1, -1)
                    L.llama_memory_seq_cp(mem, LIVE_SEQ, seq, 0, at)
                # Every span's tokens in order, cut into batches: a span cut in two goes on
                # in the next batch from its own last position.
                tokens = [t for _at, span in group for t in span]
                positions = [at + i for at, span in group for i in range(len(span))]
                owners = [seq for (_at, span), seq in zip(group, seqs) for _ in span]
                cells = np.concatenate([
                    self._decode(tokens[b:b + self.n_batch], positions[b:b + self.n_batch],
                                 owners[b:b + self.n_batch], logits=False)
                    for b in range(0, len(tokens), self.n_batch)])
                for (at, span), seq in zip(group, seqs):
                    L.llama_memory_seq_cp(mem, seq, LIVE_SEQ, at, at + len(span))
            finally:
                for seq in seqs:
                    L.llama_memory_seq_rm(mem, seq, -1, -1)
            owner = np.array(owners)
            for (at, _span), seq in zip(group, seqs):
                yield at, cells[owner == seq]

    def close(self) -> None:
        if self._batch is not None:
            self.L.llama_batch_free(self._batch)
            self._batch = None


def _by_entry(pieces, width: int):
    """``pieces`` in order, in runs of at most ``width`` that come from one stored entry
    and take disjoint parts of it (restored with one write of it: a cell can be in one
    place only, and a run of framing may be taken twice); a piece to run (no entry) is a
    run of its own."""
    run: list = []
    for piece in pieces:
        if run and (piece.entry is None or piece.entry is not run[0].entry or len(run) == width
                    or any(p.offset < piece.offset + len(piece) and piece.offset < p.offset + len(p)
                           for p in run)):
            yield run
            run = []
        run.append(piece)
        if piece.entry is None:
            yield run
            run = []
    if run:
        yield run


def _batches(pending: list[tuple[int, list[int]]], width: int):
    """``pending`` spans (in position order) in groups of at most ``width`` to run in one
    batch.  A span that starts where the one before it ends goes into the next group: its
    prefix would end in that span's missing positions, and llama.cpp refuses a batch
    that does not continue its sequence's last position."""
    group: list[tuple[int, list[int]]] = []
    for at, span in pending:
        if group and (len(group) == width or group[-1][0] + len(group[-1][1]) == at):
            yield group
            group = []
        group.append((at, span))
    if group:
        yield group

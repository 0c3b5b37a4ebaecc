"""A llama.cpp context as the server's KV cache: decoding, cells and KV surgery.

**Attention** is read by ggml's evaluation callback, in :mod:`.readout`
(:class:`~.readout.AttentionReadout`, which the cache's :class:`~.decoder.Decoder` holds):
the softmax rows of a decode's last query, mapped from KV cells to positions with ``cells``.

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
  scratch sequences.  A read-ahead runs them in batches of its step and may be stopped
  between batches: the pieces not run are taken out again (:meth:`LlamaCache._give_back`).  Every ``seq_add`` makes llama.cpp re-rotate the keys
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
import time

import numpy as np

from .. import kv_surgery
from ..kv_surgery import EXACT, SURGERY, SyncReport
from ..span_store import Context, SpanStore, to_run
from . import growth as growth_
from .growth import COMPACT_MIN_CELLS  # noqa: F401 - also imported from here
from . import live_state
from .bindings import Bindings
from .decoder import Decoder
from .readout import AttentionReadout, DecodeError, DecodeStopped  # noqa: F401 - DecodeError: also imported from here
from .states import StateSpill

log = logging.getLogger("halo_weave.server")

LIVE_SEQ = 0
SCRATCH_SEQ = 1
#: Sequences in the context: live, and scratch sequences (states restored from the
#: store pass through the first; pieces run in place use up to all of them at once).
N_SEQ = 8


class LlamaCache:
    """Sequence 0 of a llama.cpp context, mirrored by ``ids`` and ``cells``.

    Owns: the context (``ctx``, ``mem``, ``n_cells``; replaced when it grows), ``ids``
    and ``cells`` (each position's token and KV cell), the span ``store`` and the
    ``spill`` saving to and restoring from it, the surgery settings ``mode`` and
    ``tail_first``, and the batch the sync under way runs new tokens in.  Its parts own
    the rest: ``decoder`` (the batch, the threads, the attention readout and whether a
    position shift is pending) and ``growth`` (when the cache grows and when it is
    packed).
    """

    #: Stored spans are sequence-state blobs, which a span file keeps (:mod:`..span_files`).
    spans_on_disk = True

    def __init__(self, lib: Bindings, ctx, n_layer: int, n_head: int, n_cells: int,
                 n_batch: int, n_vocab: int, store: SpanStore | None = None, *,
                 readout: AttentionReadout | None = None, threads: tuple[int, int] = (1, 1),
                 growth: growth_.Growth | None = None, stopper=None) -> None:
        """``readout``: the one whose callback the context was made with (a new one
        otherwise); ``threads``: for prefill and plain decoding, and for a decode whose
        attention is read; ``growth``: how far the cache may grow (never, without one);
        ``stopper``: llama.cpp's abort callback (:class:`.filter.Stopper`; None: a batch
        always runs to its end)."""
        self.lib, self.L = lib, lib.llama
        self.n_layer, self.n_head, self.n_batch = n_layer, n_head, n_batch
        #: New tokens run per batch in the sync under way (``sync``'s ``step``).
        self._step = n_batch
        self.mode = SURGERY
        #: Run a request's new tokens before its insertions (see :func:`.kv_surgery.sync`).
        self.tail_first = kv_surgery.TAIL_FIRST_DEFAULT
        self.ids: list[int] = []
        self.cells = np.zeros(0, dtype=np.int64)
        self.store = store if store is not None else SpanStore()
        self.growth = growth if growth is not None else growth_.Growth(n_cells)
        self.decoder = Decoder(lib, readout or AttentionReadout(lib, n_layer, n_head), n_batch, n_vocab,
                               threads, stopper)
        #: The sync under way may stop a batch of new tokens part way (``sync``'s ``stoppable``).
        self._stoppable = False
        #: Batches of new tokens stopped part way (tests, diagnostics).
        self.stopped_batches = 0
        #: The tokens of the stoppable batch being run.
        self._running_batch: list[int] | None = None
        self.bind(ctx, n_cells)

    def bind(self, ctx, n_cells: int) -> None:
        """Work on ``ctx`` (empty, ``n_cells`` cells) from now on."""
        self.ctx, self.n_cells = ctx, n_cells
        self.mem = self.L.llama_get_memory(ctx)
        self.spill = StateSpill(self.lib, ctx, self.mem, self.store, LIVE_SEQ, SCRATCH_SEQ,
                                tuple(range(SCRATCH_SEQ + 1, N_SEQ)))
        self.decoder.bind(ctx, n_cells, self.spill)

    def reserve(self, n_tokens: int, should_stop=lambda: False) -> bool:
        """Make room for ``n_tokens`` positions (see :func:`.growth.reserve`)."""
        return self.growth.reserve(self, n_tokens, should_stop)

    # ------------------------------------------------------------ decoding

    def decode(self, ids: list[int], *, hook=None) -> np.ndarray:
        """Run one batch (at most ``n_batch``) after the live context, with the logits of
        every token (float32 ``[len(ids), n_vocab]``).  ``hook(layer, probs)`` is called
        during the decode with each layer's softmax, ``[n_head, len(ids), n_kv cells]``
        (a scratch buffer: read it there); ``self.cells`` maps cells to positions after.
        """
        try:
            cells = self.decoder.run(ids, len(self.ids), LIVE_SEQ, logits=True, all_logits=True, hook=hook)
            self._append(ids, cells)
        except BaseException:
            self.reset()
            raise
        return self.decoder.logits(len(ids))

    def _run(self, ids: list[int], pos: int, seq: int, should_stop=lambda: False) -> np.ndarray | None:
        """Decode ``ids`` in batches without logits; ``None`` if stopped."""
        found = []
        for start in range(0, len(ids), self.n_batch):
            if should_stop():
                return None
            found.append(self.decoder.run(ids[start:start + self.n_batch], pos + start, seq, logits=False))
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
            cells = self.decoder.run(tail, len(self.ids), LIVE_SEQ, logits=True, capture=attention)
            self._append(tail, cells)
        except BaseException:
            self.reset()
            raise
        logits = self.decoder.last_logits()
        if not attention:
            return logits, None
        return logits, self.decoder.readout.attention_row(self.cells, per_layer)

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
                sums = np.zeros((len(part), self.decoder.readout.n_cells), dtype=np.float32)

                def add(_layer, probs, sums=sums):
                    sums[:, :probs.shape[2]] += probs.sum(axis=0)

                cells = self.decoder.run(part, len(self.ids), LIVE_SEQ, logits=False, hook=add)
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
            self.decoder.run(self.ids[-1:] or [0], 0, SCRATCH_SEQ, logits=False)
        finally:
            self.L.llama_memory_seq_rm(self.mem, SCRATCH_SEQ, -1, -1)

    def settle(self) -> bool:
        """Apply a pending position shift now, so that the cache can be copied out (grown,
        packed, saved) instead of re-run: llama.cpp shifts at the next decode, so one
        token is run in the scratch sequence and dropped.  Whether the cache is settled."""
        if not self.decoder.settled and self.ids:
            self.probe()
        return self.decoder.settled

    def spread(self) -> int:
        """Cells a decode attends over beyond the live context's own: llama.cpp attends
        up to the highest used cell (padded), holes included."""
        return growth_.spread(self.cells)

    def compact(self) -> bool:
        """Move the live context into the first cells when prunes and restores have
        spread it out by at least ``growth.compact_min_cells`` (see :func:`.growth.compact`)."""
        return self.growth.compact(self)

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
        self.decoder.cleared()

    # ------------------------------------------------------------ sync and surgery

    def sync(self, ids: list[int], should_stop=lambda: False, *, step: int | None = None,
             stoppable: bool = False) -> SyncReport | None:
        """Make sequence 0 hold exactly ``ids``, by surgery where it pays (``None``: stopped).

        ``step``: at most this many new tokens run per batch after the cached ones, so
        that ``should_stop`` is asked that often (a read-ahead: a message sent meanwhile
        waits for one short batch, not for ``n_batch`` tokens).  ``stoppable``: a batch
        of new tokens after the cached ones stops part way at :meth:`interrupt` (where
        the decoder has a stopper), so that the message does not wait for it."""
        self._step = min(step or self.n_batch, self.n_batch)
        self._stoppable = stoppable
        try:
            return kv_surgery.sync(self, ids, should_stop)
        except BaseException:
            self.reset()
            raise
        finally:
            self._step, self._stoppable = self.n_batch, False

    def interrupt(self, wanted: list[int] | None = None) -> None:
        """Stop the stoppable batch under way part way (any thread; see :meth:`sync`),
        unless the prompt ``wanted`` that comes next holds the batch's tokens: that work
        is the next prompt's too, and stopping would run it twice (a message whose recall
        did not change is mostly read ahead that way)."""
        running = self._running_batch
        if running is not None and wanted is not None and _holds(wanted, running):
            return
        self.decoder.stop()

    def sync_pass(self, ids: list[int], edits, should_stop) -> SyncReport | None:
        """One pass of :meth:`sync`: apply ``edits`` (planned from ``self.ids`` to ``ids``)."""
        middle, tail = kv_surgery.split_tail(edits, len(self.ids), len(ids))
        report = SyncReport()
        grown = self.growth.take_report()
        if grown is not None:
            report.grown_to, report.carried, report.regrown, report.grow_s = grown
        if middle:
            surgery = self.mode != EXACT
            if surgery:  # before anything moves: no K-shift is pending now
                started = time.perf_counter()
                for e in middle:
                    if e.removed:
                        report.stored += self.spill.save(self.ids[e.cached_start:e.cached_end],
                                                         e.cached_start, e.cached_end,
                                                         self.ids[:e.cached_start])
                report.store_s = time.perf_counter() - started
            where = Context(ids, 0)
            covers = [self.store.cover(ids[e.start:e.end], where.at(e.start)) if surgery else []
                      for e in middle]
            running = sum(to_run(c) for c in covers)
            if not surgery or kv_surgery.prefer_exact(middle, len(ids), running):
                keep = middle[0].start
                report.mode, report.reused = EXACT, keep
                report.dropped = len(self.ids) - keep
                self._truncate(keep)
                report.rerun = len(ids) - keep
                return report if self.extend(ids, should_stop) else None
            report.mode = SURGERY
            self.decoder.shift_pending()  # moves ahead: shifted at the next decode
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
        with self.decoder.stoppable(self._stoppable):
            for start in range(0, len(rest), self._step):
                if should_stop():
                    return False
                batch = rest[start:start + self._step]
                self._running_batch = batch if self._stoppable else None
                try:
                    cells = self.decoder.run(batch, len(self.ids), LIVE_SEQ, logits=False)
                except DecodeStopped:  # llama.cpp dropped the batch's cells: the cache is as before it
                    self.stopped_batches += 1
                    return False
                finally:
                    self._running_batch = None
                self._append(batch, cells)
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
            started = time.perf_counter()
            done = 0
            for at, cells in self._run_pending(pending, should_stop):
                self.cells[at:at + len(cells)] = cells
                done += len(cells)
            report.inserted += done
            report.insert_s += time.perf_counter() - started
            if done < sum(len(span) for _, span in pending):
                self._give_back([(at, span) for at, span in pending if self.cells[at] < 0])
                return False
        return True

    def _give_back(self, unrun: list[tuple[int, list[int]]]) -> None:
        """Take the pieces a stopped sync did not run out again (``(at, ids)``, in position
        order; their positions hold no cell yet): the later cells move back, and the cache
        holds a prompt without them, which the next sync plans from like any other."""
        for at, span in reversed(unrun):
            self.L.llama_memory_seq_add(self.mem, LIVE_SEQ, at + len(span), -1, -len(span))
            del self.ids[at:at + len(span)]
            self.cells = np.concatenate([self.cells[:at], self.cells[at + len(span):]])
        self.decoder.shift_pending()

    def _run_pending(self, pending: list[tuple[int, list[int]]], should_stop=lambda: False):
        """Decode each ``(at, span)`` at positions ``at..`` seeing what precedes it in the
        live sequence; yields ``(at, cells)``.  ``should_stop`` is asked before each batch
        of spans after the first (a sync's ``step`` tokens at most, or one longer span):
        when it says stop, the spans not run yet are not yielded.

        A span's prefix is copied into a scratch sequence of its own (a decode below a
        sequence's last position is refused), and up to :data:`N_SEQ` - 1 spans run in one
        batch: each decode attends over the whole cache, so running the spans one by one
        paid that per span (a few framing tokens cost ~40 ms each at 7k).  Spans of one
        batch do not see each other (a later batch sees the earlier ones), like a span's
        later context does not see it; see :func:`_batches` for which share one."""
        L, mem = self.L, self.mem
        short = self._step if self._step < self.n_batch else None  # a read-ahead's: stop often
        for n, group in enumerate(_batches(pending, N_SEQ - SCRATCH_SEQ, short)):
            if n and should_stop():
                return
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
                # Never stopped part way: a paragraph run for a draft the user typed past is
                # kept (its state stored when the next draft leaves it out), and the recall
                # of the words after often brings it back.
                cells = np.concatenate([
                    self.decoder.run(tokens[b:b + self.n_batch], positions[b:b + self.n_batch],
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
        """Free the decoder's batch (the engine frees the context)."""
        self.decoder.close()


def _holds(ids: list[int], piece: list[int]) -> bool:
    """Whether ``piece`` occurs in ``ids`` as a run of consecutive tokens."""
    if not piece:
        return True
    first, n = piece[0], len(piece)
    start = 0
    while True:
        try:
            at = ids.index(first, start)
        except ValueError:
            return False
        if ids[at:at + n] == piece:
            return True
        start = at + 1


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


def _batches(pending: list[tuple[int, list[int]]], width: int, tokens: int | None = None):
    """``pending`` spans (in position order) in groups of at most ``width`` (and, with
    ``tokens``, of at most that many tokens, or one longer span) to run in one batch.  A
    span that starts where the one before it ends goes into the next group: its prefix
    would end in that span's missing positions, and llama.cpp refuses a batch that does
    not continue its sequence's last position."""
    group: list[tuple[int, list[int]]] = []
    for at, span in pending:
        full = tokens is not None and sum(len(s) for _, s in group) + len(span) > tokens
        if group and (len(group) == width or full or group[-1][0] + len(group[-1][1]) == at):
            yield group
            group = []
        group.append((at, span))
    if group:
        yield group

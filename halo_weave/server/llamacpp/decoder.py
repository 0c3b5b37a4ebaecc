"""Running batches of tokens through a llama.cpp context, with the attention readout.

One ``llama_batch`` is allocated once and refilled for each decode: every token with its
position and sequence (a decode may write several sequences at once, see
:meth:`.LlamaCache._run_pending`) and whether its logits are wanted.  A decode whose
attention is read may use other thread counts than prefill and plain decoding.  Where
the C filter compiled, a decode run inside :meth:`Decoder.stoppable` stops part way
when :meth:`Decoder.stop` is called (llama.cpp's abort callback, :class:`.filter.Stopper`).
"""

from __future__ import annotations

import numpy as np

from contextlib import contextmanager

from .readout import AttentionReadout, DecodeError, DecodeStopped


class Decoder:
    """Decodes batches in one context (replaced by :meth:`bind` when the cache grows).

    Owns: the ``llama_batch`` (``n_batch`` tokens at most), the thread counts
    (``threads`` for prefill and plain decoding, ``capture_threads`` for a decode whose
    attention is read) and which of them the context has now, ``readout``, and
    ``settled``: no position shift is pending (llama.cpp applies one at the next decode),
    and ``stopper`` (None: a decode always runs to its end).
    """

    def __init__(self, lib, readout: AttentionReadout, n_batch: int, n_vocab: int,
                 threads: tuple[int, int] = (1, 1), stopper=None) -> None:
        self.L = lib.llama
        self.readout = readout
        self.stopper = stopper
        self.n_batch, self.n_vocab = n_batch, n_vocab
        self.threads, self.capture_threads = threads
        self._ctx = None
        self._threads_set: tuple[int, int] | None = None
        self.settled = True
        self._batch = self.L.llama_batch_init(n_batch, 0, 1)

    def bind(self, ctx, n_cells: int, spill) -> None:
        """Decode in ``ctx`` (``n_cells`` cells, states saved by ``spill``) from now on."""
        self._ctx = ctx
        self._threads_set = None
        self.readout.bind(n_cells, spill)
        if self.stopper is not None:
            self.L.llama_set_abort_callback(ctx, self.stopper.callback, self.stopper.data)

    @contextmanager
    def stoppable(self, wanted: bool = True):
        """Decodes run inside may be stopped part way by :meth:`stop` (when ``wanted``
        and a stopper exists).  llama.cpp then drops every cell of each sequence the batch
        writes from the batch's first position in it on: only decodes where that is the
        batch itself belong here (new tokens after the sequence's last)."""
        if not wanted or self.stopper is None:
            yield
            return
        self.stopper.arm()
        try:
            yield
        finally:
            self.stopper.disarm()

    def stop(self) -> None:
        """Stop the decode under way if it runs inside :meth:`stoppable` (any thread)."""
        if self.stopper is not None:
            self.stopper.ask()

    def shift_pending(self) -> None:
        """Positions were moved: llama.cpp shifts the keys at the next decode."""
        self.settled = False

    def cleared(self) -> None:
        """The context was emptied: no shift is pending."""
        self.settled = True

    def run(self, ids: list[int], pos, seq, *, logits: bool, capture: bool = False,
            all_logits: bool = False, hook=None) -> np.ndarray:
        """Run ``ids`` at ``pos..`` in ``seq`` (or at the positions, in the sequences, of
        two sequences, one item per token); returns the cells they were written to.
        ``logits``: for the last token (every token with ``all_logits``); ``capture``: the
        last query's rows into the readout; ``hook``: see :meth:`.LlamaCache.decode`.
        Raises :class:`DecodeError` when llama.cpp refuses the batch or the readout
        failed, :class:`DecodeStopped` when :meth:`stop` stopped it."""
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
            L.llama_set_n_threads(self._ctx, *threads)
            self._threads_set = threads
        readout = self.readout
        readout.start(capture, hook)
        try:
            status = L.llama_decode(self._ctx, batch)
        finally:
            readout.stop()
        readout.collect()
        if status == 2 and self.stopper is not None:
            raise DecodeStopped("the decode was stopped part way")
        if status != 0:
            raise DecodeError(f"llama_decode returned {status}")
        self.settled = True
        cells = readout.cells()
        if len(cells) != n:
            raise DecodeError(f"saw the cells of {len(cells)} of {n} tokens")
        if capture and self.readout.layers_seen < self.readout.n_layer:
            raise DecodeError(f"read attention from {self.readout.layers_seen} of {self.readout.n_layer} layers")
        return cells

    def logits(self, n: int) -> np.ndarray:
        """The logits of the last decode's ``n`` tokens (float32 ``[n, n_vocab]``, a copy)."""
        ptr = self.L.llama_get_logits(self._ctx)
        return np.ctypeslib.as_array(ptr, shape=(n, self.n_vocab)).copy()

    def last_logits(self) -> np.ndarray:
        """The logits of the last decode's last token (float32 ``[n_vocab]``, a copy)."""
        ptr = self.L.llama_get_logits_ith(self._ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()

    def close(self) -> None:
        """Free the batch."""
        if self._batch is not None:
            self.L.llama_batch_free(self._batch)
            self._batch = None

"""Conversations' KV caches saved to disk and read back: the engines' part.

A mixin of :class:`~halo_weave.server.engine_base.EngineBase` (which holds the lock and the
cache, ``kv``, and makes :meth:`~halo_weave.server.engine_base.EngineBase.restore` the
request).  Every request that changes the cache names the conversation it is for
(:meth:`SavedCaches._follow`, under the lock); once the model has been idle a while the
:class:`~halo_weave.server.kv_files.IdleSaver` writes the cache to that conversation's
file (:meth:`SavedCaches.save_state_if_changed`).  Files, their format and their bound:
:mod:`halo_weave.server.kv_files`.  The cache object copies itself out and back
(``export_state`` / ``import_state``: llama.cpp's sequence state, transformers' tensors);
an engine whose cache cannot keeps none, and a restore prefills.

The spans a conversation's prunes put in the span store go to its span file
(:mod:`~halo_weave.server.span_files`) with the cache, and are read back into the store
when a request first names the conversation, so that a resurrection after a restart puts
them back instead of running them (llama.cpp's engine; the transformers engine's stored
spans stay in memory).

A key may name a branch of a conversation: ``KEY#BRANCH`` (:data:`BRANCH_MARK`).  Each
branch's cache has a file of its own, so that switching back to a branch (or reopening the
app on it) reads its cache back instead of running its tail again; the branches of one
conversation share its span file (the text they prune is the conversation's).
"""

from __future__ import annotations

import logging
import time

from .kv_files import IdleSaver, common_prefix
from .span_files import SpanFiles

log = logging.getLogger("halo_weave.server")

#: Seconds a stopping server waits for the request holding the model (told to stop after
#: its current batch) before it saves the cache: within the launcher's grace before SIGKILL
#: (:data:`~halo_weave.server.launcher.STOP_GRACE_S`, 5 s), less uvicorn's own second.
EXIT_WAIT_S = 3.0
#: Separates a conversation's key from the branch it shows: ``KEY#BRANCH``.
BRANCH_MARK = "#"


def span_owner(key: str | None) -> str | None:
    """The conversation whose span file keeps the spans of ``key`` (its branches share one)."""
    return key.split(BRANCH_MARK, 1)[0] if key else key


class SavedCaches:
    """Which conversation the engine's cache holds, whether it changed since it was saved,
    and saving and finding its file (see the module docstring)."""

    def _init_saved_caches(self) -> None:
        #: When a request last started or ended (``time.monotonic``): the idle saver waits for quiet.
        self.last_activity = time.monotonic()
        #: The conversation the cache holds, as the last request named it (None: unnamed).
        self.conversation: str | None = None
        self.state_files = None  # a StateFiles once keep_states() was called
        self.span_files = None  # a SpanFiles in the same folder
        self._spans_read: set[str] = set()  # conversations whose span files were read
        self._saver = None
        self._changes = 0  # requests that changed the cache ...
        self._saved_changes = 0  # ... of which the last one saved had seen this many

    @property
    def keeps_states(self) -> bool:
        """Whether this engine saves conversations' caches to disk and reads them back."""
        return self.state_files is not None and callable(getattr(self.kv, "export_state", None))

    def keep_states(self, files, idle_s: float | None = None) -> None:
        """Save the cache of the conversation the requests name into ``files`` (a
        :class:`~halo_weave.server.kv_files.StateFiles`) once idle, and read it back at
        :meth:`restore` (a no-op for an engine whose cache cannot be copied out)."""
        if not callable(getattr(self.kv, "export_state", None)):
            return
        self.state_files = files
        self.span_files = SpanFiles(files)
        if self._saver is None:
            self._saver = IdleSaver(self) if idle_s is None else IdleSaver(self, idle_s)

    def fingerprint(self) -> str:
        """What a saved cache must have been made with to be read back by this engine."""
        return f"{self.kind}|{self.name}"

    def _follow(self, conversation) -> None:
        """The cache is about to change for ``conversation`` (under the lock): the cache of
        another conversation it held is saved first if it changed since its last save
        (the idle save may not have come yet)."""
        conversation = conversation if isinstance(conversation, str) and conversation else None
        if conversation != self.conversation:
            self._save_locked()
        self.conversation = conversation
        store = self._span_store()
        if store is not None:
            store.owner = span_owner(conversation)
            self._read_spans(store, store.owner)
        self._changes += 1

    def _span_store(self):
        """The cache's span store when its spans can be kept on disk, else None."""
        return self.kv.store if self.keeps_states and getattr(self.kv, "spans_on_disk", False) else None

    def _read_spans(self, store, conversation: str | None) -> None:
        """Put ``conversation``'s saved spans into the store, once per conversation (under the lock)."""
        if conversation is None or conversation in self._spans_read:
            return
        self._spans_read.add(conversation)
        started = time.perf_counter()
        spans = self.span_files.load(conversation, self.fingerprint())
        taken = sum(store.add_saved(s.ids, s.pos, s.blob, len(s.blob), conversation, s.context) for s in spans)
        # (a span's states stay in the file until it is put back: span_files.FileBlob)
        if spans:
            log.info("%d of %d saved spans of the conversation read back (%d tokens) in %.3f s", taken,
                     len(spans), sum(len(s.ids) for s in spans), time.perf_counter() - started)

    def _write_spans(self, key: str, entries) -> None:
        """Append ``entries`` (the store's, not on disk yet) to ``key``'s span file."""
        if entries and self.span_files.append(key, self.fingerprint(),
                                              [(e.ids, e.pos, e.payload, e.context) for e in entries]):
            for entry in entries:  # their payloads are bytes: a span read back is on disk already
                entry.on_disk = True

    def _active(self) -> None:
        """A request starts: the idle saver waits for quiet from now."""
        self.last_activity = time.monotonic()

    def _touched(self) -> None:
        """A request changed the cache: saved once the model has been idle a while."""
        self._active()
        if self._saver is not None:
            self._saver.poke()

    def _holds_saved(self) -> None:
        """The cache holds what its conversation's file holds: nothing to save."""
        self._saved_changes = self._changes

    def save_state_if_changed(self) -> bool:
        """Write the cache to its conversation's file if it changed since the last save
        and the model is free now; whether it was written.  The copy is made under the
        lock (a memory copy), the file written outside it."""
        if not self.keeps_states or self.conversation is None or self._changes == self._saved_changes:
            return False
        if not self._lock.acquire(blocking=False):
            return False
        try:
            key, changes = self.conversation, self._changes
            blob = self.kv.export_state() if key is not None else None
            ids = list(self.kv.ids)
            store = self._span_store()
            spans = store.unsaved(span_owner(key)) if store is not None and key is not None else []
        finally:
            self._lock.release()
        self._write_spans(span_owner(key), spans)
        if blob is None:
            return False
        saved = self.state_files.save(key, self.fingerprint(), ids, blob) is not None
        if saved:
            self._saved_changes = changes
            log.info("KV cache of %d tokens saved for its conversation (%.1f MB)", len(ids), len(blob) / 1e6)
        return saved

    def save_at_exit(self, wait_s: float = EXIT_WAIT_S) -> bool:
        """The server stops: the request holding the model (a read-ahead, a restore's
        prefill, an answer) is told to stop after its current batch, given ``wait_s``
        seconds to let go, and the cache is saved if it changed (what a stopped read-ahead
        or prefill ran stays in it, so the next start reads that back too).  Whether it
        was written."""
        if not self.keeps_states or self.conversation is None:
            return False
        self.abort()
        deadline = time.monotonic() + wait_s
        while self.busy and time.monotonic() < deadline:
            time.sleep(0.02)
        if self.busy:
            log.warning("the model was still busy %.1f s after the server was stopped: its KV cache is not saved "
                        "(reopening reads the last one saved)", wait_s)
        return self.save_state_if_changed()

    def close_states(self) -> None:
        """Stop the idle saver (the engine is being closed)."""
        if self._saver is not None:
            self._saver.stop()
            self._saver = None

    def _saved(self, conversation: str, ids: list[int], held: int):
        """``(SavedState or None, why not)``: the saved cache of ``conversation`` worth
        reading back for ``ids``, the cache holding the first ``held`` of them already."""
        if not self.keeps_states:
            return None, "this server keeps no saved caches"
        saved, reason = self.state_files.load(conversation, self.fingerprint())
        if saved is None:
            return None, reason
        if common_prefix(saved.ids, ids) <= held:
            return None, "the cache holds as much already" if held else "the saved cache holds other tokens"
        return saved, ""

    def _save_locked(self) -> None:
        """Save the cache of the conversation it holds, if changed (the lock is held).
        Never raises: the request that called it goes on (a failed save costs a prefill
        when that conversation is reopened)."""
        if not self.keeps_states or self.conversation is None or self._changes == self._saved_changes:
            return
        try:
            store = self._span_store()
            if store is not None:
                owner = span_owner(self.conversation)
                self._write_spans(owner, store.unsaved(owner))
            blob = self.kv.export_state()
            if blob is not None and self.state_files.save(
                    self.conversation, self.fingerprint(), list(self.kv.ids), blob) is not None:
                self._saved_changes = self._changes
        except Exception:  # noqa: BLE001
            log.exception("saving the KV cache of the conversation left failed")

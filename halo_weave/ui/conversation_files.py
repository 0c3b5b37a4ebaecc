"""Conversation files for the turn controller: open, new, export, import, re-index.

A mixin of :class:`~halo_weave.app.TurnController` (it uses the controller's signals,
store and indexing queue); split out of ``app.py`` by concern.  QtCore only.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QTimer

from ..tools import notebook

log = logging.getLogger("halo_weave.app")

#: Milliseconds after opening a conversation before catch-up indexing starts.
INDEX_CATCH_UP_DELAY_MS = 1500

#: File in the data dir naming the conversation to reopen at start-up.
LAST_CONVERSATION_FILE = "last_conversation"


def _drop(path: Path) -> None:
    """Remove an empty, never-used conversation file (and SQLite's side files)."""
    for suffix in ("", "-wal", "-shm"):
        try:
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        except OSError as exc:
            log.warning("cannot remove the unused conversation %s: %s", path.name, exc)


def _new_index(store, settings, embedder):
    """The semantic index of ``store``'s conversation, loaded (any thread)."""
    from ..semantic_index import SemanticIndex

    # The indexing thread shares the connection: commits go through the store's lock.
    index = SemanticIndex(store.conn, settings, embedder, lock=store.lock)
    index.load()
    return index


class ConversationFiles:
    """Which conversation is open, its semantic index, and moving conversations in and out."""

    def _last_conversation(self) -> Path | None:
        marker = self.data_dir / LAST_CONVERSATION_FILE
        try:
            path = Path(marker.read_text(encoding="utf-8").strip())
        except OSError:
            return None
        return path if path.is_file() else None

    def _remember(self, path: Path) -> None:
        try:
            (self.data_dir / LAST_CONVERSATION_FILE).write_text(str(path), encoding="utf-8")
        except OSError as exc:
            log.warning("cannot remember the last conversation: %s", exc)

    def open_conversation(self, path: Path | None = None) -> bool:
        """Open ``path`` (a new conversation when None); False when it was refused."""
        from ..store import ConversationStore, new_conversation_path

        if self.busy:
            self.info.emit("Wait for the answer to finish (or press Esc) before switching.")
            return False
        target = Path(path) if path else new_conversation_path(self.data_dir)
        old, unused = self.store, self._unused_file()
        try:
            store = ConversationStore.open(target)
            conv = self.session.open(store)
        except Exception as exc:  # noqa: BLE001
            self.error.emit(exc, f"Opening {target.name}")
            if self.conv is None and path is not None:
                return self.open_conversation(None)
            return False
        self._close_store(old)
        if unused is not None and unused != target:
            _drop(unused)  # before the list hears of the switch: it must not list it
        self._prompt_edited = False
        self.path = target
        self._index_tried = False  # the index opens after the first paint (or on first use)
        self._remember(target)
        self.conversation_opened.emit(str(target))
        self.notes_changed.emit()
        self.conversation_changed.emit()
        self.graveyard_changed.emit()
        self.stats_changed.emit()
        template = self.client.template if self.client is not None else None
        if store.refusal is not None:  # damaged: opened read-only, say so and how
            self.error.emit(store.refusal, f"Opening {target.name}")
        elif template is not None and self.model_info is not None and not self.follows_conversation():
            self.connect_server()  # this conversation was framed with another template, or uses another model
        elif self.model_info is not None:
            self._sync_system_prompt()
        # Catch-up indexing waits until the window has painted the conversation.
        QTimer.singleShot(INDEX_CATCH_UP_DELAY_MS, lambda: self._index_pending() if self.conv is conv else None)
        self.warm_up()  # the server reads its context while the user reads it
        if self._painted:
            self.load_memory()
        return True

    def new_conversation(self) -> bool:
        return self.open_conversation(None)

    def _unused_file(self) -> Path | None:
        """The open conversation's file when nothing in it is the user's (no message, no
        graveyard, no notes, no title, the system prompt every new one gets, unchanged
        while it was open): switching away drops it, so empty ones do not pile up."""
        conv, store = self.conv, self.store
        if conv is None or store is None or self.path is None or store.read_only:
            return None
        if conv.turns or conv.next_position or self._prompt_edited:
            return None
        if conv.system_prompt not in ("", self.settings.effective_system_prompt):
            return None
        try:
            if store.get_meta("title") or store.load_tool_data(notebook.NOTES_NAME) is not None:
                return None
        except Exception:  # noqa: BLE001 - when in doubt, keep it
            return None
        return Path(self.path)

    def _close_store(self, store) -> None:
        if store is not None:
            # Jobs still queued for it check `index is self.index` and drop their result.
            try:
                store.close()
            except Exception as exc:  # noqa: BLE001
                log.warning("closing the conversation file failed: %s", exc)
        self._indexer.index = None

    @property
    def index(self):
        """The open conversation's semantic index (loaded after the window's first paint,
        or here on first use; None if unusable or still loading)."""
        session = self.session
        if session.index is None and not self._index_tried and session.store is not None:
            self._index_tried = True
            try:
                session.index = _new_index(session.store, self.settings, self._get_embedder())
            except Exception as exc:  # noqa: BLE001
                self.error.emit(exc, "Loading the semantic index")
        return session.index

    @property
    def memory_loading(self) -> bool:
        """The embedder and the index are being loaded on the embedder thread."""
        return self._memory_loading

    def window_painted(self) -> None:
        """The window has painted the conversation: load what the memory needs now, on
        its thread, so the first message's search does not wait for it."""
        if not self._painted:
            self._painted = True
            self.load_memory()

    def load_memory(self) -> None:
        """Load the embedder (torch and the model: seconds) and the open conversation's
        index on the embedder thread."""
        session = self.session
        store = session.store
        if session.index is not None or self._index_tried or store is None or self._shutting_down:
            return
        self._index_tried, self._memory_loading = True, True
        embedder, settings = self._get_embedder(), self.settings

        def load():
            index = _new_index(store, settings, embedder)
            embedder.load()
            return index

        def loaded(index) -> None:
            self._memory_loading = False
            if session.store is store and session.index is None:
                session.index = index
                if self._reindex_when_loaded:
                    self.reindex_all()
                else:
                    self._index_pending()
            self._reindex_when_loaded = False

        def failed(exc) -> None:
            self._memory_loading = False
            if session.store is store:
                self.error.emit(exc, "Loading the semantic index")

        self._indexer.run(load, on_ok=loaded, on_fail=failed)

    def _get_embedder(self):
        if self._embedder is None:
            if self._embedder_factory is not None:
                self._embedder = self._embedder_factory()
            else:
                from ..memory.embedder import Embedder

                self._embedder = Embedder()
        return self._embedder

    def export_json(self, path: Path) -> bool:
        """Write the open conversation to a JSON file."""
        from ..storage import transfer

        if self.store is None:
            return False
        try:
            transfer.export_conversation(self.store, Path(path))
        except Exception as exc:  # noqa: BLE001
            self.error.emit(exc, "Export")
            return False
        self.info.emit(f"Exported to {path}")
        return True

    def import_json(self, path: Path) -> None:
        """Import a conversation (on a thread), open it, re-index.

        A Halo Weave JSON export, or a chat from another app (a SillyTavern ``.jsonl``, a
        KoboldAI Lite ``.json``: :mod:`halo_weave.storage.foreign_import`), which is
        tokenized with the connected server's tokenizer.
        """
        from ..storage import foreign_import, transfer

        if self.busy:
            self.info.emit("Wait for the answer to finish before importing.")
            return
        if not foreign_import.is_halo_weave_export(Path(path)):
            client, framing = self.client, self.framing
            if client is None or framing is None or self.connection_state != "connected":
                self.error.emit(transfer.TransferError(
                    "Importing a chat from another app needs the model server's tokenizer: "
                    "try again once the model is connected."), f"Importing {Path(path).name}")
                return

            def tokenize(text: str):
                return client.tokenize(text, add_special_tokens=False)

            job = (foreign_import.import_foreign, Path(path), self.data_dir, tokenize, framing, self.settings)
        else:
            from ..server.vocab import vocab_size_for

            model_info = self.model_info  # read here: the import runs on a thread
            job = (lambda: transfer.import_conversation(Path(path), self.data_dir, vocab_size_for(model_info)),)
        self._set_busy(True, "Importing…")
        self.progress.emit("Importing conversation", 0, 0)

        def done(new_path) -> None:
            self.progress.emit("Importing conversation", 1, 1)
            self._set_busy(False)
            if self.open_conversation(Path(new_path)):
                self.reindex_all()

        def failed(exc) -> None:
            self.progress.emit("Importing conversation", 1, 1)
            self._set_busy(False)
            self.error.emit(exc, f"Importing {Path(path).name}")

        self._call(*job, on_ok=done, on_fail=failed)

    def reindex_all(self) -> None:
        """Embed every chunk without a current entry (after an import), with progress."""
        if self._memory_loading:
            self._reindex_when_loaded = True  # once the index has loaded
            return
        self._reindex_when_loaded = False
        index, conv = self.index, self.conv
        if index is None or conv is None or not index.available:
            return
        self._indexer.index = index
        try:
            index.remove(index.orphans(conv))
            pending = index.pending(conv)
        except Exception as exc:  # noqa: BLE001
            self.error.emit(exc, "Re-indexing")
            return
        self._queue_indexing(pending, label="Re-indexing")

    def notes(self) -> dict | None:
        """The open conversation's notes (the model's jq notebook), or None before any."""
        if self.store is None:
            return None
        try:
            return self.store.load_tool_data(notebook.NOTES_NAME)
        except Exception as exc:  # noqa: BLE001
            self.error.emit(exc, "Reading the notes")
            return None

"""Conversation files: open, new, export, import, the one to reopen at start-up.

QtCore only.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QObject, QTimer

from ...tools import notebook
from .calls import Calls
from .gate import Gate
from .memory import Memory
from .link import ServerLink
from .prompt import PromptUpkeep
from .ahead import ReadAhead
from .signals import ControlSignals

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


class ConversationFiles(QObject):
    """Which conversation is open, and moving conversations in and out.

    Owns: :attr:`path` (the open conversation's file) and the marker file naming the
    conversation to reopen at start-up (in the data dir it is given, where new and
    imported conversations go too).  Opening one asks the server link to reconnect
    when the conversation wants another template or model, the system prompt to sync,
    the memory to load and the server to read the context (:meth:`ReadAhead.warm_up
    <.read_ahead.ReadAhead.warm_up>`).
    """

    def __init__(self, data_dir: Path, session, signals: ControlSignals, gate: Gate, calls: Calls,
                 memory: Memory, prompt: PromptUpkeep, link: ServerLink, ahead: ReadAhead,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._data_dir = Path(data_dir)
        self._session, self._signals, self._gate, self._calls = session, signals, gate, calls
        self._memory, self._prompt, self._link, self._ahead = memory, prompt, link, ahead
        self.path: Path | None = None

    def last_conversation(self) -> Path | None:
        """The conversation open when the app last quit (None: none, or its file is gone)."""
        marker = self._data_dir / LAST_CONVERSATION_FILE
        try:
            path = Path(marker.read_text(encoding="utf-8").strip())
        except OSError:
            return None
        return path if path.is_file() else None

    def _remember(self, path: Path) -> None:
        try:
            (self._data_dir / LAST_CONVERSATION_FILE).write_text(str(path), encoding="utf-8")
        except OSError as exc:
            log.warning("cannot remember the last conversation: %s", exc)

    def open_conversation(self, path: Path | None = None) -> bool:
        """Open ``path`` (a new conversation when None); False when it was refused."""
        from ...store import ConversationStore, new_conversation_path

        session, signals = self._session, self._signals
        if self._gate.busy:
            signals.info.emit("Wait for the answer to finish (or press Esc) before switching.")
            return False
        target = Path(path) if path else new_conversation_path(self._data_dir)
        old, unused = session.store, self._unused_file()
        try:
            store = ConversationStore.open(target)
            conv = session.open(store)
        except Exception as exc:  # noqa: BLE001
            signals.error.emit(exc, f"Opening {target.name}")
            if session.conv is None and path is not None:
                return self.open_conversation(None)
            return False
        self._close_store(old)
        if unused is not None and unused != target:
            _drop(unused)  # before the list hears of the switch: it must not list it
        self._prompt.opened()
        self.path = target
        self._memory.opened()  # the index opens after the first paint (or on first use)
        self._remember(target)
        signals.conversation_opened.emit(str(target))
        signals.notes_changed.emit()
        signals.conversation_changed.emit()
        signals.graveyard_changed.emit()
        signals.stats_changed.emit()
        template = session.backend.template if session.backend is not None else None
        if store.refusal is not None:  # damaged: opened read-only, say so and how
            signals.error.emit(store.refusal, f"Opening {target.name}")
        elif template is not None and session.model_info is not None and not self._link.follows_conversation():
            self._link.connect_server()  # this conversation was framed with another template, or uses another model
        elif session.model_info is not None:
            self._prompt.sync()
        # Catch-up indexing waits until the window has painted the conversation.
        memory = self._memory
        QTimer.singleShot(INDEX_CATCH_UP_DELAY_MS, lambda: memory.queue_pending(conv) if session.conv is conv else None)
        self._ahead.warm_up()  # the server reads its context while the user reads it
        memory.load_if_painted()
        return True

    def new_conversation(self) -> bool:
        """Open a new, empty conversation; False when it was refused."""
        return self.open_conversation(None)

    def _unused_file(self) -> Path | None:
        """The open conversation's file when nothing in it is the user's (no message, no
        graveyard, no notes, no title, the system prompt every new one gets, unchanged
        while it was open): switching away drops it, so empty ones do not pile up."""
        conv, store = self._session.conv, self._session.store
        if conv is None or store is None or self.path is None or store.read_only:
            return None
        if conv.turns or conv.next_position or self._prompt.edited:
            return None
        if conv.system.text not in ("", self._session.settings.effective_system_prompt):
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
        self._memory.closed()

    def export_json(self, path: Path) -> bool:
        """Write the open conversation to a JSON file."""
        from ...exchange import transfer

        store = self._session.store
        if store is None:
            return False
        try:
            transfer.export_conversation(store, Path(path))
        except Exception as exc:  # noqa: BLE001
            self._signals.error.emit(exc, "Export")
            return False
        self._signals.info.emit(f"Exported to {path}")
        return True

    def export_markdown(self, path: Path, title: str) -> bool:
        """Write the open conversation to a Markdown file: the branch shown, pruned
        paragraphs marked (:mod:`halo_weave.storage.transfer_markdown`)."""
        from ...storage import transfer_markdown

        session = self._session
        if session.conv is None:
            return False
        try:
            transfer_markdown.export_markdown(session.conv, title, Path(path), session.prompt.own())
        except Exception as exc:  # noqa: BLE001
            self._signals.error.emit(exc, "Export")
            return False
        self._signals.info.emit(f"Exported to {path}")
        return True

    def import_json(self, path: Path) -> None:
        """Import a conversation (on a thread), open it, re-index.

        A Halo Weave JSON export; a chat from another app (a SillyTavern ``.jsonl``, a
        KoboldAI Lite ``.json``: :mod:`halo_weave.exchange.foreign_import`); or a character
        card (a PNG or JSON one: :mod:`halo_weave.exchange.character_card`).  The last two
        are tokenized with the connected server's tokenizer.
        """
        from ...exchange import character_card, foreign_import, transfer

        if foreign_import.is_halo_weave_export(Path(path)):
            from ...server.vocab import vocab_size_for

            model_info = self._session.model_info  # read here: the import runs on a thread
            self._import(path, lambda: transfer.import_conversation(Path(path), self._data_dir,
                                                                    vocab_size_for(model_info)))
        elif character_card.looks_like_card(Path(path)):
            self.import_card(path)
        else:
            self._import_tokenized(path, foreign_import.import_foreign)

    def import_card(self, path: Path) -> None:
        """Import a character card (PNG or JSON) as a new conversation (on a thread) and
        open it: the card's text is its system prompt, its greeting the first answer."""
        from ...exchange import character_card

        self._import_tokenized(path, character_card.import_card)

    def _import_tokenized(self, path: Path, importer) -> None:
        """Run ``importer(path, data_dir, tokenize, framing, settings)`` with the server's tokenizer."""
        from ...exchange import transfer

        session = self._session
        client, framing, settings = session.backend, session.framing, session.settings
        if client is None or framing is None or self._link.state != "connected":
            self._signals.error.emit(transfer.TransferError(
                "Importing a chat or a character card needs the model server's tokenizer: "
                "try again once the model is connected."), f"Importing {Path(path).name}")
            return

        def tokenize(text: str):
            return client.tokenize(text, add_special_tokens=False)

        self._import(path, lambda: importer(Path(path), self._data_dir, tokenize, framing, settings))

    def _import(self, path: Path, job) -> None:
        """Run ``job`` (which writes a new conversation file and returns its path) on a
        thread, then open what it wrote; a failure is shown and changes nothing."""
        signals, gate = self._signals, self._gate
        if gate.busy:
            signals.info.emit("Wait for the answer to finish before importing.")
            return
        gate.set_busy(True, "Importing…")
        signals.progress.emit("Importing conversation", 0, 0)

        def done(new_path) -> None:
            signals.progress.emit("Importing conversation", 1, 1)
            gate.set_busy(False)
            if self.open_conversation(Path(new_path)):
                self._memory.reindex_all()

        def failed(exc) -> None:
            signals.progress.emit("Importing conversation", 1, 1)
            gate.set_busy(False)
            signals.error.emit(exc, f"Importing {Path(path).name}")

        self._calls.run(job, on_ok=done, on_fail=failed)

    def notes(self) -> dict | None:
        """The open conversation's notes (the model's jq notebook), or None before any."""
        store = self._session.store
        if store is None:
            return None
        try:
            return store.load_tool_data(notebook.NOTES_NAME)
        except Exception as exc:  # noqa: BLE001
            self._signals.error.emit(exc, "Reading the notes")
            return None

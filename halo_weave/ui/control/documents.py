"""Attaching a document to the open conversation, off the UI thread, with progress.

The rules are :class:`~halo_weave.session.documents.Documents`' (the session's
``documents`` part); this decides *when* and on which thread: reading and tokenizing a
300-page PDF takes seconds, so both steps run on a :class:`~.workers.CallWorker` while the
input stays closed, the status bar's progress bar counts pages and paragraphs, and the
answer stream (and its per-token repaint) is never waited on: a document is attached
only between turns.  Indexing then runs on the embedder thread with its own progress.
QtCore only.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal

from .calls import Calls
from .gate import Gate
from .memory import Memory
from .signals import ControlSignals


class DocumentAttach(QObject):
    """Attaches files to the open conversation.

    Owns: the name of the file being attached ('' when none).

    Signals: ``attached(Attached)`` once the document is saved (before its indexing
    ends); ``refused(str)`` when nothing was attached, with the reason.
    """

    attached = Signal(object)
    refused = Signal(str)

    def __init__(self, session, signals: ControlSignals, gate: Gate, calls: Calls, memory: Memory,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._session, self._signals, self._gate = session, signals, gate
        self._calls, self._memory = calls, memory
        self._name = ""

    @property
    def attaching(self) -> str:
        """The file being attached ('' when none)."""
        return self._name

    def attach(self, path: str | Path, *, live: bool = False) -> bool:
        """Attach the file at ``path`` (``live``: keep it in the context if it fits);
        False, with the reason said, when it cannot start now."""
        session, gate = self._session, self._gate
        name = Path(path).name
        reason = ""
        if gate.closing:
            reason = "The window is closing."
        elif self._name:
            reason = f"{self._name} is still being attached; wait for it to finish."
        elif gate.busy:
            reason = f"Wait for the answer to finish (or press Esc) before attaching {name}."
        elif session.conv is None or session.store is None:
            reason = "Open a conversation before attaching a document."
        elif session.store.read_only:
            reason = "This conversation is open read-only; nothing can be attached to it."
        if reason:
            self._signals.info.emit(reason)
            self.refused.emit(reason)
            return False
        self._name = name
        gate.set_busy(True, f"Attaching {name}…")
        self._signals.progress.emit(f"Reading {name}", 0, 0)
        progress = self._signals.progress.emit  # from the worker: queued to the window

        def prepare():
            return session.documents.prepare(path, progress)

        self._calls.run(prepare, on_ok=lambda prepared: self._save(prepared, live), on_fail=self._failed)
        return True

    def _save(self, prepared, live: bool) -> None:
        what = f"Saving {self._name} ({prepared.tokens:,} tokens)"
        self._signals.progress.emit(f"Reading {self._name}", 1, 1)
        self._signals.progress.emit(what, 0, 0)

        def save():
            return self._session.documents.attach(prepared, live=live)

        self._calls.run(save, on_ok=lambda done: self._saved(done, what),
                        on_fail=lambda exc: (self._signals.progress.emit(what, 1, 1), self._failed(exc)))

    def _saved(self, attached, what: str) -> None:
        signals = self._signals
        signals.progress.emit(what, 1, 1)
        self._name = ""
        self._gate.set_busy(False)
        for changed in (signals.conversation_changed, signals.graveyard_changed, signals.stats_changed):
            changed.emit()
        self._session.documents.index(attached)
        signals.info.emit(attached.summary())
        self.attached.emit(attached)

    def _failed(self, exc) -> None:
        name, self._name = self._name, ""
        signals = self._signals
        signals.progress.emit(f"Reading {name}", 1, 1)
        self._gate.set_busy(False)
        for changed in (signals.conversation_changed, signals.graveyard_changed, signals.stats_changed):
            changed.emit()
        signals.error.emit(exc, f"Attaching {name}")
        self.refused.emit(str(exc))

"""The one place where errors become messages a user can read.

Every error the app meets (server down, stream cut, embedder missing, database refused,
a bad import file) passes through :func:`describe`, which turns it into a
:class:`UserMessage`: plain words, and whether it is serious enough for a dialog.
:class:`MessageCenter` shows it: always in the status bar, and in a non-modal dialog for
serious ones, so the app keeps running and tests never block on a modal box.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QMainWindow, QMessageBox

from ..errors import (
    AttentionError,
    BackendHTTPError,
    BackendTimeout,
    BackendUnavailable,
    BackendUnusable,
    ConversationError,
    DocumentError,
    EmbedderUnavailable,
    GenerationAborted,
    ProtocolError,
    ServerStartError,
    ServerStopped,
    StoreError,
    StreamInterrupted,
    TransferError,
)
from .control.failures import explain

log = logging.getLogger("halo_weave.ui")

#: How long a status-bar message stays, in milliseconds (0 = until replaced).
INFO_TIMEOUT_MS = 8000


@dataclass(frozen=True)
class UserMessage:
    """What the user reads: a title, the words, and whether it deserves a dialog."""

    title: str
    text: str
    serious: bool = False
    #: More text behind the dialog's "Show Details…" (e.g. a server's last output lines).
    details: str = ""
    #: A file the dialog offers to open ("Open log").
    log_path: str = ""


def _connect_error(exc: BaseException) -> bool:
    """A refused connection, built-in or httpx's (httpx is matched only if already loaded)."""
    httpx = sys.modules.get("httpx")
    return isinstance(exc, ConnectionError) or (httpx is not None and isinstance(exc, httpx.ConnectError))


def _stack_line(line: str) -> bool:
    """A line of a faulthandler or Python stack dump (the details show them all)."""
    text = line.strip()
    return text.startswith(("File \"", "Thread 0x", "Current thread", "Extension modules", "Traceback",
                            "<no Python frame>")) or text.endswith("(most recent call first):")


def stopped_words(exc: ServerStopped) -> str:
    """What the user reads when the bundled server stopped: how, its last lines, what now."""
    lines = [line.strip() for line in exc.tail.splitlines() if line.strip() and not _stack_line(line)][-3:]
    last = ("Its last lines:\n" + "\n".join(line[:160] for line in lines) + "\n\n") if lines else ""
    if exc.restarting:
        what = ("It is being started again; your conversation and your unsent message are safe. "
                "The whole log: Open log, or Help → Open log folder.")
    else:
        what = ("It stopped again within a minute, so it is not restarted. The whole log: Open log, "
                "or Help → Open log folder; Help → Restart the built-in model server tries again.")
    return f"{exc}.\n\n{last}{what}"


def describe(exc: BaseException, context: str = "") -> UserMessage:
    """Turn an exception into words a user understands."""
    detail = str(exc).strip()
    prefix = f"{context}: " if context else ""
    if isinstance(exc, GenerationAborted):
        return UserMessage("Stopped", f"{prefix}Generation stopped; the partial answer was kept.")
    if isinstance(exc, ServerStopped):
        return UserMessage("Built-in model server stopped", stopped_words(exc), serious=True,
                           details=exc.tail, log_path=exc.log_path)
    if isinstance(exc, StreamInterrupted):
        return UserMessage(
            "Answer cut off",
            f"{prefix}The connection to the model server broke in the middle of the answer. "
            "What arrived so far was kept. Check that the server is still running, then send again.",
            serious=True,
        )
    if isinstance(exc, BackendTimeout):
        return UserMessage(
            "Model server not answering",
            f"{prefix}The model server took too long to answer. It may be overloaded or stuck.",
            serious=True,
        )
    if isinstance(exc, BackendUnavailable) or _connect_error(exc):
        return UserMessage(
            "Model server unreachable",
            f"{prefix}Cannot reach the model server. Start it, or set its address in "
            "File → Settings. Your conversation is safe.",
            serious=True,
        )
    if isinstance(exc, BackendUnusable):  # a server answers but lacks something: its sentence says what
        return UserMessage("Model server cannot be used", f"{prefix}{detail}", serious=True)
    if isinstance(exc, (BackendHTTPError, ProtocolError)):
        return UserMessage(
            "Model server error",
            f"{prefix}The model server answered with an error: {detail}",
            serious=True,
        )
    if isinstance(exc, EmbedderUnavailable):
        return UserMessage(
            "Semantic memory unavailable",
            f"{prefix}The embedding model could not be loaded, so pruned chunks will not come "
            f"back on their own (the graveyard still works). {detail}",
            serious=True,
        )
    explained = explain(exc, message_kept="your message" in context.lower())
    if explained is not None:
        return UserMessage(explained.title, f"{prefix}{explained.text}", serious=True)
    if isinstance(exc, StoreError):
        return UserMessage("Conversation file problem", f"{prefix}{detail}", serious=True)
    if isinstance(exc, TransferError):
        return UserMessage("Import/export failed", f"{prefix}{detail}", serious=True)
    if isinstance(exc, DocumentError):
        return UserMessage("Document not attached",
                           f"{prefix}{detail} The conversation is unchanged.", serious=True)
    if isinstance(exc, ServerStartError):
        return UserMessage(
            "Built-in model server did not start",
            f"{prefix}{detail}. You can point the app at another server in File → Settings.",
            serious=True,
        )
    if isinstance(exc, ConversationError):
        return UserMessage("Not possible", f"{prefix}{detail}")
    if isinstance(exc, AttentionError):
        return UserMessage("Attention skipped", f"{prefix}An attention payload was unusable: {detail}")
    log.exception("unexpected error", exc_info=exc)
    return UserMessage(
        "Unexpected error", f"{prefix}{type(exc).__name__}: {detail}", serious=True
    )


def open_path(path: str) -> bool:
    """Open a file or folder with the desktop's own application."""
    from PySide6.QtCore import QUrl
    from PySide6.QtGui import QDesktopServices

    return QDesktopServices.openUrl(QUrl.fromLocalFile(path))


class MessageCenter(QObject):
    """Shows messages in a window's status bar, and serious ones in a dialog."""

    shown = Signal(object)  # UserMessage, for tests and logging

    def __init__(self, window: QMainWindow) -> None:
        super().__init__(window)
        self._window = window
        self._dialog: QMessageBox | None = None
        self.history: list[UserMessage] = []

    def info(self, text: str, timeout_ms: int = INFO_TIMEOUT_MS) -> None:
        """A passing note in the status bar."""
        self._window.statusBar().showMessage(text, timeout_ms)
        self._record(UserMessage("", text))

    def error(self, exc: BaseException, context: str = "") -> UserMessage:
        """Show an exception in words; serious ones also open a (non-modal) dialog."""
        return self.show(describe(exc, context))

    def show(self, message: UserMessage) -> UserMessage:
        self._window.statusBar().showMessage(message.text, 0 if message.serious else INFO_TIMEOUT_MS)
        if message.serious:
            self._open_dialog(message)
        self._record(message)
        return message

    def _record(self, message: UserMessage) -> None:
        self.history.append(message)
        del self.history[:-50]
        self.shown.emit(message)

    def _open_dialog(self, message: UserMessage) -> None:
        if self._dialog is not None:
            self._dialog.close()
        box = QMessageBox(QMessageBox.Icon.Warning, message.title, message.text,
                          QMessageBox.StandardButton.Ok, self._window)
        if message.details:
            box.setDetailedText(message.details)
        if message.log_path:
            button = box.addButton("Open log", QMessageBox.ButtonRole.ActionRole)
            # An action button would close the box: keep it open, show the file.
            button.clicked.disconnect()
            button.clicked.connect(lambda: open_path(message.log_path))
        box.setModal(False)
        box.show()
        self._dialog = box

    @property
    def dialog(self) -> QMessageBox | None:
        """The error dialog currently open, if any."""
        return self._dialog if self._dialog is not None and self._dialog.isVisible() else None

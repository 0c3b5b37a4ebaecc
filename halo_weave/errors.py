"""Every error Halo Weave raises on purpose, in one tree.  ``str(error)`` is for the user.

Callers match these by type (``except StoreError``), never by class name: a name such as
``ProtocolError`` is also httpx's.  Qt-free, imports nothing from the package.

::

    HaloError
    ├── ConversationError         an operation that would break the conversation's invariants
    ├── AttentionError            an attention payload that cannot be used (brightness untouched)
    ├── BackendError              the model server (kobold_client and the backends)
    │   ├── BackendUnavailable    nothing answers at the URL (refused, unknown host, reset)
    │   ├── BackendTimeout        connecting, or a short call, took too long
    │   ├── BackendHTTPError      the server answered 4xx/5xx: .status, .message (its words)
    │   ├── BackendUnusable       a server answers but lacks what the app needs (the sentence says what)
    │   │   └── BackendAuthError  it wants an API key, or refused the one given
    │   └── PartialError          a stream that ended early; .partial_text, .tokens
    │       ├── ProtocolError     the answer breaks the protocol (not SSE, bad JSON, types)
    │       ├── StreamInterrupted the stream broke before its done event
    │       └── GenerationAborted aborted, on a stream opened with raise_on_abort=True
    ├── ServerStartError          the bundled server exited or stayed silent before it was ready
    ├── ServerStopped             the bundled server exited after it was ready (how, last lines)
    ├── StoreError                anything the conversation file cannot do
    │   ├── StoreMissing          open(create=False) on a path with no file
    │   ├── StoreDamaged          damaged rows found (checksums): open read-only, saving refused
    │   ├── StoreJournalLost      the file or its -wal vanished while open: saving stopped
    │   └── StoreRefused          the file is left untouched, byte for byte
    │       ├── StoreCorrupt      not SQLite, or PRAGMA integrity_check fails
    │       ├── StoreForeign      an SQLite file that is not a Halo Weave conversation
    │       └── StoreTooNew       written by a newer Halo Weave (unknown migration)
    ├── TransferError             an export or import that cannot be done
    ├── PresetError               a preset that cannot be saved, or the presets file it would overwrite
    ├── DocumentError             a file that cannot be attached (unreadable, empty, too big)
    ├── CaptureError              a recorder used out of order, an unreadable capture folder
    ├── EmbedderUnavailable       the embedding model could not be loaded (semantic search off)
    ├── SnapshotInvalid           a vector snapshot that is missing, truncated or foreign
    └── ToolError                 a tool command that cannot run (shown to the model)

The model server's own errors (``halo_weave.server.errors``: a bad request, a busy engine)
stay in that program: the app meets them only as HTTP answers (``BackendHTTPError``).
The jq sandbox's ``SandboxError`` (:mod:`halo_weave.tools.jq_sandbox`) is not here: that
module also runs as an isolated script (``python -I``) and imports nothing from the package;
the notes tool turns it into a :class:`ToolError`-style message for the model.

Each class keeps the built-in base it had before the tree existed (``ValueError``,
``RuntimeError``) so that ``except ValueError`` around a parser still catches it.
"""

from __future__ import annotations

from typing import Any, Sequence


class HaloError(Exception):
    """Base of every error Halo Weave raises on purpose."""


class ConversationError(HaloError, ValueError):
    """An operation that would break the conversation's invariants."""


class AttentionError(HaloError, ValueError):
    """An attention payload that cannot be used; brightness must not be touched."""


# ---------------------------------------------------------------- model server


class BackendError(HaloError):
    """Base of every error a model-server client raises."""


class BackendUnavailable(BackendError):
    """No server answers at the configured URL."""


class BackendTimeout(BackendError):
    """Connecting, or a short request, took too long."""


class BackendHTTPError(BackendError):
    """The server answered with an error status; ``message`` is its own explanation."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


class BackendUnusable(BackendError):
    """A server answers at the URL but lacks something the app needs; the message says what."""


class BackendAuthError(BackendUnusable):
    """The server wants an API key (none given, or the one given was refused)."""


class PartialError(BackendError):
    """A stream that ended early: what arrived is kept (``partial_text``, ``tokens``)."""

    def __init__(self, message: str, partial_text: str = "", tokens: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self.partial_text = partial_text
        self.tokens = list(tokens)


class ProtocolError(PartialError):
    """The server's answer does not follow the protocol."""


class StreamInterrupted(PartialError):
    """The stream ended before its done event; what arrived is kept."""


class GenerationAborted(PartialError):
    """The generation was aborted (only with ``raise_on_abort=True``)."""


class ServerStartError(HaloError, RuntimeError):
    """The bundled server exited or stayed silent before printing its ready line."""


class ServerStopped(HaloError, RuntimeError):
    """The bundled server exited after it was ready.

    ``how`` says how (``signal 11``, ``exit status 1``), ``tail`` holds its last output
    lines, ``restarting`` whether it is being started again, ``log_path`` the file with
    its whole output.
    """

    def __init__(self, how: str, tail: str = "", *, restarting: bool = False, log_path: str = "") -> None:
        self.how, self.tail, self.restarting, self.log_path = how, tail, restarting, log_path
        super().__init__(f"The built-in model server stopped ({how})")


# ---------------------------------------------------------------- files


class StoreError(HaloError):
    """Something the store cannot do; ``str(error)`` is meant for the user."""


class StoreMissing(StoreError):
    """There is no conversation file at the given path."""


class StoreDamaged(StoreError):
    """The file holds damaged rows (:mod:`halo_weave.storage.integrity`): it is open
    read-only and saving is refused."""


class StoreJournalLost(StoreError):
    """The file or its ``-wal`` was deleted or replaced while open
    (:mod:`halo_weave.storage.wal_guard`): saving stopped."""


class StoreRefused(StoreError):
    """A file the store will not open; it is left exactly as it was."""


class StoreCorrupt(StoreRefused):
    """Not an SQLite database, or one that fails ``PRAGMA integrity_check``."""


class StoreForeign(StoreRefused):
    """An SQLite database that is not a Halo Weave conversation."""


class StoreTooNew(StoreRefused):
    """A conversation written by a newer version of Halo Weave."""


class TransferError(HaloError, ValueError):
    """An export or import that cannot be done; ``str(error)`` is meant for the user."""


class PresetError(HaloError, ValueError):
    """A preset that cannot be saved or deleted; ``str(error)`` is meant for the user."""


class DocumentError(HaloError, ValueError):
    """A file that cannot be attached as a document; the text names the file and why."""


class CaptureError(HaloError, RuntimeError):
    """A recorder used out of order, or a capture folder that cannot be read."""


# ---------------------------------------------------------------- memory and tools


class EmbedderUnavailable(HaloError, RuntimeError):
    """The embedding model could not be loaded; semantic resurrection is off."""


class SnapshotInvalid(HaloError, ValueError):
    """A snapshot file that is missing, truncated or not a snapshot."""


class ToolError(HaloError, ValueError):
    """A tool command that cannot run; ``str()`` is shown to the model after ❌."""

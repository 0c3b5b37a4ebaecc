"""A conversation's KV cache on disk: saved while the server is idle, restored on reopening.

Reopening a conversation of 6,000 tokens costs a prefill of all of them before the first
answer token (tens of seconds on two cores); reading its sequence state back from a file
costs a fraction of a second.  The app names the conversation the cache belongs to
(``conversation`` in a generate, prepare or restore request); once the model has been idle
for :data:`IDLE_SAVE_S` after a request that changed the cache, :class:`IdleSaver` copies
the live sequence out (under the engine's lock, a memory copy) and writes it here (outside
the lock).  ``POST /api/extra/restore`` reads it back (:meth:`StateFiles.load`).

A file is one conversation's last saved cache::

    MAGIC | header length (uint32) | header JSON | token ids (int32) | engine blob

The header holds the model's fingerprint (the engine's :meth:`fingerprint`: the model
file, its size and time, the layout of its cache) and the number of ids.  A file whose
fingerprint differs, or that is cut short, is not used: the caller prefills instead.
Files are written to a temporary name and renamed, so a crash leaves the old file or the
new one, never half of one.  The directory is bounded in bytes (:data:`DEFAULT_DISK_BYTES`,
``--kv-disk-mb``); the least recently written file goes first.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger("halo_weave.server")

MAGIC = b"HWKV1\n"
SUFFIX = ".kvstate"
#: Span files (:mod:`.span_files`) share the folder and its bound.
SPANS_SUFFIX = ".kvspans"
#: Seconds without a request before a changed cache is written out.
IDLE_SAVE_S = 1.5
#: Default bound on the directory (SmolLM2-135M: ~23 KB per token, ~90k tokens).
DEFAULT_DISK_BYTES = 2 << 30
#: Longest conversation key accepted (the app sends a UUID).
MAX_KEY_CHARS = 200


@dataclass
class SavedState:
    """A conversation's cache as read from its file."""

    ids: list[int]
    blob: bytes


def file_name(key: str) -> str:
    """The file of conversation ``key`` (any string: hashed, never a path)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32] + SUFFIX


class StateFiles:
    """The directory of saved caches, one file per conversation (see the module docstring)."""

    def __init__(self, folder: Path, max_bytes: int = DEFAULT_DISK_BYTES) -> None:
        self.folder = Path(folder)
        self.max_bytes = max_bytes

    def path(self, key: str) -> Path:
        return self.folder / file_name(key)

    def save(self, key: str, fingerprint: str, ids: list[int], blob: bytes) -> Path | None:
        """Write conversation ``key``'s cache; None when the bound or the disk refuses."""
        size = len(MAGIC) + len(blob) + 4 * len(ids) + 512
        if self.max_bytes <= 0 or size > self.max_bytes:
            return None
        header = json.dumps({"key": key, "fingerprint": fingerprint, "n_ids": len(ids),
                             "blob_bytes": len(blob), "saved_at": time.time()}).encode()
        target = self.path(key)
        temporary = target.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.make_room(size, keep=target)
            with open(temporary, "wb") as out:
                out.write(MAGIC)
                out.write(struct.pack("<I", len(header)))
                out.write(header)
                out.write(np.asarray(ids, dtype="<i4").tobytes())
                out.write(blob)
            os.replace(temporary, target)
        except OSError as exc:
            log.warning("cannot save the KV cache of a conversation: %s", exc)
            temporary.unlink(missing_ok=True)
            return None
        return target

    def load(self, key: str, fingerprint: str) -> tuple[SavedState | None, str]:
        """Conversation ``key``'s saved cache, or None and why not."""
        path = self.path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None, "no saved cache"
        except OSError as exc:
            return None, f"cannot read the saved cache: {exc}"
        at = len(MAGIC) + 4
        if len(data) < at or not data.startswith(MAGIC):
            return None, "not a saved cache"
        (length,) = struct.unpack_from("<I", data, len(MAGIC))
        try:
            header = json.loads(data[at:at + length])
        except ValueError:
            return None, "damaged saved cache"
        if header.get("key") != key:
            return None, "saved for another conversation"
        if header.get("fingerprint") != fingerprint:
            return None, "saved with another model"
        n_ids, blob_bytes = header.get("n_ids"), header.get("blob_bytes")
        start = at + length
        if not isinstance(n_ids, int) or not isinstance(blob_bytes, int) \
                or len(data) != start + 4 * n_ids + blob_bytes:
            return None, "damaged saved cache"
        ids = np.frombuffer(data, dtype="<i4", count=n_ids, offset=start).tolist()
        return SavedState(ids, data[start + 4 * n_ids:]), ""

    def make_room(self, size: int, keep: Path) -> None:
        """Delete the least recently written files (saved caches and span files,
        :mod:`.span_files`) until ``size`` more bytes fit in the bound; ``keep`` (the file
        being written) counts as its new size, not its old one."""
        files = sorted((p for pattern in ("*" + SUFFIX, "*" + SPANS_SUFFIX) for p in self.folder.glob(pattern)
                        if p != keep), key=lambda p: p.stat().st_mtime)
        total = sum(p.stat().st_size for p in files) + size
        if keep.suffix == SPANS_SUFFIX and keep.exists():
            total += keep.stat().st_size  # a span file grows: its records so far stay
        for old in files:
            if total <= self.max_bytes:
                break
            total -= old.stat().st_size
            old.unlink(missing_ok=True)


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading ids ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if len(diff) else n


class IdleSaver:
    """Writes the engine's cache to its conversation's file once the model is idle.

    ``engine`` offers ``save_state_if_changed()`` (the copy under its lock, see
    :meth:`~halo_weave.server.engine_base.EngineBase.save_state_if_changed`) and
    ``last_activity`` (a monotonic time).  One daemon thread; :meth:`poke` after a request.
    """

    def __init__(self, engine, idle_s: float = IDLE_SAVE_S) -> None:
        self.engine = engine
        self.idle_s = idle_s
        self.saves = 0
        self._wake = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="kv-saver", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """A request changed the cache: save it once the model has been idle a while."""
        self._wake.set()

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()

    def _loop(self) -> None:
        while not self._stopped:
            self._wake.wait()
            self._wake.clear()
            while not self._stopped:
                quiet = time.monotonic() - self.engine.last_activity
                if quiet < self.idle_s or self.engine.busy:
                    time.sleep(max(0.05, self.idle_s - quiet))
                    continue
                try:
                    if self.engine.save_state_if_changed():
                        self.saves += 1
                except Exception:  # noqa: BLE001 - a failed save costs a prefill later, nothing now
                    log.exception("saving the KV cache failed")
                break

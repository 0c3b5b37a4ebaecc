"""A conversation's pruned spans on disk, so that resurrecting them after a restart runs nothing.

The span store (:mod:`.span_store`) keeps a pruned span's states in host memory; a server
restart empties it, and the first message after reopening a conversation then ran every
token it brought back (thousands on a long chat: most of the reopening's wait).  So the
spans a conversation's prunes stored are also appended to that conversation's span file,
next to its saved cache (:mod:`.kv_files`), when the cache is saved; restoring the
conversation reads them back into the store.

A file is::

    MAGIC | header length (uint32) | header JSON (key, fingerprint) | record | record | ...

    record: ids count, position, blob bytes (3 x uint32) | context (16 bytes) | token ids (int32) | blob

The context is the span's :func:`~.span_store.context_digest` (all zero: unknown), so
that a span read back is put back only where it was kept (:data:`~.span_store.SAME_CONTEXT`).
A file of the first layout (no context) is started anew.

Records are only appended (a span's states never change once stored).  A file whose
fingerprint differs is started anew; a record cut short by a crash ends the file (it is
cut there before the next append).  The file counts towards the saved caches' bound on
disk (:meth:`.StateFiles.make_room`).  Only blobs (llama.cpp's sequence states) are kept:
an engine whose stored spans are tensors (transformers) keeps them in memory only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .kv_files import SPANS_SUFFIX as SUFFIX
from .span_store import DIGEST_BYTES

log = logging.getLogger("halo_weave.server")

MAGIC = b"HWSP2\n"
_RECORD = struct.Struct("<III")
_NO_CONTEXT = bytes(DIGEST_BYTES)


@dataclass
class SavedSpan:
    """A span read back: ``ids`` whose keys were rotated for positions ``pos..``, kept
    in ``context`` (None: unknown)."""

    ids: list[int]
    pos: int
    blob: bytes
    context: bytes | None = None


def file_name(key: str) -> str:
    """The span file of conversation ``key`` (hashed, never a path)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32] + SUFFIX


class SpanFiles:
    """Span files in the saved caches' folder (``files``, a :class:`.StateFiles`)."""

    def __init__(self, files) -> None:
        self.files = files

    def path(self, key: str) -> Path:
        return self.files.folder / file_name(key)

    def append(self, key: str, fingerprint: str,
               spans: list[tuple[tuple[int, ...], int, bytes, bytes | None]]) -> bool:
        """Add ``(ids, pos, blob, context)`` spans to ``key``'s file; False when the disk
        or the bound refuses (the spans then live in memory only)."""
        records = []
        for ids, pos, blob, context in spans:
            records += [_RECORD.pack(len(ids), pos, len(blob)), context or _NO_CONTEXT,
                        np.asarray(ids, dtype="<i4").tobytes(), blob]
        size = sum(len(r) for r in records)
        if not records or size > self.files.max_bytes:
            return False
        path = self.path(key)
        try:
            self.files.folder.mkdir(parents=True, exist_ok=True)
            self.files.make_room(size, keep=path)
            end = self._valid_end(path, key, fingerprint)
            with open(path, "r+b" if end else "wb") as out:
                if end:
                    out.truncate(end)
                    out.seek(end)
                else:
                    header = json.dumps({"key": key, "fingerprint": fingerprint}).encode()
                    out.write(MAGIC + struct.pack("<I", len(header)) + header)
                for record in records:
                    out.write(record)
        except OSError as exc:
            log.warning("cannot save a conversation's pruned spans: %s", exc)
            return False
        return True

    def load(self, key: str, fingerprint: str) -> list[SavedSpan]:
        """``key``'s spans (none when there is no file, or one of another model)."""
        try:
            data = self.path(key).read_bytes()
        except OSError:
            return []
        at = _header_end(data, key, fingerprint)
        spans = []
        while at:
            record = _record_at(data, at)
            if record is None:
                break
            span, at = record
            spans.append(span)
        return spans

    def _valid_end(self, path: Path, key: str, fingerprint: str) -> int:
        """Where the file's last whole record ends (0: no usable file, start anew)."""
        try:
            data = path.read_bytes()
        except OSError:
            return 0
        at = end = _header_end(data, key, fingerprint)
        while at:
            record = _record_at(data, at)
            if record is None:
                break
            end = at = record[1]
        return end


def _header_end(data: bytes, key: str, fingerprint: str) -> int:
    """Where the records start, or 0 when the header is not this conversation's with this model."""
    at = len(MAGIC) + 4
    if len(data) < at or not data.startswith(MAGIC):
        return 0
    (length,) = struct.unpack_from("<I", data, len(MAGIC))
    try:
        header = json.loads(data[at:at + length])
    except ValueError:
        return 0
    if not isinstance(header, dict) or header.get("key") != key or header.get("fingerprint") != fingerprint:
        return 0
    return at + length


def _record_at(data: bytes, at: int) -> tuple[SavedSpan, int] | None:
    """The record at ``at`` and where the next one starts, or None when it is cut short."""
    if len(data) < at + _RECORD.size:
        return None
    n_ids, pos, n_bytes = _RECORD.unpack_from(data, at)
    context_at = at + _RECORD.size
    start = context_at + DIGEST_BYTES
    end = start + 4 * n_ids + n_bytes
    if n_ids == 0 or len(data) < end:
        return None
    ids = np.frombuffer(data, dtype="<i4", count=n_ids, offset=start).tolist()
    context = data[context_at:start]
    return SavedSpan(ids, pos, data[start + 4 * n_ids:end], None if context == _NO_CONTEXT else context), end

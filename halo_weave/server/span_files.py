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

Reading a file back reads only each record's head and token ids: a span's states (a
megabyte for a paragraph-sized span of a small model, hundreds in a long chat's file)
are read from the file when the span is put back (:class:`FileBlob`), so reopening a
conversation waits for none of them.

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
import os
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
#: A header is read in one piece of at most this (a key and a fingerprint).
HEADER_READ = 1 << 16


@dataclass(frozen=True)
class FileBlob:
    """A span's states where they lie in its span file, read when the span is put back.
    The record there is checked to be the span's still (its head and ids), so a file
    replaced or cut since gives no states rather than another span's."""

    path: Path
    at: int  # where the record starts
    head: bytes  # the record's head, context and token ids, as read
    size: int  # the states' bytes, after ``head``

    def __len__(self) -> int:
        return self.size

    def read(self) -> bytes | None:
        """The states, or None when the file no longer holds this record."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.at)
                data = f.read(len(self.head) + self.size)
        except OSError:
            return None
        if len(data) != len(self.head) + self.size or not data.startswith(self.head):
            return None
        return data[len(self.head):]


def states_of(payload) -> bytes | None:
    """A stored span's states as bytes: ``payload`` itself, or read from its file (None:
    the file no longer holds them)."""
    return payload.read() if isinstance(payload, FileBlob) else payload


@dataclass
class SavedSpan:
    """A span read back: ``ids`` whose keys were rotated for positions ``pos..``, kept
    in ``context`` (None: unknown); ``blob``: its states, still in the file."""

    ids: list[int]
    pos: int
    blob: FileBlob
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
        return self._scan(self.path(key), key, fingerprint)[0]

    def _valid_end(self, path: Path, key: str, fingerprint: str) -> int:
        """Where the file's last whole record ends (0: no usable file, start anew)."""
        return self._scan(path, key, fingerprint)[1]

    @staticmethod
    def _scan(path: Path, key: str, fingerprint: str) -> tuple[list[SavedSpan], int]:
        """The file's whole records (their states left in it) and where the last ends
        (0: no usable file)."""
        try:
            f = open(path, "rb")
        except OSError:
            return [], 0
        spans: list[SavedSpan] = []
        end = 0
        with f:
            try:
                size = os.fstat(f.fileno()).st_size
                end = at = _header_end(f.read(HEADER_READ), key, fingerprint)
                while at:
                    f.seek(at)
                    record = _record_head(f.read(_RECORD.size + DIGEST_BYTES), size - at)
                    if record is None:
                        break
                    n_ids, pos, n_bytes, context = record
                    ids = f.read(4 * n_ids)
                    head = _RECORD.pack(n_ids, pos, n_bytes) + (context or _NO_CONTEXT) + ids
                    spans.append(SavedSpan(np.frombuffer(ids, dtype="<i4").tolist(), pos,
                                           FileBlob(path, at, head, n_bytes), context))
                    end = at = at + len(head) + n_bytes
            except OSError as exc:
                log.warning("cannot read a conversation's pruned spans: %s", exc)
        return spans, end


def _header_end(data: bytes, key: str, fingerprint: str) -> int:
    """Where the records start, or 0 when the header is not this conversation's with this model."""
    at = len(MAGIC) + 4
    if len(data) < at or not data.startswith(MAGIC):
        return 0
    (length,) = struct.unpack_from("<I", data, len(MAGIC))
    if len(data) < at + length:
        return 0
    try:
        header = json.loads(data[at:at + length])
    except ValueError:
        return 0
    if not isinstance(header, dict) or header.get("key") != key or header.get("fingerprint") != fingerprint:
        return 0
    return at + length


def _record_head(data: bytes, left: int) -> tuple[int, int, int, bytes | None] | None:
    """A record's ids count, position, states' bytes and context from its first bytes
    (``data``), or None when the ``left`` bytes of the file from it cut it short."""
    if len(data) < _RECORD.size + DIGEST_BYTES:
        return None
    n_ids, pos, n_bytes = _RECORD.unpack_from(data, 0)
    if n_ids == 0 or left < _RECORD.size + DIGEST_BYTES + 4 * n_ids + n_bytes:
        return None
    context = data[_RECORD.size:_RECORD.size + DIGEST_BYTES]
    return n_ids, pos, n_bytes, None if context == _NO_CONTEXT else context

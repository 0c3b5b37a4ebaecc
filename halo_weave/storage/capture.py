"""Record attention to disk while the model generates, for offline analysis.

An :class:`AttentionRecorder` streams every token event of one generation into its own
folder (format: ``docs/capture-format.md``)::

    captures/20250101-120000-0001/
        meta.json        written by start(): the caller's generation metadata
        index.jsonl      one JSON line per token: id, text, time, offsets, shapes
        attention.f32    raw little-endian float32, one block per token, appended
        positions.i64    absolute position of each context row, appended per token
        brightness.i32   brightness of those rows after the token's vote, appended
        chunks.i32       chunk id of those rows (when given), appended
        stats.json       written by finish()

Every array is written before :meth:`AttentionRecorder.record` returns and nothing is
kept, so a generation's tensors are never held in memory (per-layer attention of a
30-layer, 9-head model at 2k context is 2 MB a token).  :func:`load_capture` reads a
folder back lazily (memory-mapped) as :class:`CaptureRecord` objects.

Qt-free; the controller owns when to record (see :func:`chunk_snapshot` and
:func:`generation_meta` for what to put in the metadata).  What pruning would take next
as of a record: :func:`~.prune_forecast.prune_forecast` (importable from here too).
"""

from __future__ import annotations

import io
import itertools
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from .. import settings as settings_module
from ..errors import CaptureError
from .prune_forecast import prune_forecast  # noqa: F401 - importable from here too

FORMAT_VERSION = 1

#: Raw files of a capture: name -> little-endian dtype.
ARRAY_FILES = {
    "attention": ("attention.f32", "<f4"),
    "positions": ("positions.i64", "<i8"),
    "brightness": ("brightness.i32", "<i4"),
    "chunks": ("chunks.i32", "<i4"),
}

_counter = itertools.count(1)


def default_capture_dir() -> Path:
    """``<data_dir>/captures``: where recordings go unless told otherwise."""
    return settings_module.data_dir() / "captures"


class AttentionRecorder:
    """Streams one generation at a time to a new folder under ``capture_dir``."""

    def __init__(self, capture_dir: str | Path | None = None) -> None:
        self.capture_dir = Path(capture_dir) if capture_dir is not None else default_capture_dir()
        self.path: Path | None = None
        self.tokens = 0
        self._files: dict[str, io.FileIO] = {}
        self._index: io.TextIOWrapper | None = None
        self._offsets = {"attention": 0, "context": 0}
        self._t0 = 0.0

    @property
    def recording(self) -> bool:
        return self._index is not None

    def start(self, generation_meta: dict | None = None) -> Path:
        """Open a new capture folder and write ``meta.json``; returns the folder."""
        if self.recording:
            raise CaptureError("a capture is already being recorded; finish() it first")
        self.capture_dir.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        while True:
            path = self.capture_dir / f"{stamp}-{next(_counter):04d}"
            try:
                path.mkdir()
                break
            except FileExistsError:
                continue
        meta = {
            "format_version": FORMAT_VERSION,
            "started_at": time.time(),
            "generation": generation_meta or {},
        }
        (path / "meta.json").write_text(json.dumps(meta, ensure_ascii=False, indent=1), "utf-8")
        # Unbuffered binary files: each block goes straight to the OS, no copy kept here.
        self._files = {key: open(path / name, "ab", buffering=0) for key, (name, _) in ARRAY_FILES.items()}
        self._index = open(path / "index.jsonl", "a", encoding="utf-8")
        self._offsets = {"attention": 0, "context": 0}
        self.path, self.tokens, self._t0 = path, 0, time.perf_counter()
        return path

    def record(
        self,
        token_id: int,
        text: str,
        position_map: np.ndarray,
        raw_attention: np.ndarray | None,
        brightness_after: np.ndarray,
        *,
        chunk_ids: np.ndarray | None = None,
    ) -> None:
        """Append one token event.

        ``position_map`` (int64) and ``brightness_after`` (int32) describe the same
        context rows (e.g. ``conversation.table.position`` / ``.brightness`` right after
        the vote); ``chunk_ids`` (int32), when given, too.  ``raw_attention`` is the
        payload as decoded (``[layers, heads, ctx]`` or ``[ctx]``, float32) or None when
        the token carried none; its ``ctx`` cells are the system prompt followed by the
        rows.  Views are fine: everything is written before this returns.
        """
        if not self.recording:
            raise CaptureError("record() before start()")
        positions = np.ascontiguousarray(position_map, dtype="<i8")
        brightness = np.ascontiguousarray(brightness_after, dtype="<i4")
        if brightness.shape != positions.shape:
            raise CaptureError(f"{brightness.size} brightness values for {positions.size} positions")
        entry = {
            "i": self.tokens,
            "t": round(time.perf_counter() - self._t0, 6),
            "token_id": int(token_id),
            "text": text,
            "context": {"offset": self._offsets["context"], "count": int(positions.size)},
        }
        self._files["positions"].write(memoryview(positions))
        self._files["brightness"].write(memoryview(brightness))
        if chunk_ids is not None:
            chunks = np.ascontiguousarray(chunk_ids, dtype="<i4")
            if chunks.shape != positions.shape:
                raise CaptureError(f"{chunks.size} chunk ids for {positions.size} positions")
            self._files["chunks"].write(memoryview(chunks))
            entry["chunks"] = True
        self._offsets["context"] += int(positions.size)
        if raw_attention is not None:
            attention = np.ascontiguousarray(raw_attention, dtype="<f4")
            self._files["attention"].write(memoryview(attention).cast("B"))
            entry["attention"] = {"offset": self._offsets["attention"], "shape": list(attention.shape)}
            self._offsets["attention"] += int(attention.size)
        self._index.write(json.dumps(entry, ensure_ascii=False) + "\n")
        self._index.flush()
        self.tokens += 1

    def finish(self, stats: dict | None = None) -> Path:
        """Close the capture and write ``stats.json``; returns the folder."""
        if not self.recording:
            raise CaptureError("finish() without start()")
        path = self.path
        self._close()
        summary = {
            "finished_at": time.time(),
            "tokens": self.tokens,
            "seconds": round(time.perf_counter() - self._t0, 6),
            "bytes": sum(p.stat().st_size for p in path.iterdir()),
            **(stats or {}),
        }
        (path / "stats.json").write_text(json.dumps(summary, ensure_ascii=False, indent=1), "utf-8")
        return path

    def _close(self) -> None:
        for f in self._files.values():
            f.close()
        if self._index is not None:
            self._index.close()
        self._files, self._index = {}, None

    def __enter__(self) -> "AttentionRecorder":
        return self

    def __exit__(self, *exc) -> None:
        if self.recording:
            self.finish({"aborted": exc[0] is not None})


class RoundCapture:
    """What "Record attention" keeps: one :class:`AttentionRecorder` (re-made when the
    folder changes), one capture folder per generation round, and the time recording took."""

    def __init__(self) -> None:
        self.recorder: AttentionRecorder | None = None
        self._seconds = 0.0

    @property
    def recording(self) -> bool:
        return self.recorder is not None and self.recorder.recording

    def start(self, capture_dir: Path, conversation, meta: dict) -> Path:
        if self.recorder is None or self.recorder.capture_dir != capture_dir:
            self.recorder = AttentionRecorder(capture_dir)
        self._seconds = 0.0
        return self.recorder.start(generation_meta(conversation, **meta))

    def record(self, conversation, token_id: int, text: str, attention) -> None:
        """One token, before it joins the table (views of the live columns are written out now)."""
        table = conversation.table
        started = time.perf_counter()
        try:
            self.recorder.record(token_id, text, table.position, attention, table.brightness,
                                 chunk_ids=table.chunk_id)
        finally:
            self._seconds += time.perf_counter() - started

    def finish(self, conversation, reason: str) -> Path:
        recorder = self.recorder
        per_token = self._seconds / recorder.tokens * 1000 if recorder.tokens else 0.0
        return recorder.finish({"finish_reason": reason, "record_ms_per_token": round(per_token, 4),
                                "chunks": chunk_snapshot(conversation)})


@dataclass
class CaptureRecord:
    """One recorded token event (arrays are read-only memory maps or copies of them)."""

    i: int
    t: float
    token_id: int
    text: str
    positions: np.ndarray  # int64 [rows]
    brightness: np.ndarray  # int32 [rows]
    chunk_ids: np.ndarray | None  # int32 [rows]
    attention: np.ndarray | None  # float32 [layers, heads, ctx] or [ctx]

    @property
    def format(self) -> str:
        """``per_layer``, ``aggregated`` or ``none``."""
        if self.attention is None:
            return "none"
        return "per_layer" if self.attention.ndim == 3 else "aggregated"

    @property
    def system_length(self) -> int:
        """Attention cells before the first row: the system prompt."""
        return 0 if self.attention is None else self.attention.shape[-1] - self.positions.size

    def aggregated(self) -> np.ndarray | None:
        """Attention over the context, mean over layers and heads (float32 [ctx])."""
        if self.attention is None or self.attention.ndim == 1:
            return self.attention
        layers, heads, ctx = self.attention.shape
        return self.attention.reshape(layers * heads, ctx).mean(axis=0, dtype=np.float32)


class Capture:
    """A capture folder read back: ``meta``, ``stats`` and its records (iterate / index)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.meta = json.loads((self.path / "meta.json").read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise CaptureError(f"{self.path} is not a capture: {exc}") from None
        if self.meta.get("format_version") != FORMAT_VERSION:
            raise CaptureError(f"unsupported capture format {self.meta.get('format_version')!r}")
        stats = self.path / "stats.json"
        self.stats = json.loads(stats.read_text("utf-8")) if stats.exists() else None
        for holder in (self.generation, self.stats or {}):
            _rename_chunk_fields(holder.get("chunks"))
        with open(self.path / "index.jsonl", encoding="utf-8") as f:
            # A crash may leave a half-written last line: everything before it is good.
            self.index = []
            for line in f:
                try:
                    self.index.append(json.loads(line))
                except ValueError:
                    break
        self._maps = {key: self._map(name, dtype) for key, (name, dtype) in ARRAY_FILES.items()}

    def _map(self, name: str, dtype: str) -> np.ndarray:
        file = self.path / name
        if not file.exists() or file.stat().st_size == 0:
            return np.zeros(0, dtype)
        return np.memmap(file, dtype=dtype, mode="r")

    @property
    def generation(self) -> dict:
        return self.meta.get("generation", {})

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, k: int) -> CaptureRecord:
        entry = self.index[k]
        ctx = entry["context"]
        rows = slice(ctx["offset"], ctx["offset"] + ctx["count"])
        attention = None
        if "attention" in entry:
            shape = entry["attention"]["shape"]
            start = entry["attention"]["offset"]
            attention = self._maps["attention"][start : start + int(np.prod(shape))].reshape(shape)
        return CaptureRecord(
            i=entry["i"], t=entry["t"], token_id=entry["token_id"], text=entry["text"],
            positions=self._maps["positions"][rows],
            brightness=self._maps["brightness"][rows],
            chunk_ids=self._maps["chunks"][rows] if entry.get("chunks") else None,
            attention=attention,
        )

    def __iter__(self) -> Iterator[CaptureRecord]:
        for k in range(len(self.index)):
            yield self[k]

    def text(self) -> str:
        """The generated text."""
        return "".join(e["text"] for e in self.index)


def load_capture(path: str | Path) -> Capture:
    """Open a capture folder; iterate it for per-token :class:`CaptureRecord` objects."""
    return Capture(path)


def list_captures(capture_dir: str | Path | None = None) -> list[Path]:
    """Capture folders, oldest first."""
    root = Path(capture_dir) if capture_dir is not None else default_capture_dir()
    if not root.exists():
        return []
    return sorted(p for p in root.iterdir() if (p / "meta.json").exists())


# ---------------------------------------------------------------------- metadata helpers
def _rename_chunk_fields(rows) -> None:
    """Chunk rows of a capture written before ``sentence_id`` was named ``chunk_index``."""
    for row in rows if isinstance(rows, list) else ():
        if isinstance(row, dict) and "sentence_id" in row:
            row.setdefault("chunk_index", row.pop("sentence_id"))


def chunk_snapshot(conversation) -> list[dict]:
    """Every chunk of a :class:`~halo_weave.conversation.Conversation`, as plain JSON."""
    rows = []
    for chunk in sorted(conversation.chunks.values(), key=lambda c: c.start):
        # Pruned chunks would have to be read from the store: not worth it for a preview.
        text = conversation.chunk_text(chunk.id) if chunk.live else ""
        rows.append({
            "id": chunk.id, "turn_id": chunk.turn_id, "chunk_index": chunk.chunk_index,
            "role": chunk.role, "start": chunk.start, "token_count": chunk.token_count,
            "live": chunk.live, "pinned": chunk.pinned, "tool_result": chunk.tool_result,
            "preview": text[:80],
        })
    return rows


def generation_meta(conversation, **extra) -> dict:
    """What :meth:`AttentionRecorder.start` should get: context shape, chunks, settings."""
    s = conversation.settings
    return {
        "system_length": int(len(conversation.system.ids)),
        "live_tokens": int(conversation.live_token_count()),
        "settings": {
            "max_context_tokens": s.pruning.max_context_tokens, "brightness_cap": s.brightness.brightness_cap,
            "decay_per_step": s.brightness.decay_per_step, "score_current_turn": s.brightness.score_current_turn,
            "attention_format": s.server.attention_format, "max_new_tokens": s.sampling.max_new_tokens,
        },
        "chunks": chunk_snapshot(conversation),
        **extra,
    }

"""Export a conversation to one JSON document, and import such a document safely.

The document (``{"format": "halo-weave", "version": 1, ...}``)::

    metadata          counters (next_position, next_turn_id, next_chunk_id) and "extra":
                      every other meta value (created_at, updated_at, ...)
    system_prompt     {text, token_ids, texts}
    turns             [{turn_id, role, created_at, complete}]
    chunks            [{id, turn_id, sentence_id, role, start, token_count, live, pinned,
                        brightness_at_deletion, tool_result}]
    tokens            columns, in position order: {position, chunk_id, token_id, text,
                      brightness, deleted, pinned}
    semantic_entries  [{chunk_id, turn_id, sentence_id, role, text, token_count,
                        context_hash, reference_count, updated_at}]  (no embeddings: the
                      app re-embeds imported entries, whose embedding is NULL)
    tool_notes        {name: JSON document}

Import checks the entire document (types, ranges, sizes, references, positions) before
anything is written, then builds the new file under a temporary name in one
transaction and renames it into place: a failed import leaves no file and touches no
existing conversation.  Exporting an imported conversation gives the same document.
"""

from __future__ import annotations

import json
import math
import os
import secrets
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TransferError
from ..store import ConversationStore
from .file_safety import UnsafePath, check_export_target, read_regular_file
from .files import conversations_dir, new_conversation_path
from .schema import pack_tokens, unpack_tokens
from .transfer_checks import bad_text_path, check_token_ids, check_unicode

FORMAT = "halo-weave"
VERSION = 1

#: Limits that keep a hostile file from exhausting memory or time.
MAX_FILE_BYTES = 1 << 30
MAX_TOKENS = 50_000_000
MAX_ROWS = 10_000_000  # turns, chunks, semantic entries
MAX_TOKEN_TEXT = 4096
MAX_TEXT = 4 << 20  # system prompt, an entry's text, one serialised tool note or meta value
MAX_NAME = 200
MAX_INT_DIGITS = 20
INT32 = (-(1 << 31), (1 << 31) - 1)
#: Turn and chunk ids (and the counters after them): the conversation keeps them as int32,
#: so an imported file leaves room for a billion more before they could overflow.
MAX_ID = (1 << 30) - 1
MAX_POSITION = 1 << 48
MAX_TIME = 1e11  # seconds since 1970: year 5138

_COUNTERS = ("next_position", "next_turn_id", "next_chunk_id")
_SYSTEM_KEYS = ("system_prompt", "system_ids", "system_texts")
_TURN_FIELDS = ("turn_id", "role", "created_at", "complete")
_CHUNK_FIELDS = ("id", "turn_id", "sentence_id", "role", "start", "token_count", "live",
                 "pinned", "brightness_at_deletion", "tool_result")
_TOKEN_COLUMNS = ("position", "chunk_id", "token_id", "text", "brightness", "deleted", "pinned")
_ENTRY_FIELDS = ("chunk_id", "turn_id", "sentence_id", "role", "text", "token_count",
                 "context_hash", "reference_count", "updated_at")
_ROLES = ("user", "assistant")


# ---------------------------------------------------------------------- export
def export_document(store: ConversationStore) -> dict:
    """The conversation in ``store`` as a version-1 document (plain JSON values)."""
    conn = store.conn
    meta = {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM meta ORDER BY key")}
    chunks, columns = [], {name: [] for name in _TOKEN_COLUMNS}
    rows = conn.execute(
        "SELECT c.id, c.turn_id, c.sentence_id, c.role, c.start, c.token_count, c.live, c.pinned, "
        "c.brightness_at_deletion, c.tool_result, t.token_ids, t.brightness, t.text, t.text_lengths "
        "FROM chunks c JOIN chunk_tokens t ON t.chunk_id = c.id ORDER BY c.start"
    )
    for row in rows:
        chunk = dict(zip(_CHUNK_FIELDS, row[:10]))
        for flag in ("live", "pinned", "tool_result"):
            chunk[flag] = bool(chunk[flag])
        chunks.append(chunk)
        tokens = unpack_tokens(*row[10:])
        count = chunk["token_count"]
        columns["position"].extend(range(chunk["start"], chunk["start"] + count))
        columns["chunk_id"].extend([chunk["id"]] * count)
        columns["token_id"].extend(tokens.token_ids.tolist())
        columns["text"].extend(tokens.texts)
        columns["brightness"].extend(tokens.brightness.tolist())
        columns["deleted"].extend([not chunk["live"]] * count)
        columns["pinned"].extend([chunk["pinned"]] * count)
    return {
        "format": FORMAT,
        "version": VERSION,
        "metadata": {
            **{name: meta.get(name, 0) for name in _COUNTERS},
            "extra": {k: v for k, v in meta.items() if k not in _COUNTERS + _SYSTEM_KEYS},
        },
        "system_prompt": {
            "text": meta.get("system_prompt", ""),
            "token_ids": meta.get("system_ids", []),
            "texts": meta.get("system_texts", []),
        },
        "turns": [
            {"turn_id": t, "role": r, "created_at": c, "complete": bool(done)}
            for t, r, c, done in conn.execute(
                "SELECT turn_id, role, created_at, complete FROM turns ORDER BY turn_id")
        ],
        "chunks": chunks,
        "tokens": columns,
        "semantic_entries": [
            dict(zip(_ENTRY_FIELDS, row)) for row in conn.execute(
                f"SELECT {', '.join(_ENTRY_FIELDS)} FROM semantic_entries ORDER BY chunk_id")
        ],
        "tool_notes": {
            name: json.loads(text)
            for name, text in conn.execute("SELECT name, json FROM tool_data ORDER BY name")
        },
    }


def export_conversation(source: ConversationStore | Path, out_path: Path) -> None:
    """Write ``source`` (an open store or a conversation file) to ``out_path`` as JSON.

    Refuses a target that is a database or the open conversation's own file (see
    :mod:`halo_weave.storage.file_safety`); the temporary file is removed whatever happens.
    """
    out_path = Path(out_path)
    protected = [source.path if isinstance(source, ConversationStore) else Path(source)]
    try:
        check_export_target(out_path, protected)
    except UnsafePath as exc:
        raise TransferError(str(exc)) from None
    if isinstance(source, ConversationStore):
        document = export_document(source)
    else:
        with ConversationStore.open(source, create=False) as store:
            document = export_document(store)
    tmp = out_path.with_name(f".{out_path.name}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(document, f, ensure_ascii=False, separators=(",", ":"))
        os.replace(tmp, out_path)
    except UnicodeEncodeError:
        raise TransferError(
            f"Could not export: {bad_text_path(document)} holds text that is not valid Unicode "
            "(a lone surrogate); nothing was written."
        ) from None
    except OSError as exc:
        raise TransferError(f"Could not write {out_path}: {exc.strerror or exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)


# ---------------------------------------------------------------------- import
def import_conversation(path: Path, data_dir: Path, vocab_size: int | None = None) -> Path:
    """Import a document as a new conversation in ``data_dir``; returns its file.

    ``vocab_size`` is the vocabulary of the model the conversation will be used with
    (the connected server's, else the bundled model's): token ids outside it are refused.
    Raises :class:`TransferError` (and writes nothing) for any invalid document.
    """
    document = read_document(Path(path))
    plan = validate_document(document, vocab_size)
    return _write(plan, data_dir)


def read_document(path: Path) -> dict:
    """Parse a file into a JSON object, refusing oversize, non-UTF-8 or non-JSON input."""
    try:
        raw = read_regular_file(path, MAX_FILE_BYTES)
    except UnsafePath as exc:
        raise TransferError(str(exc)) from None
    try:
        text = raw.decode("utf-8")
        document = json.loads(text, parse_int=_parse_int, parse_constant=_reject_constant)
    except UnicodeDecodeError:
        raise TransferError(f"{path.name} is not a Halo Weave export (not UTF-8 text).") from None
    except json.JSONDecodeError as exc:
        raise TransferError(
            f"{path.name} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
            "the file may be truncated or not an export."
        ) from None
    except (ValueError, RecursionError) as exc:
        raise TransferError(f"{path.name} is not a usable export: {exc}.") from None
    if not isinstance(document, dict):
        raise TransferError(f"{path.name} is not a Halo Weave export (expected a JSON object).")
    return document


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"number {text[:24]}… is out of range")
    return int(text)


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a valid number")


# ---------------------------------------------------------------------- validation
def _fail(where: str, problem: str) -> None:
    raise TransferError(f"Invalid export: {where} {problem}.")


def _int(value: Any, where: str, lo: int, hi: int) -> int:
    if type(value) is not int:
        _fail(where, f"must be an integer, not {type(value).__name__}")
    if not lo <= value <= hi:
        _fail(where, f"= {value} is outside {lo}..{hi}")
    return value


def _bool(value: Any, where: str) -> bool:
    if type(value) is not bool:
        _fail(where, f"must be true or false, not {type(value).__name__}")
    return value


def _str(value: Any, where: str, limit: int) -> str:
    if type(value) is not str:
        _fail(where, f"must be a string, not {type(value).__name__}")
    if len(value) > limit:
        _fail(where, f"is {len(value)} characters long (limit {limit})")
    return value


def _time(value: Any, where: str) -> float:
    if type(value) not in (int, float) or not math.isfinite(value) or not 0 <= value <= MAX_TIME:
        _fail(where, "must be a time in seconds")
    return value


def _list(value: Any, where: str, limit: int) -> list:
    if type(value) is not list:
        _fail(where, f"must be a list, not {type(value).__name__}")
    if len(value) > limit:
        _fail(where, f"has {len(value)} items (limit {limit})")
    return value


def _record(value: Any, where: str, fields: tuple[str, ...]) -> dict:
    if type(value) is not dict:
        _fail(where, f"must be an object, not {type(value).__name__}")
    if set(value) != set(fields):
        missing, extra = set(fields) - set(value), set(value) - set(fields)
        _fail(where, f"has missing fields {sorted(missing)} / unknown fields {sorted(extra)}")
    return value


def _json_value(value: Any, where: str) -> None:
    if len(json.dumps(value)) > MAX_TEXT:
        _fail(where, f"is larger than {MAX_TEXT} bytes")


def _int_column(values: list, where: str, lo: int, hi: int, dtype) -> np.ndarray:
    if any(type(v) is not int for v in values):
        _fail(where, "must hold only integers")
    array = np.array(values, dtype=np.int64) if values else np.zeros(0, np.int64)
    if array.size and (array.min() < lo or array.max() > hi):
        _fail(where, f"holds values outside {lo}..{hi}")
    return array.astype(dtype)


def _bool_column(values: list, where: str) -> np.ndarray:
    if any(type(v) is not bool for v in values):
        _fail(where, "must hold only true/false")
    return np.array(values, dtype=bool)


def validate_document(doc: dict, vocab_size: int | None = None) -> dict:
    """Check a parsed document completely; returns what :func:`_write` needs.

    With ``vocab_size``, every token id must lie in ``0 .. vocab_size - 1``.
    """
    check_unicode(doc)
    if doc.get("format") != FORMAT:
        raise TransferError("This file is not a Halo Weave export (its format is not 'halo-weave').")
    version = doc.get("version")
    if type(version) is not int or version != VERSION:
        raise TransferError(f"This export has version {version!r}; this Halo Weave reads version {VERSION}.")
    _record(doc, "the document", ("format", "version", "metadata", "system_prompt", "turns", "chunks",
                                  "tokens", "semantic_entries", "tool_notes"))

    metadata = _record(doc["metadata"], "metadata", _COUNTERS + ("extra",))
    counters = {
        name: _int(metadata[name], f"metadata.{name}", 0, MAX_POSITION if name == "next_position" else MAX_ID + 1)
        for name in _COUNTERS
    }
    extra = metadata["extra"]
    if type(extra) is not dict or len(extra) > 1000:
        _fail("metadata.extra", "must be an object of at most 1000 values")
    for key, value in extra.items():
        _str(key, "a metadata key", MAX_NAME)
        if key in _COUNTERS + _SYSTEM_KEYS:
            _fail(f"metadata.extra.{key}", "is reserved")
        _json_value(value, f"metadata.extra.{key}")

    system = _record(doc["system_prompt"], "system_prompt", ("text", "token_ids", "texts"))
    _str(system["text"], "system_prompt.text", MAX_TEXT)
    sys_ids = _list(system["token_ids"], "system_prompt.token_ids", MAX_TEXT)
    sys_texts = _list(system["texts"], "system_prompt.texts", MAX_TEXT)
    for i, token_id in enumerate(sys_ids):
        _int(token_id, f"system_prompt.token_ids[{i}]", 0, MAX_ID)
    for i, text in enumerate(sys_texts):
        _str(text, f"system_prompt.texts[{i}]", MAX_TOKEN_TEXT)
    if len(sys_ids) != len(sys_texts):
        _fail("system_prompt", "has different numbers of token ids and texts")
    check_token_ids(sys_ids, "system_prompt.token_ids", vocab_size)

    turns: dict[int, dict] = {}
    for i, turn in enumerate(_list(doc["turns"], "turns", MAX_ROWS)):
        where = f"turns[{i}]"
        _record(turn, where, _TURN_FIELDS)
        turn_id = _int(turn["turn_id"], f"{where}.turn_id", 0, MAX_ID)
        if turn["role"] not in _ROLES:
            _fail(f"{where}.role", f"must be one of {_ROLES}")
        _time(turn["created_at"], f"{where}.created_at")
        _bool(turn["complete"], f"{where}.complete")
        if turn_id in turns:
            _fail(where, f"repeats turn id {turn_id}")
        turns[turn_id] = turn

    chunks: dict[int, dict] = {}
    keys: set[tuple] = set()
    for i, chunk in enumerate(_list(doc["chunks"], "chunks", MAX_ROWS)):
        where = f"chunks[{i}]"
        _record(chunk, where, _CHUNK_FIELDS)
        chunk_id = _int(chunk["id"], f"{where}.id", 0, MAX_ID)
        turn = turns.get(_int(chunk["turn_id"], f"{where}.turn_id", 0, MAX_ID))
        if turn is None:
            _fail(where, f"refers to turn {chunk['turn_id']}, which is not in the file")
        _int(chunk["sentence_id"], f"{where}.sentence_id", -2, MAX_ID)
        if chunk["role"] != turn["role"]:
            _fail(f"{where}.role", f"is {chunk['role']!r} but its turn is {turn['role']!r}")
        _int(chunk["start"], f"{where}.start", 0, MAX_POSITION)
        _int(chunk["token_count"], f"{where}.token_count", 1, MAX_TOKENS)
        for flag in ("live", "pinned", "tool_result"):
            _bool(chunk[flag], f"{where}.{flag}")
        if chunk["brightness_at_deletion"] is not None:
            _int(chunk["brightness_at_deletion"], f"{where}.brightness_at_deletion", *INT32)
        key = (chunk["turn_id"], chunk["sentence_id"], chunk["role"])
        if chunk_id in chunks or key in keys:
            _fail(where, f"repeats chunk {chunk_id} / {key}")
        chunks[chunk_id] = chunk
        keys.add(key)

    tokens = _validate_tokens(doc["tokens"], chunks)
    check_token_ids(tokens["token_id"], "tokens.token_id", vocab_size)

    entries = []
    for i, entry in enumerate(_list(doc["semantic_entries"], "semantic_entries", MAX_ROWS)):
        where = f"semantic_entries[{i}]"
        _record(entry, where, _ENTRY_FIELDS)
        chunk = chunks.get(_int(entry["chunk_id"], f"{where}.chunk_id", 0, MAX_ID))
        if chunk is None or any(entry[f] != chunk[f] for f in ("turn_id", "sentence_id", "role")):
            _fail(where, "refers to a chunk that is not in the file")
        _str(entry["text"], f"{where}.text", MAX_TEXT)
        _int(entry["token_count"], f"{where}.token_count", 0, MAX_TOKENS)
        _str(entry["context_hash"], f"{where}.context_hash", MAX_NAME)
        _int(entry["reference_count"], f"{where}.reference_count", 0, MAX_POSITION)
        _time(entry["updated_at"], f"{where}.updated_at")
        entries.append(entry)
    if len({e["chunk_id"] for e in entries}) != len(entries):
        _fail("semantic_entries", "repeat a chunk")

    notes = doc["tool_notes"]
    if type(notes) is not dict or len(notes) > 1000:
        _fail("tool_notes", "must be an object of at most 1000 notes")
    for name, note in notes.items():
        _str(name, "a tool name", MAX_NAME)
        _json_value(note, f"tool_notes.{name}")

    if turns and counters["next_turn_id"] <= max(turns):
        _fail("metadata.next_turn_id", "is not past the last turn")
    if chunks and counters["next_chunk_id"] <= max(chunks):
        _fail("metadata.next_chunk_id", "is not past the last chunk")
    if tokens["position"].size and counters["next_position"] <= int(tokens["position"][-1]):
        _fail("metadata.next_position", "is not past the last token")
    return {"doc": doc, "chunks": chunks, "tokens": tokens, "extra": extra, "counters": counters}


def _validate_tokens(columns: Any, chunks: dict[int, dict]) -> dict[str, Any]:
    if type(columns) is not dict or set(columns) != set(_TOKEN_COLUMNS):
        _fail("tokens", f"must be an object with the columns {list(_TOKEN_COLUMNS)}")
    lists = {name: _list(columns[name], f"tokens.{name}", MAX_TOKENS) for name in _TOKEN_COLUMNS}
    count = len(lists["position"])
    if any(len(v) != count for v in lists.values()):
        _fail("tokens", "columns have different lengths")
    out: dict[str, Any] = {
        "position": _int_column(lists["position"], "tokens.position", 0, MAX_POSITION, np.int64),
        "chunk_id": _int_column(lists["chunk_id"], "tokens.chunk_id", 0, MAX_ID, np.int64),
        "token_id": _int_column(lists["token_id"], "tokens.token_id", 0, MAX_ID, np.int32),
        "brightness": _int_column(lists["brightness"], "tokens.brightness", *INT32, np.int32),
        "deleted": _bool_column(lists["deleted"], "tokens.deleted"),
        "pinned": _bool_column(lists["pinned"], "tokens.pinned"),
        "text": lists["text"],
    }
    for i, text in enumerate(out["text"]):
        if type(text) is not str or len(text) > MAX_TOKEN_TEXT:
            _fail(f"tokens.text[{i}]", f"must be a string of at most {MAX_TOKEN_TEXT} characters")
    position = out["position"]
    if count > 1 and not (np.diff(position) > 0).all():
        at = int(np.flatnonzero(np.diff(position) <= 0)[0]) + 1
        _fail(f"tokens.position[{at}]", f"= {int(position[at])} is duplicated or out of order")

    # The chunks, in position order, must tile the token columns exactly.
    ordered = sorted(chunks.values(), key=lambda c: c["start"])
    counts = np.array([c["token_count"] for c in ordered], np.int64)
    if int(counts.sum()) != count:
        _fail("tokens", f"has {count} rows but the chunks hold {int(counts.sum())} tokens")
    if not ordered:
        return out
    starts = np.array([c["start"] for c in ordered], np.int64)
    first_row = np.concatenate(([0], np.cumsum(counts)[:-1]))
    expected_position = np.repeat(starts - first_row, counts) + np.arange(count)
    if not np.array_equal(expected_position, position):
        _fail("tokens.position", "does not match the chunks' start and token_count")
    owners = np.repeat(np.array([c["id"] for c in ordered], np.int64), counts)
    if not np.array_equal(owners, out["chunk_id"]):
        _fail("tokens.chunk_id", "does not match the chunks holding those positions")
    if not np.array_equal(np.repeat([not c["live"] for c in ordered], counts), out["deleted"]):
        _fail("tokens.deleted", "disagrees with the state of its chunk")
    if not np.array_equal(np.repeat([c["pinned"] for c in ordered], counts), out["pinned"]):
        _fail("tokens.pinned", "disagrees with its chunk")
    out["ordered"] = ordered
    out["first_row"] = first_row.tolist()
    return out


# ---------------------------------------------------------------------- writing
def _write(plan: dict, data_dir: Path) -> Path:
    final = new_conversation_path(data_dir)
    tmp = conversations_dir(data_dir) / f".import-{secrets.token_hex(6)}.tmp"
    try:
        store = ConversationStore.open(tmp)
        try:
            with store.transaction() as conn:
                _insert(conn, plan)
        finally:
            store.close()
        os.replace(tmp, final)
    except BaseException:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{tmp}{suffix}").unlink(missing_ok=True)
        raise
    return final


def _insert(conn, plan: dict) -> None:
    doc, tokens, counters = plan["doc"], plan["tokens"], plan["counters"]
    system = doc["system_prompt"]
    meta = {**plan["extra"], **counters, "system_prompt": system["text"],
            "system_ids": system["token_ids"], "system_texts": system["texts"]}
    conn.execute("DELETE FROM meta")
    conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                     [(k, json.dumps(v)) for k, v in meta.items()])
    conn.executemany(
        "INSERT INTO turns (turn_id, role, created_at, complete) VALUES (?, ?, ?, ?)",
        [(t["turn_id"], t["role"], t["created_at"], int(t["complete"])) for t in doc["turns"]],
    )
    conn.executemany(
        f"INSERT INTO chunks ({', '.join(_CHUNK_FIELDS)}) VALUES ({', '.join('?' * len(_CHUNK_FIELDS))})",
        [tuple(int(v) if type(v) is bool else v for v in (c[f] for f in _CHUNK_FIELDS))
         for c in doc["chunks"]],
    )
    rows = []
    for chunk, first in zip(tokens.get("ordered", []), tokens.get("first_row", [])):
        rows_of = slice(first, first + chunk["token_count"])
        rows.append((chunk["id"], *pack_tokens(
            tokens["token_id"][rows_of], tokens["text"][rows_of], tokens["brightness"][rows_of])))
    conn.executemany(
        "INSERT INTO chunk_tokens (chunk_id, token_ids, brightness, text, text_lengths) "
        "VALUES (?, ?, ?, ?, ?)", rows,
    )
    conn.executemany(
        f"INSERT INTO semantic_entries ({', '.join(_ENTRY_FIELDS)}) VALUES ({', '.join('?' * len(_ENTRY_FIELDS))})",
        [tuple(e[f] for f in _ENTRY_FIELDS) for e in doc["semantic_entries"]],
    )
    conn.executemany("INSERT INTO tool_data (name, json) VALUES (?, ?)",
                     [(name, json.dumps(note)) for name, note in doc["tool_notes"].items()])

"""The export document: its format, reading a file into one, and validating it.

The document (``{"format": "halo-weave", "version": 4, ...}``)::

    metadata          counters (next_position, next_turn_id, next_chunk_id) and "extra":
                      every other meta value (created_at, updated_at, ...)
    system_prompt     {text, token_ids, texts}
    turns             [{turn_id, role, created_at, complete}]
    chunks            [{id, turn_id, chunk_index, role, start, token_count, live, pinned,
                        brightness_at_prune, tool_result}]
    tokens            columns, in position order: {position, chunk_id, token_id, text,
                      brightness, pruned, pinned}
    semantic_entries  [{chunk_id, turn_id, chunk_index, role, text, token_count,
                        context_hash, reference_count, updated_at}]  (no embeddings: the
                      app re-embeds imported entries, whose embedding is NULL)
    tool_notes        {name: JSON document}
    answer_versions   [{user_turn_id, created_at, question, token_ids, texts, brightness}]:
                      the other versions of an answer (Regenerate), by the user turn they
                      answer; ``question`` is the wording they answered when it was edited
                      since, else null
    branches          [{parent_turn_id, first_turn_id, created_at, tail}]: the stashed
                      branches (an earlier message edited or regenerated), each the turn
                      it follows (-1: the first message) and its rows
                      (:mod:`.branches_transfer`)

Older versions are still read: version 4 had no ``branches`` (read as none); version 3 had no ``answer_versions`` (read as none); version 2 named
``brightness_at_prune`` ``brightness_at_deletion`` and the ``pruned`` column ``deleted``;
version 1 also named ``chunk_index`` ``sentence_id`` (in chunks and semantic entries).  Validation checks the entire document (types, ranges, sizes,
references, positions) before :mod:`halo_weave.exchange.transfer` writes anything.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TransferError
from .file_safety import UnsafePath, read_regular_file
from .transfer_checks import check_token_ids, check_unicode

FORMAT = "halo-weave"
VERSION = 5
#: Versions still read (see :data:`RENAMES` for how they differ).
READABLE_VERSIONS = (1, 2, 3, 4, 5)

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

#: The id counters and the system prompt's meta keys, each a field of the document's metadata.
COUNTERS = ("next_position", "next_turn_id", "next_chunk_id")
SYSTEM_KEYS = ("system_prompt", "system_ids", "system_texts")
#: The meta key of the name a model server saves this conversation's KV cache under: it
#: names this file, so an export leaves it out and an import makes its own.
CACHE_KEY_META = "kv_cache_key"
_TURN_FIELDS = ("turn_id", "role", "created_at", "complete")
#: The columns of a chunk, a token and a semantic entry, as the document holds them.
CHUNK_FIELDS = ("id", "turn_id", "chunk_index", "role", "start", "token_count", "live",
                "pinned", "brightness_at_prune", "tool_result")
TOKEN_COLUMNS = ("position", "chunk_id", "token_id", "text", "brightness", "pruned", "pinned")
ENTRY_FIELDS = ("chunk_id", "turn_id", "chunk_index", "role", "text", "token_count",
                "context_hash", "reference_count", "updated_at")
_ROLES = ("user", "assistant", "document")

# ---------------------------------------------------------------------- reading
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


#: Version -> the renames it made: part of the document -> {old field: new field}.
RENAMES: dict[int, dict[str, dict[str, str]]] = {
    2: {"chunks": {"sentence_id": "chunk_index"}, "semantic_entries": {"sentence_id": "chunk_index"}},
    3: {"chunks": {"brightness_at_deletion": "brightness_at_prune"}, "tokens": {"deleted": "pruned"}},
    4: {},  # added answer_versions (see _upgrade)
    5: {},  # added branches (see _upgrade)
}
_VERSION_FIELDS = ("user_turn_id", "created_at", "question", "token_ids", "texts", "brightness")


def _upgrade(doc: dict, version: int) -> dict:
    """An older document with today's field names (a new dict; ``doc`` is not changed)."""
    doc = dict(doc)
    for step in range(version + 1, VERSION + 1):
        for part, renames in RENAMES[step].items():
            doc[part] = _renamed(doc.get(part), part, renames, step)
    if version < 4:
        if "answer_versions" in doc:
            _fail("the document", f"has 'answer_versions' in a version-{version} document")
        doc["answer_versions"] = []
    if version < 5:
        if "branches" in doc:
            _fail("the document", f"has 'branches' in a version-{version} document")
        doc["branches"] = []
    doc["version"] = VERSION
    return doc


def _renamed(value: Any, part: str, renames: dict[str, str], step: int) -> Any:
    """``value`` (a list of records, or one record of columns) with the fields renamed."""
    def rename(row: dict, where: str) -> dict:
        for old, new in renames.items():
            if new in row:
                _fail(where, f"has the version-{step} field '{new}' in a version-{step - 1} "
                             f"document (which names it '{old}')")
        return {renames.get(k, k): v for k, v in row.items()}

    if type(value) is dict:
        return rename(value, part)
    if type(value) is not list:
        return value  # validation reports it
    return [rename(row, f"{part}[{i}]") if type(row) is dict else row for i, row in enumerate(value)]


def validate_document(doc: dict, vocab_size: int | None = None) -> dict:
    """Check a parsed document completely; returns what :func:`_write` needs.

    With ``vocab_size``, every token id must lie in ``0 .. vocab_size - 1``.
    """
    check_unicode(doc)
    if doc.get("format") != FORMAT:
        raise TransferError("This file is not a Halo Weave export (its format is not 'halo-weave').")
    version = doc.get("version")
    if type(version) is not int or version not in READABLE_VERSIONS:
        raise TransferError(f"This export has version {version!r}; this Halo Weave reads versions "
                            f"{READABLE_VERSIONS[0]} to {READABLE_VERSIONS[-1]}.")
    if version != VERSION:
        doc = _upgrade(doc, version)
    _record(doc, "the document", ("format", "version", "metadata", "system_prompt", "turns", "chunks",
                                  "tokens", "semantic_entries", "tool_notes", "answer_versions",
                                  "branches"))

    metadata = _record(doc["metadata"], "metadata", COUNTERS + ("extra",))
    counters = {
        name: _int(metadata[name], f"metadata.{name}", 0, MAX_POSITION if name == "next_position" else MAX_ID + 1)
        for name in COUNTERS
    }
    extra = metadata["extra"]
    if type(extra) is not dict or len(extra) > 1000:
        _fail("metadata.extra", "must be an object of at most 1000 values")
    for key, value in extra.items():
        _str(key, "a metadata key", MAX_NAME)
        if key in COUNTERS + SYSTEM_KEYS + (CACHE_KEY_META,):
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
        _record(chunk, where, CHUNK_FIELDS)
        chunk_id = _int(chunk["id"], f"{where}.id", 0, MAX_ID)
        turn = turns.get(_int(chunk["turn_id"], f"{where}.turn_id", 0, MAX_ID))
        if turn is None:
            _fail(where, f"refers to turn {chunk['turn_id']}, which is not in the file")
        _int(chunk["chunk_index"], f"{where}.chunk_index", -2, MAX_ID)
        if chunk["role"] != turn["role"]:
            _fail(f"{where}.role", f"is {chunk['role']!r} but its turn is {turn['role']!r}")
        _int(chunk["start"], f"{where}.start", 0, MAX_POSITION)
        _int(chunk["token_count"], f"{where}.token_count", 1, MAX_TOKENS)
        for flag in ("live", "pinned", "tool_result"):
            _bool(chunk[flag], f"{where}.{flag}")
        if chunk["brightness_at_prune"] is not None:
            _int(chunk["brightness_at_prune"], f"{where}.brightness_at_prune", *INT32)
        key = (chunk["turn_id"], chunk["chunk_index"], chunk["role"])
        if chunk_id in chunks or key in keys:
            _fail(where, f"repeats chunk {chunk_id} / {key}")
        chunks[chunk_id] = chunk
        keys.add(key)

    tokens = _validate_tokens(doc["tokens"], chunks)
    check_token_ids(tokens["token_id"], "tokens.token_id", vocab_size)

    entries = []
    for i, entry in enumerate(_list(doc["semantic_entries"], "semantic_entries", MAX_ROWS)):
        where = f"semantic_entries[{i}]"
        _record(entry, where, ENTRY_FIELDS)
        chunk = chunks.get(_int(entry["chunk_id"], f"{where}.chunk_id", 0, MAX_ID))
        if chunk is None or any(entry[f] != chunk[f] for f in ("turn_id", "chunk_index", "role")):
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

    _validate_versions(doc["answer_versions"], turns, vocab_size)

    from .branches_transfer import check_branches

    check_branches(doc["branches"], set(turns), set(chunks), counters, vocab_size)
    if turns and counters["next_turn_id"] <= max(turns):
        _fail("metadata.next_turn_id", "is not past the last turn")
    if chunks and counters["next_chunk_id"] <= max(chunks):
        _fail("metadata.next_chunk_id", "is not past the last chunk")
    if tokens["position"].size and counters["next_position"] <= int(tokens["position"][-1]):
        _fail("metadata.next_position", "is not past the last token")
    return {"doc": doc, "chunks": chunks, "tokens": tokens, "extra": extra, "counters": counters}


def _validate_versions(versions: Any, turns: dict[int, dict], vocab_size: int | None) -> None:
    """The other versions of answers: each answers a user turn of the file, its columns
    of equal length, within the token limits."""
    total = 0
    for i, version in enumerate(_list(versions, "answer_versions", MAX_ROWS)):
        where = f"answer_versions[{i}]"
        _record(version, where, _VERSION_FIELDS)
        turn = turns.get(_int(version["user_turn_id"], f"{where}.user_turn_id", 0, MAX_ID))
        if turn is None or turn["role"] != "user":
            _fail(where, f"answers turn {version['user_turn_id']}, which is not a user turn in the file")
        _time(version["created_at"], f"{where}.created_at")
        if version["question"] is not None:
            _str(version["question"], f"{where}.question", MAX_TEXT)
        ids = _list(version["token_ids"], f"{where}.token_ids", MAX_TOKENS)
        texts = _list(version["texts"], f"{where}.texts", MAX_TOKENS)
        brightness = _list(version["brightness"], f"{where}.brightness", MAX_TOKENS)
        if not len(ids) == len(texts) == len(brightness):
            _fail(where, "has columns of different lengths")
        total += len(ids)
        if total > MAX_TOKENS:
            _fail("answer_versions", f"hold more than {MAX_TOKENS:,} tokens")
        for j, token_id in enumerate(ids):
            _int(token_id, f"{where}.token_ids[{j}]", 0, MAX_ID)
        for j, text in enumerate(texts):
            _str(text, f"{where}.texts[{j}]", MAX_TOKEN_TEXT)
        for j, value in enumerate(brightness):
            _int(value, f"{where}.brightness[{j}]", *INT32)
        check_token_ids(ids, f"{where}.token_ids", vocab_size)


def _validate_tokens(columns: Any, chunks: dict[int, dict]) -> dict[str, Any]:
    if type(columns) is not dict or set(columns) != set(TOKEN_COLUMNS):
        _fail("tokens", f"must be an object with the columns {list(TOKEN_COLUMNS)}")
    lists = {name: _list(columns[name], f"tokens.{name}", MAX_TOKENS) for name in TOKEN_COLUMNS}
    count = len(lists["position"])
    if any(len(v) != count for v in lists.values()):
        _fail("tokens", "columns have different lengths")
    out: dict[str, Any] = {
        "position": _int_column(lists["position"], "tokens.position", 0, MAX_POSITION, np.int64),
        "chunk_id": _int_column(lists["chunk_id"], "tokens.chunk_id", 0, MAX_ID, np.int64),
        "token_id": _int_column(lists["token_id"], "tokens.token_id", 0, MAX_ID, np.int32),
        "brightness": _int_column(lists["brightness"], "tokens.brightness", *INT32, np.int32),
        "pruned": _bool_column(lists["pruned"], "tokens.pruned"),
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
    if not np.array_equal(np.repeat([not c["live"] for c in ordered], counts), out["pruned"]):
        _fail("tokens.pruned", "disagrees with the state of its chunk")
    if not np.array_equal(np.repeat([c["pinned"] for c in ordered], counts), out["pinned"]):
        _fail("tokens.pinned", "disagrees with its chunk")
    out["ordered"] = ordered
    out["first_row"] = first_row.tolist()
    return out

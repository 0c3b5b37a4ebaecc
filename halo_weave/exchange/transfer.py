"""Export a conversation to one JSON document, and import such a document safely.

The document's format, reading and validation are in :mod:`halo_weave.storage.transfer_document`.  Import
checks the entire document before anything is written, then builds the new file under a
temporary name in one transaction and renames it into place: a failed import leaves no
file and touches no existing conversation.  Exporting an imported conversation gives the
same document.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import TransferError
from ..store import ConversationStore
from ..storage.file_safety import UnsafePath, check_export_target
from ..storage.files import conversations_dir, new_conversation_path
from ..storage.schema import pack_tokens, unpack_tokens
from ..storage.branches_transfer import export_branches, packed_branches
from ..storage.transfer_checks import bad_text_path
from ..storage.transfer_document import (  # noqa: F401  (MAX_FILE_BYTES, MAX_ID: importers' API here too)
    CACHE_KEY_META, CHUNK_FIELDS, COUNTERS, ENTRY_FIELDS, FORMAT, MAX_FILE_BYTES, MAX_ID, SYSTEM_KEYS,
    TOKEN_COLUMNS, VERSION, read_document, validate_document,
)


# ---------------------------------------------------------------------- export
def export_document(store: ConversationStore) -> dict:
    """The conversation in ``store`` as a document of the current :data:`VERSION` (plain JSON values)."""
    conn = store.conn
    meta = {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM meta ORDER BY key")}
    chunks, columns = [], {name: [] for name in TOKEN_COLUMNS}
    rows = conn.execute(
        "SELECT c.id, c.turn_id, c.chunk_index, c.role, c.start, c.token_count, c.live, c.pinned, "
        "c.brightness_at_prune, c.tool_result, t.token_ids, t.brightness, t.text, t.text_lengths "
        "FROM chunks c JOIN chunk_tokens t ON t.chunk_id = c.id ORDER BY c.start"
    )
    for row in rows:
        chunk = dict(zip(CHUNK_FIELDS, row[:10]))
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
        columns["pruned"].extend([not chunk["live"]] * count)
        columns["pinned"].extend([chunk["pinned"]] * count)
    return {
        "format": FORMAT,
        "version": VERSION,
        "metadata": {
            **{name: meta.get(name, 0) for name in COUNTERS},
            "extra": {k: v for k, v in meta.items() if k not in COUNTERS + SYSTEM_KEYS + (CACHE_KEY_META,)},
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
            dict(zip(ENTRY_FIELDS, row)) for row in conn.execute(
                f"SELECT {', '.join(ENTRY_FIELDS)} FROM semantic_entries ORDER BY chunk_id")
        ],
        "tool_notes": {
            name: json.loads(text)
            for name, text in conn.execute("SELECT name, json FROM tool_data ORDER BY name")
        },
        "answer_versions": [_version_record(row) for row in conn.execute(
            "SELECT user_turn_id, created_at, question, token_ids, brightness, text, text_lengths "
            "FROM answer_versions ORDER BY user_turn_id, created_at, id")],
        "branches": export_branches(conn),
    }


def _version_record(row) -> dict:
    tokens = unpack_tokens(*row[3:])
    return {"user_turn_id": row[0], "created_at": row[1], "question": row[2],
            "token_ids": tokens.token_ids.tolist(), "texts": list(tokens.texts),
            "brightness": tokens.brightness.tolist()}


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


# ---------------------------------------------------------------------- writing
def _write(plan: dict, data_dir: Path) -> Path:
    def fill(store: ConversationStore) -> None:
        with store.transaction() as conn:
            _insert(conn, plan)

    return write_new_conversation(data_dir, fill)


def write_new_conversation(data_dir: Path, fill: Callable[[ConversationStore], None]) -> Path:
    """Create a conversation file all at once: ``fill`` writes a hidden temporary file,
    which then takes its final name; on any failure nothing is left behind."""
    final = new_conversation_path(data_dir)
    tmp = conversations_dir(data_dir) / f".import-{secrets.token_hex(6)}.tmp"
    try:
        store = ConversationStore.open(tmp)
        try:
            fill(store)
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
        f"INSERT INTO chunks ({', '.join(CHUNK_FIELDS)}) VALUES ({', '.join('?' * len(CHUNK_FIELDS))})",
        [tuple(int(v) if type(v) is bool else v for v in (c[f] for f in CHUNK_FIELDS))
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
        f"INSERT INTO semantic_entries ({', '.join(ENTRY_FIELDS)}) VALUES ({', '.join('?' * len(ENTRY_FIELDS))})",
        [tuple(e[f] for f in ENTRY_FIELDS) for e in doc["semantic_entries"]],
    )
    conn.executemany("INSERT INTO tool_data (name, json) VALUES (?, ?)",
                     [(name, json.dumps(note)) for name, note in doc["tool_notes"].items()])
    conn.executemany(
        "INSERT INTO answer_versions (user_turn_id, created_at, question, token_ids, brightness, text, "
        "text_lengths) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(v["user_turn_id"], v["created_at"], v["question"],
          *pack_tokens(np.asarray(v["token_ids"], np.int32), v["texts"], np.asarray(v["brightness"], np.int32)))
         for v in doc["answer_versions"]])
    conn.executemany("INSERT INTO branches (parent_turn_id, first_turn_id, created_at, tail) VALUES (?, ?, ?, ?)",
                     packed_branches(doc["branches"]))

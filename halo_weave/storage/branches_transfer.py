"""Branches, the export's part: the stashed branches in an export document, writing them
out, checking them, reading them back (:mod:`halo_weave.exchange.transfer` calls these;
the format is in :mod:`.transfer_document`; the file's part is :mod:`.branches`).

In the document each branch is ``{parent_turn_id, first_turn_id, created_at, tail}``
where ``tail`` is the stashed tail of :mod:`.branches` as a JSON object (BLOBs as
``{"$b": base64}``), with the index vectors left out (the app re-embeds them when the
branch is shown) and branches nested in it written the same way, in place.  Import
checks every row (columns, types, sizes, that its ids are new to the document and
below its counters, that token BLOBs agree with their counts) before anything is
written.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import numpy as np

from ..errors import TransferError
from . import branches as stash
from .integrity import shape_problem
from .transfer_checks import check_token_ids

#: Column -> kind: i int, f number, s text, b BLOB, t tail; a trailing ? allows null.
_COLUMNS: dict[str, dict[str, str]] = {
    "turns": {"turn_id": "i", "role": "s", "created_at": "f", "complete": "i"},
    "chunks": {"id": "i", "turn_id": "i", "chunk_index": "i", "role": "s", "start": "i", "token_count": "i",
               "live": "i", "pinned": "i", "brightness_at_prune": "i?", "tool_result": "i"},
    "chunk_tokens": {"chunk_id": "i", "token_ids": "b", "brightness": "b", "text": "s", "text_lengths": "b"},
    "semantic_entries": {"chunk_id": "i", "turn_id": "i", "chunk_index": "i", "role": "s", "text": "s",
                         "token_count": "i", "context_hash": "s", "embedding": "b?", "model": "s?",
                         "dim": "i?", "reference_count": "i", "updated_at": "f"},
    "recalls": {"turn_id": "i", "chunk_id": "i", "live": "i"},
    "answer_versions": {"user_turn_id": "i", "created_at": "f", "question": "s?", "token_ids": "b",
                        "brightness": "b", "text": "s", "text_lengths": "b"},
    "branches": {"parent_turn_id": "i", "first_turn_id": "i", "created_at": "f", "tail": "t"},
}
_NO_VECTOR = ("embedding", "model", "dim")
MAX_DEPTH = 32


def _fail(where: str, problem: str):
    raise TransferError(f"The export is not valid: {where} {problem}. Nothing was imported.")


# ---------------------------------------------------------------------- export
def export_branches(conn) -> list[dict]:
    """Every stashed branch of the file, as document records."""
    return [{"parent_turn_id": p, "first_turn_id": f, "created_at": c, "tail": _exported(stash.unpack_tail(blob))}
            for p, f, c, blob in conn.execute(
                "SELECT parent_turn_id, first_turn_id, created_at, tail FROM branches "
                "ORDER BY parent_turn_id, first_turn_id")]


def _exported(tail: dict) -> dict:
    tables = {}
    for name, table in tail["tables"].items():
        columns = table["columns"]
        rows = [list(r) for r in table["rows"]]
        for i, column in enumerate(columns):
            if name == "semantic_entries" and column in _NO_VECTOR:
                for row in rows:
                    row[i] = None
            if column == "tail":
                for row in rows:
                    row[i] = _exported(stash.unpack_tail(base64.b64decode(row[i]["$b"])))
        tables[name] = {"columns": columns, "rows": rows}
    return {**tail, "tables": tables}


# ---------------------------------------------------------------------- import
def check_branches(records: Any, turns: set[int], chunks: set[int], counters: dict,
                   vocab_size: int | None) -> list[dict]:
    """Validate the document's ``branches``; returns them unchanged.  ``turns`` and
    ``chunks``: the ids of the document's shown conversation."""
    if type(records) is not list or len(records) > 100_000:
        _fail("branches", "must be a list of at most 100,000 branches")
    seen_turns, seen_chunks = set(turns), set(chunks)
    for i, record in enumerate(records):
        _check_record(record, f"branches[{i}]", seen_turns, seen_chunks, counters, vocab_size, 0)
    return records


def _check_record(record, where, seen_turns, seen_chunks, counters, vocab_size, depth) -> None:
    if type(record) is not dict or set(record) != {"parent_turn_id", "first_turn_id", "created_at", "tail"}:
        _fail(where, "must have exactly parent_turn_id, first_turn_id, created_at and tail")
    for key in ("parent_turn_id", "first_turn_id"):
        if type(record[key]) is not int or not -1 <= record[key] < counters["next_turn_id"]:
            _fail(f"{where}.{key}", "is not a turn id of this file")
    if type(record["created_at"]) not in (int, float):
        _fail(f"{where}.created_at", "must be a time")
    _check_tail(record["tail"], f"{where}.tail", record, seen_turns, seen_chunks, counters, vocab_size, depth)


def _check_tail(tail, where, record, seen_turns, seen_chunks, counters, vocab_size, depth) -> None:
    if depth > MAX_DEPTH:
        _fail(where, f"nests branches more than {MAX_DEPTH} deep")
    if type(tail) is not dict or type(tail.get("tables")) is not dict or type(tail.get("prefix", {})) is not dict:
        _fail(where, "must be an object with 'tables'")
    _check_prefix(tail.get("prefix", {}), f"{where}.prefix")
    tables = tail["tables"]
    if not set(tables) <= set(_COLUMNS):
        _fail(f"{where}.tables", f"may only hold {', '.join(_COLUMNS)}")
    rows = {name: _check_table(tables[name], f"{where}.tables.{name}", name) for name in tables}
    turn_ids = [r["turn_id"] for r in rows.get("turns", [])]
    if not turn_ids or min(turn_ids) != record["first_turn_id"] or min(turn_ids) <= record["parent_turn_id"]:
        _fail(where, "does not start with its first_turn_id after its parent")
    for turn_id in turn_ids:
        if turn_id in seen_turns or turn_id >= counters["next_turn_id"]:
            _fail(where, f"repeats turn id {turn_id} or is past the file's counter")
        seen_turns.add(turn_id)
    chunk_counts = {}
    for chunk in rows.get("chunks", []):
        if chunk["id"] in seen_chunks or chunk["id"] >= counters["next_chunk_id"] or chunk["turn_id"] not in turn_ids:
            _fail(where, f"has chunk {chunk['id']} that repeats an id or belongs to no turn of it")
        if chunk["start"] + chunk["token_count"] > counters["next_position"]:
            _fail(where, f"has chunk {chunk['id']} past the file's next position")
        seen_chunks.add(chunk["id"])
        chunk_counts[chunk["id"]] = chunk["token_count"]
    for tokens in rows.get("chunk_tokens", []):
        count = chunk_counts.pop(tokens["chunk_id"], None)
        problem = "belongs to no chunk of it" if count is None else shape_problem(
            count, tokens["token_ids"], tokens["brightness"], tokens["text"], tokens["text_lengths"])
        if problem:
            _fail(where, f"has tokens of chunk {tokens['chunk_id']} that are wrong ({problem})")
        check_token_ids(np.frombuffer(tokens["token_ids"], "<i4"), f"{where} tokens", vocab_size)
    if chunk_counts:
        _fail(where, f"has chunks without tokens ({sorted(chunk_counts)[:5]})")
    for nested_index, nested in enumerate(rows.get("branches", [])):
        nested_record = {**nested, "tail": None}
        if nested["parent_turn_id"] not in turn_ids:
            _fail(f"{where}.branches[{nested_index}]", "branches off a turn that is not in this tail")
        _check_tail(nested["tail"], f"{where}.branches[{nested_index}]", nested_record, seen_turns,
                    seen_chunks, counters, vocab_size, depth + 1)


def _check_prefix(prefix: dict, where: str) -> None:
    """The earlier turns' state a tail was stashed with: rows of ints (and BLOBs)."""
    shapes = {"chunks": "iiii?", "brightness": "ib", "recalls": "iii"}
    if not set(prefix) <= set(shapes):
        _fail(where, f"may only hold {', '.join(shapes)}")
    for name, rows in prefix.items():
        kinds = [k for k in shapes[name] if k != "?"]
        if type(rows) is not list:
            _fail(f"{where}.{name}", "must be a list")
        for i, row in enumerate(rows):
            if type(row) is not list or len(row) != len(kinds):
                _fail(f"{where}.{name}[{i}]", "has the wrong shape")
            for j, (value, kind) in enumerate(zip(row, kinds)):
                optional = name == "chunks" and j == 3
                _value(value, kind + ("?" if optional else ""), f"{where}.{name}[{i}]")


def _check_table(table, where, name) -> list[dict]:
    kinds = _COLUMNS[name]
    if type(table) is not dict or type(table.get("columns")) is not list or type(table.get("rows")) is not list:
        _fail(where, "must be an object of columns and rows")
    if sorted(map(str, table["columns"])) != sorted(kinds) or len(table["columns"]) != len(kinds):
        _fail(f"{where}.columns", f"must be {', '.join(kinds)}")
    out = []
    for i, row in enumerate(table["rows"]):
        if type(row) is not list or len(row) != len(kinds):
            _fail(f"{where}.rows[{i}]", "does not match the columns")
        values = {}
        for column, value in zip(table["columns"], row):
            values[column] = _value(value, kinds[column], f"{where}.rows[{i}].{column}")
        out.append(values)
    return out


def _value(value, kind: str, where: str):
    if value is None and kind.endswith("?"):
        return None
    kind = kind.rstrip("?")
    if kind == "i" and type(value) is int and abs(value) < 1 << 62:
        return value
    if kind == "f" and type(value) in (int, float):
        return value
    if kind == "s" and type(value) is str:
        return value
    if kind == "b" and type(value) is dict and set(value) == {"$b"} and type(value["$b"]) is str:
        try:
            return base64.b64decode(value["$b"], validate=True)
        except (binascii.Error, ValueError):
            pass
    if kind == "t":
        return value  # checked as a nested tail
    _fail(where, "has the wrong type")


def packed_branches(records: list[dict]) -> list[tuple]:
    """``branches`` rows (parent, first turn, created, packed tail) of checked records."""
    return [(r["parent_turn_id"], r["first_turn_id"], r["created_at"], stash.pack_tail(_packed(r["tail"])))
            for r in records]


def _packed(tail: dict) -> dict:
    tables = {}
    for name, table in tail["tables"].items():
        columns = table["columns"]
        rows = [list(r) for r in table["rows"]]
        if "tail" in columns:
            i = columns.index("tail")
            for row in rows:
                row[i] = {"$b": base64.b64encode(stash.pack_tail(_packed(row[i]))).decode("ascii")}
        tables[name] = {"columns": columns, "rows": rows}
    return {**tail, "tables": tables}

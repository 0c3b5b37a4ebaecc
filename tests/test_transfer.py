"""JSON export / import: exact round trip, and hostile files refused without side effects."""

from __future__ import annotations

import copy
import hashlib
import json
import random
from pathlib import Path

import numpy as np
import pytest

from conversation_writer import FRAMING, add_user, message, new_conversation, settings, stream_answer
from halo_weave.store import ConversationStore, conversations_dir, new_conversation_path
from halo_weave.exchange.transfer import (
    FORMAT, TransferError, export_conversation, export_document, import_conversation,
)


def build(path: Path) -> None:
    """A conversation with pruned, resurrected and pinned chunks, index entries and notes."""
    rng = random.Random(11)
    with ConversationStore.open(path) as store:
        conv = new_conversation()
        store.save_system_prompt(conv)
        for _ in range(5):
            store.save_turn(conv, add_user(conv, message(rng, 2)))
            store.save_turn(conv, stream_answer(conv, message(rng, 3), store, rng=rng))
            store.save_brightness(conv)
            store.save_chunks(conv, conv.prune_to_fit(400))
        store.save_chunks(conv, conv.resurrect([conv.graveyard()[-1].id]))
        store.save_chunks(conv, [conv.pin(conv.live_chunks()[-2].id)])
        for chunk in list(conv.chunks.values())[:6]:
            store.conn.execute(
                "INSERT INTO semantic_entries (chunk_id, turn_id, chunk_index, role, text, token_count,"
                " context_hash, embedding, model, dim, reference_count, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'all-MiniLM-L6-v2', 384, 2, 1700000000.5)",
                (chunk.id, *chunk.key, conv.chunk_text(chunk.id), chunk.token_count,
                 f"hash{chunk.id}", b"\0" * 1536),
            )
        store.save_tool_data("notes", {"user": {"name": "Ada", "pets": ["cat"]}})
        store.set_meta("embedding_model", "all-MiniLM-L6-v2")
        # Two other versions of the last answer (Regenerate), one given to an earlier wording.
        from halo_weave.storage.schema import pack_tokens

        question = max(t for t, turn in conv.turns.items() if turn.role == "user")
        for n, wording in enumerate((None, "an earlier wording of the question")):
            ids = np.arange(100 + n, 108 + n, dtype=np.int32)
            store.conn.execute(
                "INSERT INTO answer_versions (user_turn_id, created_at, question, token_ids, brightness, "
                "text, text_lengths) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (question, 1700000100.0 + n, wording,
                 *pack_tokens(ids, [f" w{n}{i}" for i in range(len(ids))], np.arange(len(ids), dtype=np.int32))))


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """A data directory holding one existing conversation (shared: building it is slow)."""
    return tmp_path_factory.mktemp("home")


@pytest.fixture(scope="module")
def exported(tmp_path_factory, data_dir) -> Path:
    source = new_conversation_path(data_dir)
    build(source)
    out = tmp_path_factory.mktemp("export") / "export.json"
    export_conversation(source, out)
    return out


def as_version(current: dict, version: int) -> dict:
    """Today's document as an older version wrote it (names differ; no answer versions,
    no branches)."""
    old = copy.deepcopy(current)
    old["version"] = version
    del old["branches"]
    if version == 4:
        return old
    del old["answer_versions"]
    if version == 3:
        return old
    for row in old["chunks"]:
        row["brightness_at_deletion"] = row.pop("brightness_at_prune")
    old["tokens"]["deleted"] = old["tokens"].pop("pruned")
    if version == 1:
        for row in old["chunks"] + old["semantic_entries"]:
            row["sentence_id"] = row.pop("chunk_index")
    return old


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_an_older_version_document_is_still_read(exported, tmp_path, version):
    """Version 4 had no branches; version 3 also had no answer versions; version 2 also named ``brightness_at_prune``
    ``brightness_at_deletion`` and the ``pruned`` token column ``deleted``; version 1 also
    named ``chunk_index`` ``sentence_id``.  Importing any gives the same conversation
    (without other versions of answers)."""
    current = json.loads(exported.read_text())
    assert all("chunk_index" in c and "sentence_id" not in c for c in current["chunks"])
    assert current["semantic_entries"] and all("chunk_index" in e for e in current["semantic_entries"])
    assert any(c["brightness_at_prune"] is not None for c in current["chunks"])
    path = tmp_path / f"v{version}.json"
    path.write_text(json.dumps(as_version(current, version)))

    imported = import_conversation(path, tmp_path)
    with ConversationStore.open(imported, create=False) as store:
        kept = current["answer_versions"] if version == 4 else []
        assert export_document(store) == {**current, "answer_versions": kept, "branches": []}
        conv = store.load(settings(), FRAMING)
        assert {c["id"]: c["chunk_index"] for c in current["chunks"]} == {
            c.id: c.key[1] for c in conv.chunks.values()}
        assert {c["id"]: c["brightness_at_prune"] for c in current["chunks"]} == {
            c.id: c.brightness_at_prune for c in conv.chunks.values()}

    # An older document that uses a newer name is refused like any unknown field.
    mixed = copy.deepcopy(current)
    mixed["version"] = version
    path.write_text(json.dumps(mixed))
    words = {1: "sentence_id", 2: "brightness_at_deletion", 3: "answer_versions", 4: "branches"}[version]
    with pytest.raises(TransferError, match=words):
        import_conversation(path, tmp_path)


def test_export_import_round_trip(exported, data_dir, tmp_path):
    original = json.loads(exported.read_text())
    assert original["format"] == FORMAT and original["version"] == 5
    versions = original["answer_versions"]
    assert [v["question"] for v in versions] == [None, "an earlier wording of the question"]
    assert versions[1]["texts"][:2] == [" w10", " w11"] and versions[1]["brightness"][:3] == [0, 1, 2]
    assert any(t is True for t in original["tokens"]["pruned"])
    assert any(t is True for t in original["tokens"]["pinned"])
    assert all("embedding" not in e for e in original["semantic_entries"])

    imported = import_conversation(exported, data_dir)
    assert imported.parent == conversations_dir(data_dir)
    with ConversationStore.open(imported, create=False) as store:
        assert export_document(store) == original
        embeddings = store.conn.execute("SELECT embedding, model FROM semantic_entries").fetchall()
        assert embeddings and all(row == (None, None) for row in embeddings)
        conv = store.load(settings(), FRAMING)
        # The imported conversation is a working one: it keeps going where it stopped.
        turn = add_user(conv, "and now?")
        assert conv.chunks[turn.chunk_ids[0]].start == original["metadata"]["next_position"]
    again = tmp_path / "again.json"
    export_conversation(imported, again)
    assert json.loads(again.read_text()) == original


def test_an_empty_conversation_round_trips(tmp_path):
    data_dir = tmp_path / "home"
    source = new_conversation_path(data_dir)
    ConversationStore.open(source).close()
    out = tmp_path / "empty.json"
    export_conversation(source, out)
    imported = import_conversation(out, data_dir)
    with ConversationStore.open(imported) as store:
        assert export_document(store) == json.loads(out.read_text())


def test_an_imported_copy_gets_a_kv_cache_name_of_its_own(tmp_path):
    """The name the model server saves a conversation's cache under names one file: a copy
    sharing it would read back (and overwrite) the original's cache."""
    from halo_weave.storage.transfer_document import CACHE_KEY_META

    data_dir = tmp_path / "home"
    source = new_conversation_path(data_dir)
    with ConversationStore.open(source) as store:
        store.set_meta(CACHE_KEY_META, "the-original")
    out = tmp_path / "copy.json"
    export_conversation(source, out)
    assert CACHE_KEY_META not in json.loads(out.read_text())["metadata"]["extra"]
    with ConversationStore.open(import_conversation(out, data_dir)) as store:
        assert store.get_meta(CACHE_KEY_META) is None


# ---------------------------------------------------------------------- refusals
def _set(path: str, value):
    def mutate(doc):
        *parents, last = path.split(".")
        node = doc
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return mutate


def _duplicate_position(doc):
    doc["tokens"]["position"][5] = doc["tokens"]["position"][4]


def _drop_turn(doc):
    del doc["turns"][0]


def _orphan_entry(doc):
    doc["semantic_entries"][0]["chunk_id"] = 999_999


def _shorter_column(doc):
    doc["tokens"]["text"].pop()


def _pruned_mismatch(doc):
    doc["tokens"]["pruned"][0] = not doc["tokens"]["pruned"][0]


MUTATIONS = {
    "wrong format": (_set("format", "chatgpt-export"), "not a Halo Weave export"),
    "newer version": (_set("version", 6), "version 6"),
    "version of a missing question": (_set("answer_versions.0.user_turn_id", 999_999), "not a user turn"),
    "version columns of different lengths": (_set("answer_versions.0.texts", []), "different lengths"),
    "version as text": (_set("version", "1"), "version '1'"),
    "token id as text": (_set("tokens.token_id.3", "17"), "tokens.token_id"),
    "brightness as float": (_set("tokens.brightness.0", 12.5), "tokens.brightness"),
    "huge brightness": (_set("tokens.brightness.0", 2**40), "outside"),
    "negative token id": (_set("tokens.token_id.0", -5), "outside"),
    "huge position counter": (_set("metadata.next_position", 2**60), "outside"),
    "boolean as number": (_set("chunks.0.live", 1), "true or false"),
    "unknown role": (_set("turns.0.role", "narrator"), "role"),
    "duplicated position": (_duplicate_position, "duplicated"),
    "chunk of a missing turn": (_drop_turn, "not in the file"),
    "index entry of a missing chunk": (_orphan_entry, "not in the file"),
    "columns of different lengths": (_shorter_column, "different lengths"),
    "pruned flag disagreeing": (_pruned_mismatch, "disagrees"),
    "counter behind the data": (_set("metadata.next_chunk_id", 0), "next_chunk_id"),
    "extra field": (_set("chunks.0.colour", "red"), "unknown fields"),
    "time as text": (_set("turns.0.created_at", "yesterday"), "time"),
    "huge system prompt": (_set("system_prompt.text", "x" * (50 << 20)), "characters long"),
}


def _write_json(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc))
    return path


RAW = {
    "truncated": (lambda text: text[: len(text) // 2], "not valid JSON"),
    "not an object": (lambda text: "[1, 2, 3]", "expected a JSON object"),
    "NaN": (lambda text: text.replace('"reference_count":2', '"reference_count":NaN', 1), "NaN"),
    "number with 400 digits": (lambda text: text.replace('"version":5', '"version":' + "9" * 400, 1),
                               "out of range"),
    "deep nesting": (lambda text: text[:-1] + ',"x":' + "[" * 100_000 + "]" * 100_000 + "}",
                     "not a usable export"),
}


def digests(data_dir: Path) -> dict[str, str]:
    folder = conversations_dir(data_dir)
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def assert_rejected(source: Path, data_dir: Path, words: str) -> None:
    before = digests(data_dir)
    with pytest.raises(TransferError) as caught:
        import_conversation(source, data_dir)
    assert words in str(caught.value)
    assert digests(data_dir) == before  # no new file, no half import, nothing changed


@pytest.mark.parametrize("kind", MUTATIONS)
def test_import_rejects_invalid_documents(kind, exported, data_dir, tmp_path):
    mutate, words = MUTATIONS[kind]
    doc = copy.deepcopy(json.loads(exported.read_text()))
    mutate(doc)
    assert_rejected(_write_json(tmp_path / "bad.json", doc), data_dir, words)


@pytest.mark.parametrize("kind", RAW)
def test_import_rejects_malformed_files(kind, exported, data_dir, tmp_path):
    change, words = RAW[kind]
    bad = tmp_path / "bad.json"
    bad.write_text(change(exported.read_text()))
    assert_rejected(bad, data_dir, words)


def test_import_rejects_50_mb_of_junk(data_dir, tmp_path):
    junk = tmp_path / "junk.json"
    junk.write_bytes(random.Random(3).randbytes(50 << 20))
    conversations_dir(data_dir)
    assert_rejected(junk, data_dir, "not a Halo Weave export")


def test_import_rejects_a_missing_file(data_dir, tmp_path):
    conversations_dir(data_dir)
    assert_rejected(tmp_path / "nowhere.json", data_dir, "Could not read")

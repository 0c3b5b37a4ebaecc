"""Export never overwrites a database; import refuses what would break the conversation later."""

from __future__ import annotations

import copy
import json
import os
import sqlite3
import time
from pathlib import Path

import pytest

from conversation_writer import FRAMING, add_user, settings
from halo_weave.store import ConversationStore, conversations_dir
from halo_weave.errors import TransferError
from halo_weave.exchange.transfer import MAX_ID, export_conversation, import_conversation
from halo_weave.server.vocab import bundled_vocab_size

from .helpers import build_conversation, what_the_user_sees


@pytest.fixture(scope="module")
def conversation(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("conv") / "talk.halo.db"
    build_conversation(path)
    return path


@pytest.fixture(scope="module")
def document(conversation, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("export") / "talk.json"
    export_conversation(conversation, out)
    return json.loads(out.read_text(encoding="utf-8"))


def no_temp_files(folder: Path) -> bool:
    return not [p for p in folder.iterdir() if p.name.endswith(".tmp")]


# ---------------------------------------------------------------------- export
def test_export_onto_the_open_conversation_is_refused(conversation, tmp_path):
    path = tmp_path / "talk.halo.db"
    path.write_bytes(conversation.read_bytes())
    with ConversationStore.open(path, create=False) as store:
        before = what_the_user_sees(store)
        link = tmp_path / "innocent.json"
        link.symlink_to(path)
        for target in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), link,
                       tmp_path / "." / path.name):
            with pytest.raises(TransferError, match="open conversation's own file|is a database"):
                export_conversation(store, target)
        assert what_the_user_sees(store) == before
    with ConversationStore.open(path, create=False) as store:
        assert what_the_user_sees(store) == before
    assert no_temp_files(tmp_path)


def test_export_onto_another_conversation_is_refused_by_content(conversation, tmp_path):
    other = tmp_path / "holiday-notes.json"  # a database, whatever its name says
    other.write_bytes(conversation.read_bytes())
    before = other.read_bytes()
    named = tmp_path / "other.halo.db"
    named.write_bytes(before)
    with ConversationStore.open(conversation, create=False) as store:
        for target in (other, named):
            with pytest.raises(TransferError, match="is a database"):
                export_conversation(store, target)
    assert other.read_bytes() == before and named.read_bytes() == before
    with pytest.raises(TransferError, match="not a regular file"):
        export_conversation(conversation, tmp_path)  # a folder
    assert no_temp_files(tmp_path)


def test_failed_export_names_the_field_and_leaves_no_temp_file(conversation, tmp_path):
    path = tmp_path / "talk.halo.db"
    path.write_bytes(conversation.read_bytes())
    conn = sqlite3.connect(path)  # a foreign program writes bytes that are not UTF-8
    chunk_id = conn.execute("SELECT chunk_id FROM chunk_tokens ORDER BY chunk_id LIMIT 1").fetchone()[0]
    conn.execute("DROP TRIGGER chunk_tokens_sum_au")
    conn.execute("UPDATE chunk_tokens SET text = CAST(X'FF' || CAST(text AS BLOB) AS TEXT) WHERE chunk_id = ?",
                 (chunk_id,))
    conn.commit()
    conn.close()
    out = tmp_path / "out.json"
    with pytest.raises(TransferError, match=r"tokens\.text\[\d+\] holds text that is not valid Unicode"):
        export_conversation(path, out)
    assert not out.exists() and no_temp_files(tmp_path)


# ---------------------------------------------------------------------- import
def write(tmp_path: Path, doc: dict, name: str = "import.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def refused(path: Path, data_dir: Path, match: str, vocab_size: int | None = None) -> None:
    existing = sorted(conversations_dir(data_dir).iterdir())
    with pytest.raises(TransferError, match=match):
        import_conversation(path, data_dir, vocab_size)
    assert sorted(conversations_dir(data_dir).iterdir()) == existing  # nothing written


def test_token_ids_outside_the_vocabulary_are_refused(document, tmp_path):
    vocab = bundled_vocab_size()
    assert vocab == 151936  # the bundled Qwen2.5-Coder-0.5B
    # (The test tokenizer's ids reach 50,000: fold them into the vocabulary first.)
    document = copy.deepcopy(document)
    document["tokens"]["token_id"] = [i % vocab for i in document["tokens"]["token_id"]]
    document["system_prompt"]["token_ids"] = [i % vocab for i in document["system_prompt"]["token_ids"]]
    doc = copy.deepcopy(document)
    doc["tokens"]["token_id"][7] = vocab
    refused(write(tmp_path, doc), tmp_path / "home",
            rf"tokens\.token_id\[7\] = {vocab} is outside the model's vocabulary \(0\.\.{vocab - 1}", vocab)
    doc = copy.deepcopy(document)
    doc["system_prompt"]["token_ids"][0] = 10**6
    refused(write(tmp_path, doc), tmp_path / "home", r"system_prompt\.token_ids\[0\].*vocabulary", vocab)
    # The same document within the vocabulary imports.
    assert import_conversation(write(tmp_path, document), tmp_path / "home", vocab).is_file()


def test_huge_ids_are_refused_and_ids_at_the_limit_keep_working(document, tmp_path):
    home = tmp_path / "home"
    doc = copy.deepcopy(document)
    doc["turns"][-1]["turn_id"] = 2**31 - 1
    refused(write(tmp_path, doc), home, r"turns\[\d+\]\.turn_id = 2147483647 is outside")
    doc = copy.deepcopy(document)
    doc["metadata"]["next_chunk_id"] = 2**31
    refused(write(tmp_path, doc), home, r"metadata\.next_chunk_id = 2147483648 is outside")

    # The largest accepted counters: the conversation goes on (no OverflowError, no open turn).
    doc = copy.deepcopy(document)
    doc["metadata"]["next_turn_id"] = doc["metadata"]["next_chunk_id"] = MAX_ID + 1
    path = import_conversation(write(tmp_path, doc), home)
    with ConversationStore.open(path, create=False) as store:
        conv = store.load(settings(), FRAMING)
        turn = add_user(conv, "still here?")
        store.save_turn(conv, turn)
        assert turn.turn_id == MAX_ID + 1 and conv.open_turn is None
    with ConversationStore.open(path, create=False) as store:
        assert MAX_ID + 1 in store.load(settings(), FRAMING).turns


def test_lone_surrogates_are_refused_naming_the_field(document, tmp_path):
    doc = copy.deepcopy(document)
    doc["tokens"]["text"][3] = "\ud800"
    refused(write(tmp_path, doc), tmp_path / "home", r"tokens\.text\[3\] holds text that is not valid Unicode")
    doc = copy.deepcopy(document)
    doc["tool_notes"]["notes"]["user"]["name"] = "A\udfffda"
    refused(write(tmp_path, doc), tmp_path / "home", r"tool_notes\.notes\.user\.name holds text")


def test_symlink_to_dev_zero_is_refused_at_once(tmp_path):
    link = tmp_path / "export.json"
    link.symlink_to("/dev/zero")
    started = time.monotonic()
    refused(link, tmp_path / "home", "not a regular file")
    assert time.monotonic() - started < 10  # read nothing (it used to read until MemoryError)


@pytest.mark.timeout(30)
def test_fifo_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "export.json"
    os.mkfifo(fifo)
    refused(fifo, tmp_path / "home", "not a regular file")


def test_folder_and_missing_file_are_refused(tmp_path):
    refused(tmp_path, tmp_path / "home", "not a regular file")
    refused(tmp_path / "nothing.json", tmp_path / "home", "Could not read nothing.json")


def test_oversize_file_is_refused_without_reading_it(tmp_path, monkeypatch):
    from halo_weave.storage import transfer_document

    monkeypatch.setattr(transfer_document, "MAX_FILE_BYTES", 1000)  # a 1 GB file takes too long to write
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 2000)
    refused(big, tmp_path / "home", "more than the")

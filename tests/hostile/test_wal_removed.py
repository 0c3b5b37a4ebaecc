"""The -wal file deleted by another program while the app runs: no save reports success."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conversation_writer import FRAMING, settings
from halo_weave.store import ConversationStore

CHILD = textwrap.dedent("""
    import os, random, signal, sys
    from conversation_writer import add_user, message, new_conversation, stream_answer
    from halo_weave.store import ConversationStore, StoreError

    rng = random.Random(3)
    store = ConversationStore.open(sys.argv[1])
    conv = new_conversation()
    store.save_system_prompt(conv)
    for n in range(6):
        store.save_turn(conv, add_user(conv, message(rng, 1)))
        print("committed", n, flush=True)
    os.unlink(sys.argv[1] + "-wal")  # a sync tool or cleaner
    for n in range(6, 9):
        try:
            store.save_turn(conv, add_user(conv, message(rng, 1)))
            print("committed", n, flush=True)
        except StoreError as exc:
            print("refused", n, exc, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # then the app is killed
""")


@pytest.mark.timeout(120)
def test_deleted_wal_stops_saving_and_loses_no_committed_turn(tmp_path):
    import tests_path  # the folder holding conversation_writer

    path = tmp_path / "talk.halo.db"
    # The child finds the test helpers and the package through its path, as pytest's does.
    paths = [tests_path.FOLDER, str(Path(tests_path.FOLDER).parent), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    child = subprocess.run([sys.executable, "-c", CHILD, str(path)], env=env,
                           capture_output=True, text=True, timeout=100)
    lines = child.stdout.splitlines()
    committed = [line for line in lines if line.startswith("committed")]
    refused = [line for line in lines if line.startswith("refused")]
    assert len(committed) == 6, child.stdout + child.stderr
    assert len(refused) == 3
    assert "was deleted by another program" in refused[0] and "was not saved" in refused[0]
    with ConversationStore.open(path, create=False) as store:
        conv = store.load(settings(), FRAMING)
        users = [t for t in conv.turns.values() if t.role == "user"]
        assert len(users) == 6  # every turn reported committed is there


def test_deleted_conversation_file_is_written_back_and_saving_stops(tmp_path):
    import random

    from conversation_writer import add_user, message, new_conversation
    from halo_weave.store import StoreJournalLost

    rng = random.Random(4)
    path = tmp_path / "talk.halo.db"
    store = ConversationStore.open(path)
    conv = new_conversation()
    store.save_system_prompt(conv)
    for _ in range(4):
        store.save_turn(conv, add_user(conv, message(rng, 1)))
    for suffix in ("", "-wal", "-shm"):  # a cleaner empties the folder
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with pytest.raises(StoreJournalLost, match="was deleted by another program.*written back"):
        store.save_turn(conv, add_user(conv, message(rng, 1)))
    store.close()
    with ConversationStore.open(path, create=False) as reopened:
        users = [t for t in reopened.load(settings(), FRAMING).turns.values() if t.role == "user"]
        assert len(users) == 4

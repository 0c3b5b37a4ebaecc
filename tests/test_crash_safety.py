"""A writer killed with SIGKILL at random moments never loses a committed turn."""

from __future__ import annotations

from conversation_writer import crash_trials
from halo_weave.store import new_conversation_path


def test_fifty_kills_lose_no_committed_turn(tmp_path):
    # Each trial forks a process that chats into the same file (user turns saved
    # DB-first, answers streamed in batches, brightness, prune, resurrection) and kills
    # it at a random moment; the file must then pass integrity_check, rehydrate, and
    # hold every turn the writer had reported committed, with identical tokens.
    failures = crash_trials(new_conversation_path(tmp_path), trials=50, seed=7)
    assert failures == []

"""A writer killed with SIGKILL at random moments never loses a committed turn."""

from __future__ import annotations

from conversation_writer import crash_trials
from halo_weave.store import new_conversation_path


def test_fifty_kills_lose_no_committed_turn(tmp_path):
    # Each trial forks a process that chats into the same file (user turns saved
    # DB-first, answers streamed in batches, brightness, prune, resurrection, and
    # Regenerate / Edit and resend / Continue / a flip between answer versions, an edit or
    # regenerate of an earlier message starting a branch, a switch between branches) and kills
    # it at a random moment; the file must then pass integrity_check, rehydrate, and
    # hold every turn the writer had reported committed, with identical tokens; an
    # answer being regenerated, edited away or flipped is either still there or among
    # the versions, an answer being continued lost nothing, and a turn that left the
    # conversation shown is in a stashed branch with identical tokens.
    stats: dict = {}
    failures = crash_trials(new_conversation_path(tmp_path), trials=50, seed=7, stats=stats)
    assert failures == []
    assert stats["mid_answer"] > 0, "some kills cut an answer mid-stream"
    assert stats.get("retiring", 0) > 0 and stats.get("growing", 0) > 0, stats
    assert stats.get("branching", 0) > 0 and stats.get("switching", 0) > 0 and stats["stashed"] > 0, stats

"""Branches on a long conversation: how long an edit of an earlier message and a switch
between the two branches take, and what a stashed tail weighs.

    python scripts/bench_branches.py [--json] [--tokens 200000] [--switches 6] [--at 0.5]

Builds a conversation of about ``--tokens`` tokens in a real SQLite file (messages of the
crash test's words, answers added whole, pruned to a 4,000-token context as the app
does), then edits the user message ``--at`` of the way through (a branch of the tail
after it) and switches back and forth ``--switches`` times through the session
(``Branches.switch``: one transaction, then the conversation read again from the file).
Figures: ``edit_ms`` (stash the tail and save the new message), ``switch_ms`` (median),
``tail_turns``, ``tail_tokens``, ``stash_bytes`` (the stored tail, compressed) and
``stash_bytes_per_token``.  The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the crash test's scripted conversation


def build(path: Path, tokens: int, rng: random.Random):
    from conversation_writer import FRAMING, ScriptedBackend, message, settings, tokenize
    from halo_weave.session import ChatSession
    from halo_weave.store import ConversationStore

    backend = ScriptedBackend(rng)
    session = ChatSession(settings(max_context_tokens=4000))
    session.connect(backend, backend.model_info(), FRAMING)
    session.open(ConversationStore.open(path))
    conv = session.conv
    while conv.total_token_count() < tokens:
        for role in ("user", "assistant"):
            pieces = tokenize(message(rng, rng.randint(1, 4)))
            turn = conv.add_turn(role, [i for i, _ in pieces], [t for _, t in pieces])
            session.store.save_turn(conv, turn)
        session.prune()
    return session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=200_000)
    parser.add_argument("--switches", type=int, default=6)
    parser.add_argument("--at", type=float, default=0.5, help="where the edited message is (0..1)")
    parser.add_argument("--json", action="store_true", help="print only the JSON figures")
    args = parser.parse_args()
    from conversation_writer import tokenize
    from halo_weave.storage import branches

    rng = random.Random(5)
    workdir = Path(tempfile.mkdtemp(prefix="halo-weave-bench-branches-"))
    session = build(workdir / "conversation.db", args.tokens, rng)
    conv = session.conv
    users = [t for t in conv.turns if conv.turns[t].role == "user"]
    target = users[int(args.at * (len(users) - 1))]
    tail_turns = sum(1 for t in conv.turns if t >= target)
    tail_tokens = sum(c.token_count for t in conv.turns if t >= target for c in conv.content_chunks(t))
    total = conv.total_token_count()

    pieces = tokenize("An edited message about something else entirely.")
    start = time.perf_counter()
    edited = session.branches.edit_message(target, [i for i, _ in pieces], [t for _, t in pieces])
    edit_ms = (time.perf_counter() - start) * 1000
    (stash_bytes,) = session.store.conn.execute("SELECT length(tail) FROM branches").fetchone()

    times = []
    shown_at = edited.turn_id
    for i in range(args.switches):
        step = -1 if i % 2 == 0 else 1
        start = time.perf_counter()
        session.branches.switch(shown_at, step)
        times.append((time.perf_counter() - start) * 1000)
        shown_at = next(iter(branches.states(session.conv, session.store)))
    figures = {
        "tokens": total,
        "live_tokens": session.conv.live_token_count(),
        "tail_turns": tail_turns,
        "tail_tokens": tail_tokens,
        "edit_ms": round(edit_ms, 1),
        "switch_ms": round(statistics.median(times), 1),
        "switch_ms_max": round(max(times), 1),
        "stash_bytes": stash_bytes,
        "stash_bytes_per_token": round(stash_bytes / max(tail_tokens, 1), 2),
    }
    session.store.close()
    if not args.json:
        for key, value in figures.items():
            print(f"{key:>24}: {value}")
    print(json.dumps(figures))

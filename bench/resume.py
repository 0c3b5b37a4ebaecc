"""Reopening a conversation: its saved KV cache read back against a prefill, on the bundled model.

    python scripts/bench_resume.py [--json] [--quick] [--tokens 4000] [--reopens 5] [--threads 2]
        [--messages 60] [--app-reopens 10] [--conversation FILE] [--keep FOLDER] [--parts engine,server,app]

Three parts.  *The app* (:mod:`bench.resume_app`): a ``--messages``-message conversation built by
bench_chat.py at the app's defaults (answers of at most ``--max-new-tokens``), its server's
saved cache and pruned spans kept as a user's server keeps them when they quit right after
the last answer; then ``--app-reopens`` times, each from the same state (a fresh copy of the
file, the server started anew on a copy of that cache folder), the real
window opens it at start and sends the next message (a LoCoMo-style line that brings back
pruned context), the time to its first token measured from Enter:
``resume_ttft_s`` (typed at 60 words a minute from the moment it opened),
``resume_ttft_pasted_s`` (pasted and sent 2 s after opening), ``resume_ttft_no_state_s``
(the same with no saved cache: the prefill path), ``restore_s`` (the server's restore when
opening), ``resume_prefill_warm_up_s``, ``enter_to_visible_ms`` (Enter until the message is
shown), ``resume_recalled_tokens`` (what the message brought back), ``state_bytes_per_token``
(the saved cache's size over the context's tokens); medians.  And what the first message
waited for, as a timeline (``resume_timeline``: per mode, the reopening of median time to
first token, each phase's ``start_ms`` and ``end_ms`` from the opening; drawn as text lines
before the figures): the warm-up (the saved cache read back, or the prefill), the memory
loading, each read-ahead, then from Enter the tokenizing, the search, the choice of what came
back, and the request until the first token (with the server's own time and what it ran).

*The server* (the real one, on loopback, its saved caches in a temporary
folder): a conversation of ``--tokens`` tokens is reopened ``--reopens`` times after
another conversation took the cache, each time

* cold, as before: the first message's generate runs the whole context
  (``cold_first_token_s``: from the request to the first token);
* warmed by a prefill (a restore that finds no saved cache: ``prefill_warm_up_s``);
* restored from the cache the server saved while idle (``server_restore_s``), then the first
  message (``first_token_after_restore_s``).

*The engine* in this process: the cache of the same context saved and read back against
a prefill of the same ids: ``logits_max_abs_diff`` and ``attention_max_abs_diff`` of the
next token (0.0 means bit-identical), ``save_s`` (copy out and write), ``load_s`` (read
and put back), ``saved_mb``.  Medians over the reopenings; ``--quick``: 1,500 tokens,
two reopenings.  The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

#: The chat benchmark's command line, run to build the app part's conversation.
BENCH_CHAT = Path(__file__).resolve().parents[1] / "scripts" / "bench_chat.py"

CHAT = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n{}<|im_end|>\n"
TEXT = ("The lighthouse keeper of Port Quillan kept a logbook of every ship that passed, the "
        "weather at dawn and dusk, and the colour of the sea; on calm nights he wrote letters. ")
OTHER = "My sister Ana opened a small bakery near the river in Lisbon, and her dog sleeps there. "
MESSAGE = "<|im_start|>user\nWhich ship passed first?<|im_end|>\n<|im_start|>assistant\n"


def conversation(tokenize, text: str, tokens: int) -> list[int]:
    """Turns of ``text`` until the context holds about ``tokens`` tokens."""
    ids = tokenize("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n")
    salt = uuid.uuid4().hex[:8]  # no run reuses another's cache
    turn = 0
    while len(ids) < tokens:
        turn += 1
        ids += tokenize(CHAT.format(f"[{salt}] Part {turn}. " + text * 6, f"Noted, part {turn}. " + text * 2))
    return ids[:tokens]


def first_token_s(client, ids: list[int]) -> float:
    started = time.perf_counter()
    stream = client.stream(input_ids=ids, max_length=1, temperature=0, output_attentions=True, stop_sequence=[])
    for _ in stream:
        return time.perf_counter() - started
    return time.perf_counter() - started


def bench_server(args, folder: Path) -> dict:
    from halo_weave.kobold_client import KoboldClient
    from halo_weave.server.kv_files import file_name
    from halo_weave.server.launcher import start_server

    process = start_server(port=0, extra_args=["--threads", str(args.threads), "--kv-dir", str(folder)])
    try:
        process.wait_ready(timeout=300)
        with KoboldClient(process.url) as client:
            client.model_info()

            def tokenize(text):  # chat-template text: its markers are the model's control tokens
                return [i for i, _ in client.tokenize(text, parse_special=True)]

            ids = conversation(tokenize, TEXT, args.tokens)
            other = conversation(tokenize, OTHER, min(args.tokens, 600))
            message = tokenize(MESSAGE)
            key = f"bench-{uuid.uuid4().hex}"

            def evict():
                client.conversation = f"other-{uuid.uuid4().hex}"
                client.prepare(other)

            cold, prefill, restore, after = [], [], [], []
            for _ in range(args.reopens):
                evict()
                client.conversation = None
                cold.append(first_token_s(client, ids + message))
                evict()
                client.conversation = f"unsaved-{uuid.uuid4().hex}"
                prefill.append(client.restore(ids)["seconds"])
            client.conversation = key
            client.restore(ids)
            deadline = time.monotonic() + 120
            while not (folder / file_name(key)).exists() and time.monotonic() < deadline:
                time.sleep(0.1)  # saved once the server has been idle
            time.sleep(0.5)
            for _ in range(args.reopens):
                evict()
                client.conversation = key
                answer = client.restore(ids)
                if answer["restored"] != len(ids):
                    raise RuntimeError(f"the saved cache was not read back: {answer}")
                restore.append(answer["seconds"])
                after.append(first_token_s(client, ids + message))
            return {
                "cold_first_token_s": round(statistics.median(cold), 3),
                "prefill_warm_up_s": round(statistics.median(prefill), 3),
                "restore_s": round(statistics.median(restore), 3),
                "first_token_after_restore_s": round(statistics.median(after), 3),
                "saved_file_mb": round((folder / file_name(key)).stat().st_size / 1e6, 1),
            }
    finally:
        process.stop()


def bench_engine(args, folder: Path) -> dict:
    import numpy as np

    from halo_weave.server.kv_files import StateFiles
    from halo_weave.server.llamacpp.engine import LlamaEngine
    from halo_weave.server.loader import bundled_gguf

    engine = LlamaEngine(bundled_gguf(), threads=args.threads)
    try:
        kv = engine.kv
        ids = conversation(engine.encode, TEXT, args.tokens)
        context, last = ids[:-1], ids[-1]

        def next_token():
            logits, rows = kv.step([last], attention=True, per_layer=True)
            kv.sync(context)
            return logits, rows

        kv.reset()
        kv.sync(context)
        want_logits, want_rows = next_token()
        files = StateFiles(folder / "engine")
        started = time.perf_counter()
        blob = kv.export_state()
        files.save("bench", engine.fingerprint(), list(kv.ids), blob)
        save_s = time.perf_counter() - started
        kv.reset()
        kv.sync(conversation(engine.encode, OTHER, 600))
        started = time.perf_counter()
        saved, _ = files.load("bench", engine.fingerprint())
        if not kv.import_state(saved.ids, saved.blob):
            raise RuntimeError("the saved cache was not read back")
        load_s = time.perf_counter() - started
        logits, rows = next_token()
        return {
            "logits_max_abs_diff": float(np.abs(logits - want_logits).max()),
            "attention_max_abs_diff": float(np.abs(rows - want_rows).max()),
            "save_s": round(save_s, 3),
            "load_s": round(load_s, 3),
            "saved_mb": round(len(blob) / 1e6, 1),
        }
    finally:
        engine.close()


def build_conversation(args, path: Path, kv_dir: Path) -> dict:
    """A ``--messages``-message conversation made by bench_chat.py at the app's defaults
    (answers up to ``--max-new-tokens``), kept at ``path``, its server's saved cache and
    pruned spans in ``kv_dir`` (what the user's server holds when they quit); returns
    bench_chat's figures."""
    command = [sys.executable, str(BENCH_CHAT), "--messages", str(args.messages),
               "--max-new-tokens", str(args.max_new_tokens), "--keep", str(path), "--kv-dir", str(kv_dir),
               "--json"]
    if args.threads:
        command += ["--threads", str(args.threads)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    chat = json.loads(done.stdout.strip().splitlines()[-1])
    return {"chat_messages": args.messages, "chat_max_new_tokens": args.max_new_tokens,
            "chat_ttft_median_s": chat.get("ttft_median_s")}


def main(argv=None) -> int:
    """The command line (``scripts/bench_resume.py``): the figures, one JSON object last."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="1,500 tokens and two reopenings for the server part; 20 messages and two "
                             "reopenings for the app part")
    parser.add_argument("--tokens", type=int, default=None, help="the conversation's context (default 4000)")
    parser.add_argument("--reopens", type=int, default=None, help="reopenings measured (default 5)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--messages", type=int, default=None,
                        help="app part: messages of the conversation bench_chat.py builds (default 60)")
    parser.add_argument("--max-new-tokens", type=int, default=96,
                        help="app part: answer length while the conversation is built (default 96)")
    parser.add_argument("--conversation", type=Path, default=None,
                        help="app part: reopen this conversation file instead of building one (the "
                             "server's saved caches from when it was built: the folder kv beside it)")
    parser.add_argument("--keep", type=Path, default=None, metavar="FOLDER",
                        help="app part: keep the conversation built (FOLDER/conversation.sqlite) and its "
                             "server's saved caches (FOLDER/kv), for --conversation")
    parser.add_argument("--app-reopens", type=int, default=None, help="app part: reopenings (default 10)")
    parser.add_argument("--parts", default="engine,server,app", help="which parts to run (default all)")
    parser.add_argument("--no-recall-note", action="store_true",
                        help="app part: the app without its recall note (the setting recall_note off)")
    args = parser.parse_args(argv)
    if args.no_recall_note:
        os.environ["HALO_WEAVE_RECALL_NOTE"] = "0"
    args.messages = args.messages or (20 if args.quick else 60)
    args.app_reopens = args.app_reopens or (2 if args.quick else 10)
    parts = set(args.parts.split(","))
    args.tokens = args.tokens or (1500 if args.quick else 4000)
    args.reopens = args.reopens or (2 if args.quick else 5)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from halo_weave.server.llamacpp.safety import cpu_name

    figures = {"tokens": args.tokens, "reopens": args.reopens, "threads": args.threads, "cpu": cpu_name(),
               "load_average_before": round(os.getloadavg()[0], 2)}
    with tempfile.TemporaryDirectory(prefix="bench-resume-") as folder:
        if "engine" in parts:
            figures.update(bench_engine(args, Path(folder)))
        if "server" in parts:
            figures.update(bench_server(args, Path(folder)))
            cold = figures["cold_first_token_s"]
            figures["reopen_speedup"] = round(
                cold / max(1e-6, figures["restore_s"] + figures["first_token_after_restore_s"]), 1)
            figures["server_restore_s"] = figures.pop("restore_s")
        if "app" in parts:
            from bench.resume_app import bench_app

            conversation = args.conversation
            if conversation is None:
                built = args.keep or Path(folder) / "built"
                conversation = built / "conversation.sqlite"
                figures.update(build_conversation(args, conversation, built / "kv"))
            figures.update(bench_app(args, conversation, conversation.parent / "kv", Path(folder) / "app"))
    figures["load_average_after"] = round(os.getloadavg()[0], 2)
    if "resume_timeline" in figures:
        from bench.resume_app import timeline_lines

        print("\n".join(timeline_lines(figures)))
    if not args.json:
        for name, value in figures.items():
            if name not in ("resume_runs", "resume_timeline"):
                print(f"{name:>30}: {value}")
    print(json.dumps(figures))
    return 0

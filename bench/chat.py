"""A scripted chat through the real server and the app's turn logic: what a user feels.

60 user messages (speaker A's lines of a LoCoMo dev dialogue), each answered by the
model, at the app's default settings (budget, resurrection, sampling), through the
app's turn pipeline (:class:`~halo_weave.session.TurnPipeline`, the steps the window
runs): tokenize the message, search the semantic index and resurrect within the
resurrection budget, add the turn (saved first), fit the model window, stream the answer
(each token's attention applied as it arrives), then finish the turn (save, index, prune
to the budget).  Indexing runs in place
between turns (the app runs it on a thread), outside the timed part.

The user *types* each message (``--typing-cps``, default 5 characters a second, 60 words
a minute) and the app reads ahead as it does in the window: the prompt of the message so
far goes to the server after each finished word (:func:`type_ahead`, simulated clock), so
Enter leaves the server the last word, the closing framing and the answer's opening to run.
``--typing-cps 0``: every message pasted and sent at once (no read-ahead).  The TTFT is
from Enter: a read-ahead still running then (``wait_at_enter_s``) plus the request's own
time to its first token (``sent_to_first_token_s``).

Per message: time to first token seen by the client, the server's own TTFT and where it
went (``sync_s``: surgery and new tokens, with the done event's ``kv_store_s`` /
``kv_restore_s`` / ``kv_insert_s`` inside it; ``last_prompt_token_s``: the last prompt
token, its attention read and any K-shift; ``first_sample_s``; ``http_and_client_s``: the
rest of the client's wait), the done event's ``kv`` report (reused / dropped / inserted /
restored / stored / appended / re-run tokens) and what the turn resurrected and pruned.  Top level (the engine named first):
``ttft_median_s``, ``ttft_p95_s``, ``tokens_per_s``, ``reprefilled_tokens`` (tokens
run by the exact path: re-runs that are neither new nor resurrected), ``prunes``,
``resurrections``, ``resurrected_tokens``, ``new_tokens``.

Progress goes to stderr, one line per message (also with ``--json``): its TTFT and where
it went, the tokens new / restored / inserted / re-run, the answer's length and time.

The server starts with the options the app gives it (``Settings.server_args``: a KV
cache sized from the budget, grown on demand; ``cache_growths`` counts the growths, whose
re-run tokens count in ``reprefilled_tokens``); ``--full-context`` leaves them out.

``--model`` names the server's model (a bundled one, ``qwen`` or ``smollm2``, or a GGUF file;
default: the bundled default).

Usage: ``python scripts/bench_chat.py [--engines llamacpp,transformers] [--model NAME] [--messages 60]
[--threads N] [--max-new-tokens N] [--full-context] [--keep FILE] [--kv-dir FOLDER] [--json]``; the
last line is one JSON object.  ``--keep`` copies the conversation the chat built (a file the app
opens); ``--kv-dir``: where the server saves its cache and pruned spans (what a reopening reads back).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .locomo import load as load_locomo

LOCOMO = Path("/work/shared/data/locomo/locomo_dev.json")


def user_messages(count: int) -> list[str]:
    messages = []
    for dialogue in load_locomo(LOCOMO):
        messages += [t.text for t in dialogue.turns if t.role == "user"]
        if len(messages) >= count:
            break
    return messages[:count]


class SyncIndexer:
    """The app's indexing queue, run in place (between turns, outside the timed part)."""

    def __init__(self, index) -> None:
        self.index = index

    def queue_pending(self, conv) -> None:
        self.index.index_pending(conv)

    def queue(self, conv, chunk_ids, label: str = "") -> None:
        self.index.index_chunks(conv, chunk_ids)


def progress(row: dict, total: int, started: float) -> str:
    """One line per message for stderr: how far, the TTFT and where it went."""
    ahead = (f"typed in {row['typing_s']:.0f} s with {row['read_aheads']} read-aheads"
             f" ({row['read_ahead_s']:.2f} s, the first {row.get('first_read_ahead_s', 0):.2f}),"
             f" waited {row['wait_at_enter_s']:.2f} s at Enter; " if "typing_s" in row else "")
    return (f"message {row['message'] + 1}/{total}: {ahead}ttft {row['ttft_s']:.2f} s (sync {row['sync_s'] or 0:.2f}"
            f" [store {row.get('kv_store_s') or 0:.2f} restore {row.get('kv_restore_s') or 0:.2f}"
            f" insert {row.get('kv_insert_s') or 0:.2f}], last prompt token {row['last_prompt_token_s']:.2f},"
            f" first sample {row['first_sample_s']:.2f}, http+client {row['http_and_client_s']:.2f});"
            f" new {row.get('kv_appended', 0)}, restored {row.get('kv_restored', 0)},"
            f" inserted {row.get('kv_inserted', 0)}, rerun {row.get('kv_rerun', 0)} tokens;"
            f" answer {row['generated']} tokens in {row['answer_s']:.1f} s; finish {row["finish_s"]:.1f} s;"
            + (f" cache grown to {row['kv_grown_to']} cells in {row.get('kv_grow_s', 0):.2f} s (copied"
               f" {row.get('kv_carried', 0)}, re-ran {row.get('kv_regrown', 0)} tokens);"
               if row.get("kv_grown_to") else "") +
            f" {time.perf_counter() - started:.0f} s so far")


def type_ahead(session, client, index, text: str, cps: float) -> dict:
    """Type ``text`` at ``cps`` characters a second and read ahead as the app does: once a
    word is finished (a space or line typed) and no read-ahead is in flight, the prompt of
    the message so far (``session.server.draft_plan``, what it keeps of that ranked as
    Enter ranks it, ``session.server.draft_prompt``) goes to the server; one that ends
    while the user has typed on is followed at once by the next.  The clock is simulated:
    typing costs no wall time here, each read-ahead costs what it took (tokenize, search,
    plan, the server's sync).  Enter comes right after the last character, with no pause
    (a pause would let the app read ahead the last word too); a read-ahead still running
    then makes the answer wait (``wait_at_enter_s``, counted in the TTFT) -- the server
    stops it after its current batch, and the read-aheads after the first are one batch."""
    from halo_weave.session.read_ahead import settled_text

    enter = len(text) / cps
    word_ends = [(i + 1) / cps for i in range(1, len(text)) if text[i].isspace() and not text[i - 1].isspace()]
    from halo_weave.errors import BackendError

    clock, done_at, last, runs, spent, first, steps, failures = 0.0, 0.0, None, 0, 0.0, {}, [], []
    for end in word_ends:
        clock = max(clock, end)
        if clock >= enter:
            break
        draft = settled_text(text[:int(clock * cps + 1e-9)])
        if not draft or draft == last:
            continue
        started = time.perf_counter()
        pieces = session.server.tokenize(draft)
        matches = index.search(draft) if session.recall.can_recall() else []
        ids = [i for i, _ in pieces]
        plan = session.server.draft_plan(index, matches, ids)
        order = session.recall.ranking(plan.recalled, draft)() if session.recall.keeps_part(plan.recalled) else None
        ids = session.server.draft_prompt(plan, ids, order, draft)
        planned = time.perf_counter()
        try:
            answer = client.prepare(ids, max_length=session.settings.sampling.max_new_tokens)
        except BackendError as exc:  # the app logs it and goes on: Enter then runs more
            failures.append(str(exc)[:120])
            answer = {}
        took = time.perf_counter() - started
        kv = answer.get("kv", {})
        steps.append([round(took, 3), answer.get("seconds"), round(planned - started, 3)] +
                     [kv.get(k, 0) for k in ("appended", "restored", "inserted", "dropped", "stored", "spans_removed",
                                             "spans_inserted", "grown_to")] +
                     [int(answer.get("compacted", False)), answer.get("spread_cells", 0)])
        if not first:
            first = {"first_read_ahead_s": round(took, 4), "first_read_ahead_kv": answer.get("kv", {})}
        clock += took
        done_at, last, runs, spent = clock, draft, runs + 1, spent + took
    return {"typing_s": round(enter, 2), "read_aheads": runs, "read_ahead_s": round(spent, 4),
            "wait_at_enter_s": round(max(0.0, done_at - enter), 4), **first,
            # each read-ahead: [seconds, the server's, tokenize+search+plan, then the server's
            # kv report: appended, restored, inserted, dropped, stored, spans removed / inserted,
            # the cells the cache grew to (0: none), then whether it packed the cache after and
            # the cells a decode then attends over beyond the live context's]
            "read_ahead_steps": steps, "read_ahead_failures": failures}


def chat(url: str, messages: list[str], home: Path, say, max_new_tokens: int | None,
         changes: dict | None = None, typing_cps: float = 0.0) -> dict:
    from halo_weave.core.chat_template import build_framing, detect_template
    from halo_weave.kobold_client import KoboldClient
    from halo_weave.memory.embedder import Embedder
    from halo_weave.semantic_index import SemanticIndex
    from halo_weave.session import ChatSession
    from halo_weave.settings import Settings
    from halo_weave.store import ConversationStore

    settings = Settings().replace(**(changes or {}))
    if max_new_tokens:
        settings = settings.replace(max_new_tokens=max_new_tokens)
    client = KoboldClient(url)
    info = client.model_info()
    framing = build_framing(lambda text: client.tokenize(text, parse_special=True),
                            detect_template(info.chat_template))
    session = ChatSession(settings)
    session.connect(client, info, framing)
    store = ConversationStore.open(home / "bench.sqlite")
    session.open(store)
    if session.prompt.framed_text():
        session.prompt.apply(settings.chat.system_prompt, session.prompt.pieces(settings.chat.system_prompt))
    embedder = Embedder()
    embedder.load()
    index = SemanticIndex(store.conn, settings, embedder, lock=store.lock)
    index.load()
    session.recall.index, session.indexer = index, SyncIndexer(index)

    rows = []
    started = time.perf_counter()
    read_ahead = typing_cps > 0 and session.server.can_read_ahead
    for n, text in enumerate(messages):
        typed = type_ahead(session, client, index, text, typing_cps) if read_ahead else {}
        t0 = time.perf_counter()
        message = session.pipeline.send(text, index.search)
        resurrected = message.recalled
        answered = session.pipeline.answer()
        request, stream, end = answered.request, answered.stream, answered.end
        prepared_s = answered.requested_at - t0
        sent, first, ended = answered.sent_at, answered.first_token_at, answered.ended_at
        done = stream.done.raw
        kv = done.get("kv") or {}
        timings = done.get("timings", {})
        sent_to_first = (first or ended) - sent
        ttft = typed.get("wait_at_enter_s", 0.0) + sent_to_first
        server_ttft = timings.get("time_to_first_token_s") or 0.0
        prefill = timings.get("prefill_s") or 0.0
        row = {
            "message": n,
            "ttft_s": round(ttft, 4),
            "sent_to_first_token_s": round(sent_to_first, 4),
            "server_ttft_s": server_ttft,
            # where the time went: sync (surgery + new tokens), the last prompt token (its
            # attention read, K-shift), the first sample, and the rest (HTTP, parsing, client)
            "sync_s": timings.get("sync_s"),
            "last_prompt_token_s": round(prefill - (timings.get("sync_s") or 0.0), 4),
            "first_sample_s": round(server_ttft - prefill, 4),
            "http_and_client_s": round(sent_to_first - server_ttft, 4),
            "prepare_s": round(prepared_s, 4),
            "answer_s": round(ended - sent, 4),
            "finish_s": round(answered.finished_at - ended, 4),
            "prompt_tokens": len(request["input_ids"]),
            "generated": len(stream.tokens),
            "tokens_per_s": done.get("timings", {}).get("tokens_per_s"),
            "resurrected_chunks": len(resurrected),
            "resurrected_tokens": sum(c.token_count for c in resurrected),
            "pruned_chunks": sum(1 for c in end.pruned if not c.framing),
            "user_tokens": len(message.ids),
            **{f"kv_{k}": v for k, v in kv.items()},
            **typed,
        }
        rows.append(row)
        say(json.dumps(row))
        print(progress(row, len(messages), started), file=sys.stderr, flush=True)
    store.close()
    summary = summarize(rows)
    summary["wall_s"] = round(time.perf_counter() - started, 1)
    return summary


def summarize(rows: list[dict]) -> dict:
    ttft = np.array([r["ttft_s"] for r in rows])
    rates = [r["tokens_per_s"] for r in rows if r["tokens_per_s"]]
    generated = sum(r["generated"] for r in rows)
    return {
        "messages": len(rows),
        "ttft_median_s": round(float(np.median(ttft)), 3),
        "ttft_p95_s": round(float(np.percentile(ttft, 95)), 3),
        "ttft_max_s": round(float(ttft.max()), 3),
        "tokens_per_s": round(float(np.median(rates)), 2) if rates else None,
        "generated_tokens": generated,
        "answer_s_total": round(sum(r["answer_s"] for r in rows), 1),
        "index_s_total": round(sum(r["finish_s"] for r in rows), 1),
        # the exact path's re-runs and the live tokens re-run into a grown cache
        "reprefilled_tokens": int(sum(r.get("kv_rerun", 0) + r.get("kv_regrown", 0) for r in rows)),
        "cache_growths": sum(1 for r in rows if r.get("kv_grown_to"))
        + sum(1 for r in rows for step in r.get("read_ahead_steps", []) if step[10]),
        "new_tokens": int(sum(r.get("kv_appended", 0) for r in rows)),
        "inserted_tokens": int(sum(r.get("kv_inserted", 0) for r in rows)),
        "restored_tokens": int(sum(r.get("kv_restored", 0) for r in rows)),
        "resurrected_tokens": int(sum(r["resurrected_tokens"] for r in rows)),
        "resurrections": sum(1 for r in rows if r["resurrected_chunks"]),
        "resurrected_chunks": sum(r["resurrected_chunks"] for r in rows),
        "prunes": sum(1 for r in rows if r["pruned_chunks"]),
        "pruned_chunks": sum(r["pruned_chunks"] for r in rows),
        "exact_path_turns": sum(1 for r in rows if r.get("kv_mode") == "exact"),
        "sent_to_first_token_median_s": round(float(np.median([r["sent_to_first_token_s"] for r in rows])), 3),
        "read_aheads": sum(r.get("read_aheads", 0) for r in rows),
        "read_ahead_s_median": round(float(np.median([r.get("read_ahead_s", 0.0) for r in rows])), 3),
        "wait_at_enter_median_s": round(float(np.median([r.get("wait_at_enter_s", 0.0) for r in rows])), 3),
        "messages_waiting_at_enter": sum(1 for r in rows if r.get("wait_at_enter_s", 0.0) > 0),
        "read_ahead_failures": sum(len(r.get("read_ahead_failures", [])) for r in rows),
        "per_message": rows,
    }


def settings_changes(pairs: list[str]) -> dict:
    """``NAME=VALUE`` pairs as typed settings changes (the field's type decides the value's)."""
    from halo_weave.settings import Settings

    defaults = Settings()
    fields = {name: type(defaults.value(name)) for name in Settings.names()}
    changes = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or name not in fields:
            raise SystemExit(f"--set {pair}: expected NAME=VALUE with NAME a setting")
        kind = fields[name]
        changes[name] = (value.lower() in ("1", "true", "yes")) if kind is bool else kind(value)
    return changes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="llamacpp")
    parser.add_argument("--model", default=None,
                        help="the server's --model: qwen, smollm2 or a GGUF file (default: the bundled default)")
    parser.add_argument("--messages", type=int, default=60)
    parser.add_argument("--threads", type=int, default=None, help="server threads (default: the server's)")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="override the app's default answer length (default: leave it)")
    parser.add_argument("--full-context", action="store_true",
                        help="start the server without the app's options (its KV cache spans the model's window)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="change one of the app's settings for the chat (repeatable), e.g. "
                             "prune_order=brightness: an A/B of a default against the alternative")
    parser.add_argument("--seed", type=int, default=1,
                        help="the sampler's seed for every answer, so that two runs of the same code "
                             "hold the same chat (0: the app's default, a new seed each answer)")
    parser.add_argument("--typing-cps", type=float, default=5.0,
                        help="the user types each message at this many characters a second while "
                             "the app reads ahead (5 = 60 words a minute, a fast typist); 0: every "
                             "message pasted and sent at once, no read-ahead")
    parser.add_argument("--keep", type=Path, metavar="FILE",
                        help="copy the conversation file the chat built to FILE (the first engine's)")
    parser.add_argument("--kv-dir", type=Path, metavar="FOLDER",
                        help="the server saves the conversation's KV cache and pruned spans here (the first "
                             "engine's; default: a temporary folder), as the app's server does in its cache folder")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    changes = settings_changes(args.set)
    if args.seed > 0:
        changes.setdefault("sampler_seed", args.seed)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    say = (lambda *a: None) if args.json else (lambda *a: print(*a, file=sys.stderr, flush=True))
    from halo_weave.server.launcher import start_server

    messages = user_messages(args.messages)
    figures: dict = {"load_average_1m": round(os.getloadavg()[0], 2)}
    engines = args.engines.split(",")
    from halo_weave.settings import Settings

    # The app starts its server with options from its settings (a KV cache sized from the
    # budget); --full-context leaves them out (the cache spans the model's window).
    app_args = [] if args.full_context else Settings().replace(**changes).server_args()
    figures["server_args"] = app_args
    figures["settings_changed"] = changes
    figures["typing_cps"] = args.typing_cps
    figures["model"] = args.model or "default"
    for engine in engines:
        extra = (["--engine", engine, *app_args] + (["--threads", str(args.threads)] if args.threads else [])
                 + (["--model", args.model] if args.model else []))
        with tempfile.TemporaryDirectory(prefix="hw-bench-chat-") as tmp:
            os.environ["HALO_WEAVE_HOME"] = tmp
            kv_dir = args.kv_dir if args.kv_dir and engine == engines[0] else Path(tmp) / "kv-states"
            server = start_server(port=0, extra_args=[*extra, "--kv-dir", str(kv_dir)])
            try:
                url = server.wait_ready(timeout=600)
                figures[engine] = chat(url, messages, Path(tmp), say, args.max_new_tokens, changes,
                                       args.typing_cps)
                if args.keep and engine == engines[0]:
                    import shutil

                    args.keep.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(Path(tmp) / "bench.sqlite", args.keep)
            finally:
                server.stop()
        summary = {k: v for k, v in figures[engine].items() if k != "per_message"}
        say(engine, json.dumps(summary))
    for key in ("ttft_median_s", "ttft_p95_s", "tokens_per_s", "reprefilled_tokens"):
        figures[key] = figures[engines[0]][key]
    figures["engine"] = engines[0]
    figures["load_average_1m_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(figures))
    return 0


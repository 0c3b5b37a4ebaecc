"""The 20-message chat: facts said early, pruned, then asked about; does the model answer?

Four facts said in the first four messages (a cat called Mochi, a flight to Lisbon on
3 March, a sister Ana who is a nurse, a Python function called ``add_vat``), eleven
unrelated questions, then four questions about the facts: 19 user messages, each
answered.  The chat runs through the app's turn pipeline (:class:`~halo_weave.session.TurnPipeline`:
search, resurrect, save, fit the window, stream, finish and prune, the window's steps;
messages pasted, indexing in place between turns) against a real server started here on
127.0.0.1, at the app's default settings except the target (``max_context_tokens``,
700 by default: the facts are pruned long before they are asked about).  In text mode the
app's reader would light the heatmap with the bundled model's attention; it is not run
here: by default it ranks nothing for pruning.

Each fact question is scored twice: ``answered`` (the answer contains the fact, any of
its usual spellings: :func:`contains_fact`) and ``live`` (the chunk that states the
fact was in the context the model read).  Per message: the time to the first token from
the request (``ttft_s``), the prompt's tokens, the chunks and tokens brought back for it,
and ``reread_tokens``: the prompt after the first token that differs from the previous
request and its answer, what a server that caches text prompts by prefix reads again
(the whole of it for a server without KV surgery; ours edits its cache in place).

Servers (``--server-kind``): ``ours`` (the bundled server, ``python -m
halo_weave.server`` with the options the app gives it) or ``llama-cpp-python`` (its
OpenAI-compatible server, which the app drives in text mode; started as the tests start
it, ``tests/llama_cpp_server_main.py``).  ``--model``: a GGUF path (default: the
server's default model).  The sampler's seed is fixed (``--seed``), so a rerun of the
same code and model holds the same chat; ``--greedy`` samples at temperature 0.

Usage: ``python scripts/chat_facts.py [--server-kind ours|llama-cpp-python] [--model
GGUF] [--target 700] [--seed 1] [--greedy] [--json]``; progress on stderr, one line per
message; with ``--json`` the last line is one JSON object (``facts_answered``,
``facts_live``, ``facts``, ``per_message``, the TTFT medians, the machine).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from halo_weave.server.kv_files import common_prefix

ROOT = Path(__file__).resolve().parents[1]

#: Starts llama-cpp-python's server with the model settings this CPU survives.
LLAMA_CPP_MAIN = ROOT / "tests" / "llama_cpp_server_main.py"
#: Seconds a server may take to load its model on a busy 2-core machine.
START_TIMEOUT_S = 600


@dataclass(frozen=True)
class Fact:
    """A fact said early and asked about late."""

    name: str
    said: str  # the user's message that states it
    asked: str  # the question about it
    marker: str  # text found only in the chunk that states it
    spellings: tuple[str, ...]  # regular expressions; an answer matching one contains the fact


FACTS = (
    Fact("cat", "I have a cat called Mochi. She is grey and white and likes to sleep on my keyboard.",
         "What is my cat called?", "Mochi", (r"\bmochi\b",)),
    Fact("flight", "I'm flying to Lisbon for a conference. My flight is on 3 March, early in the morning.",
         "When is my flight to Lisbon?", "Lisbon",
         (r"\b0?3(rd)?\s*(of\s+)?march\b", r"\bmarch\s+(the\s+)?0?3(rd)?\b", r"\bthird\s+(of\s+)?march\b",
          r"\bmarch\s+(the\s+)?third\b", r"\b0?3[/.-]0?3\b")),
    Fact("sister", "My sister Ana works as a nurse at the city hospital, mostly on night shifts.",
         "What does my sister Ana do for a living?", "nurse", (r"\bnurse\b", r"\bnursing\b")),
    Fact("function", "Here is a small Python function I wrote for my shop:\n\n"
                     "```python\ndef add_vat(price):\n    return round(price * 1.23, 2)\n```",
         "What was the name of the Python function I showed you?", "add_vat", (r"\badd\\?_vat\b", r"\badd vat\b")),
)

#: Between the facts and the questions: nothing to do with either.
UNRELATED = (
    "How do I boil an egg so that the yolk stays soft?",
    "What is the capital of Australia?",
    "Why is the sky blue?",
    "Can you suggest a name for a blog about vegetable gardening?",
    "How many legs does a spider have?",
    "Give me one tip for learning to juggle.",
    "What is a good stretch for a stiff neck?",
    "Explain what a prime number is.",
    "What should I pack for a day of hiking?",
    "How do I keep basil alive indoors?",
    "What is the difference between weather and climate?",
)


def messages() -> list[tuple[str, Fact | None, str]]:
    """The chat's user messages in order: (text, the fact it states or asks about, kind)."""
    return ([(f.said, f, "fact") for f in FACTS] + [(text, None, "unrelated") for text in UNRELATED]
            + [(f.asked, f, "question") for f in FACTS])


def contains_fact(answer: str, fact: Fact) -> bool:
    """Whether ``answer`` states ``fact`` in any of its spellings (case-insensitive;
    "3 March", "March 3rd", "the third of March" are one date)."""
    text = re.sub(r"\s+", " ", answer.replace("\u2019", "'").replace("*", "")).lower()
    return any(re.search(pattern, text) for pattern in fact.spellings)


def machine() -> dict:
    """The CPU's model name (``lscpu``) and the load average now."""
    name = ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        name = next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "")
    except (OSError, subprocess.SubprocessError):
        pass
    if not name:
        from halo_weave.server.llamacpp.safety import cpu_name

        name = cpu_name()
    return {"cpu": name, "cpus": len(os.sched_getaffinity(0)), "load_average": [round(x, 2) for x in os.getloadavg()]}


def start_ours(model: str | None, threads: int | None, settings, folder: Path):
    """The bundled server with the app's options; returns (url, stop)."""
    from halo_weave.server.launcher import start_server

    args = [*settings.server_args(), "--kv-dir", str(folder / "kv")] + (["--model", model] if model else [])
    args += ["--threads", str(threads)] if threads else []
    server = start_server(port=0, extra_args=args)
    try:
        return server.wait_ready(timeout=START_TIMEOUT_S), server.stop
    except BaseException:
        server.stop()
        raise


def start_llama_cpp(model: str | None, threads: int | None, n_ctx: int, folder: Path):
    """llama-cpp-python's OpenAI-compatible server; returns (url, stop).

    Its OpenMP threads wait as our server's do (:mod:`halo_weave.server.omp`): spinning
    without bound, its 2 threads on a 2-core machine that other work keeps busy took
    seconds per token, which measures the machine's load rather than the server."""
    import httpx

    from halo_weave.server.loader import bundled_gguf
    from halo_weave.server.omp import configure as configure_openmp

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    log = open(folder / "llama-cpp-server.log", "wb")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    configure_openmp(env)
    process = subprocess.Popen(
        [sys.executable, str(LLAMA_CPP_MAIN), "--model", str(model or bundled_gguf()), "--host", "127.0.0.1",
         "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", str(threads or len(os.sched_getaffinity(0)))],
        stdout=log, stderr=subprocess.STDOUT, env=env)

    def stop() -> None:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        log.close()

    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            stop()
            raise RuntimeError(f"llama_cpp.server exited: {(folder / 'llama-cpp-server.log').read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                return url, stop
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    stop()
    raise RuntimeError("llama_cpp.server did not answer in time")


def open_session(url: str, settings, folder: Path):
    """A :class:`ChatSession` on the server at ``url`` as the app connects to it, on a new
    conversation file in ``folder``, with its semantic index; returns (session, index, store)."""
    from halo_weave.backends import connect
    from halo_weave.backends.model_template import TemplateInUse
    from halo_weave.core.chat_template import AUTO, build_framing, detect_template
    from halo_weave.memory.embedder import Embedder
    from halo_weave.semantic_index import SemanticIndex
    from halo_weave.session import ChatSession
    from halo_weave.store import ConversationStore

    client = connect(url)
    info = client.model_info()
    template = detect_template(info.chat_template, settings.server.chat_template or AUTO)
    framing = build_framing(lambda text: client.tokenize(text, parse_special=True), template)
    client.use_template(TemplateInUse(template), settings.server.chat_template or AUTO)
    session = ChatSession(settings)
    session.connect(client, info, framing)
    store = ConversationStore.open(folder / "chat.sqlite")
    session.open(store)
    prompt = settings.effective_system_prompt
    if session.prompt.framed_text():
        session.prompt.apply(prompt, session.prompt.pieces(prompt))
    embedder = Embedder()
    embedder.load()
    index = SemanticIndex(store.conn, settings, embedder, lock=store.lock)
    index.load()
    from .chat import SyncIndexer  # the app's indexing queue, run in place between turns

    session.recall.index, session.indexer = index, SyncIndexer(index)
    return session, index, store


def fact_chunks(conv, turn_id: int, fact: Fact) -> list[int]:
    """The chunks of the turn that stated ``fact`` whose text has its marker."""
    return [c.id for c in conv.content_chunks(turn_id) if fact.marker.lower() in conv.chunk_text(c.id).lower()]


def chat(session, index, say) -> tuple[list[dict], list[dict]]:
    """Send the chat's messages; returns (one row per message, one row per fact question)."""
    conv = session.conv
    stated: dict[str, int] = {}  # fact name -> the turn that stated it
    rows, facts = [], []
    previous: list[int] = []  # the last request's prompt and its answer
    previous_prompt = 0  # the length of the last request's prompt
    for n, (text, fact, kind) in enumerate(messages()):
        message = session.pipeline.send(text, index.search)
        recalled = message.recalled
        weigh_s = message.seconds.get("weigh", 0.0)  # ranking what came back, after Enter
        if kind == "fact":
            stated[fact.name] = message.turn.turn_id
        live_ids = {c.id for c in conv.live_chunks()}
        answered = session.pipeline.answer()
        request, stream, end = answered.request, answered.stream, answered.end
        prompt = request["input_ids"]
        shared = common_prefix(previous, prompt)
        sent, first, ended = answered.requested_at, answered.first_token_at, answered.ended_at
        answer = "".join(e.text for e in stream.tokens)
        changed_early = shared < previous_prompt
        previous, previous_prompt = prompt + [e.token_id for e in stream.tokens], len(prompt)
        row = {
            "message": n + 1, "kind": kind, "text": text,
            "ttft_s": round((first or ended) - sent + weigh_s, 3), "weigh_s": round(weigh_s, 3),
            "given_back": session.recall.given_back,
            "prompt_tokens": len(prompt), "live_tokens": conv.live_token_count(),
            "recalled_chunks": len(recalled), "recalled_tokens": sum(c.token_count for c in recalled),
            "reread_tokens": len(prompt) - shared,
            # the prompt differs from the last one before that one's answer: the chunks
            # brought back went in at their place, not just the ones the last exchange pruned
            "recalled_in_place": bool(recalled) and changed_early,
            "answer_tokens": len(stream.tokens), "answer_s": round(ended - sent, 2),
            "pruned_after": sum(1 for c in end.pruned if not c.framing),
            "answer": answer if kind == "question" else answer[:200],
        }
        rows.append(row)
        if kind == "question":
            chunk_ids = fact_chunks(conv, stated[fact.name], fact)
            recalled_ids = {c.id for c in recalled}
            facts.append({
                "fact": fact.name, "question": text, "answer": answer,
                "answered": contains_fact(answer, fact),
                "live": bool(chunk_ids) and all(c in live_ids for c in chunk_ids),
                "recalled_for_it": any(c in recalled_ids for c in chunk_ids),
                "chunks": chunk_ids, "prompt_tokens": len(prompt), "recalled_chunks": len(recalled),
            })
            row.update(answered=facts[-1]["answered"], fact_live=facts[-1]["live"])
        where = ", in place" if row["recalled_in_place"] else ""
        score = f"; answered {row['answered']}, live {row['fact_live']}: {answer[:120]!r}" if kind == "question" else ""
        say(f"message {n + 1}/{len(messages())} ({kind}): ttft {row['ttft_s']:.2f} s, prompt {len(prompt)} "
            f"tokens (re-read {row['reread_tokens']}), recalled {row['recalled_chunks']} chunks{where} / "
            f"{row['recalled_tokens']} tokens ({row['given_back']} given back), answer {row['answer_tokens']} tokens in {row['answer_s']:.1f} s"
            + score)
    return rows, facts


def median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def summary(rows: list[dict], facts: list[dict]) -> dict:
    """The figures of the run: facts answered and live, TTFTs, what was brought back."""
    in_place = [r for r in rows if r["recalled_in_place"]]
    others = [r for r in rows if not r["recalled_in_place"]]
    return {
        "facts_answered": sum(f["answered"] for f in facts),
        "facts_live": sum(f["live"] for f in facts),
        "facts_total": len(facts),
        "ttft_median_s": median([r["ttft_s"] for r in rows]),
        "ttft_recalled_in_place_median_s": median([r["ttft_s"] for r in in_place]),
        "ttft_recalled_in_place_max_s": max((r["ttft_s"] for r in in_place), default=None),
        "ttft_other_median_s": median([r["ttft_s"] for r in others]),
        "ttft_other_max_s": max((r["ttft_s"] for r in others), default=None),
        "messages_recalling": sum(1 for r in rows if r["recalled_chunks"]),
        "messages_recalled_in_place": len(in_place),
        "recalled_chunks": sum(r["recalled_chunks"] for r in rows),
        "recalled_tokens": sum(r["recalled_tokens"] for r in rows),
        "prompt_tokens_at_questions": [r["prompt_tokens"] for r in rows if r["kind"] == "question"],
        "facts": facts,
        "per_message": rows,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-kind", choices=("ours", "llama-cpp-python"), default="ours",
                        help="the bundled server (default) or llama-cpp-python's OpenAI-compatible "
                             "server in text mode")
    parser.add_argument("--model", default=None,
                        help="GGUF file the server loads (default: the server's default model)")
    parser.add_argument("--target", type=int, default=700,
                        help="the target the context is pruned to, max_context_tokens (default 700)")
    parser.add_argument("--seed", type=int, default=1, help="the sampler's seed for every answer (default 1)")
    parser.add_argument("--greedy", action="store_true", help="sample at temperature 0 (default: the app's)")
    parser.add_argument("--n-ctx", type=int, default=2048,
                        help="llama-cpp-python's context; its /v1/models does not say it, so the app "
                             "assumes 2048 (default 2048)")
    parser.add_argument("--threads", type=int, default=None,
                        help="the server's CPU threads (default: ours decides; llama-cpp-python: every core)")
    parser.add_argument("--no-recall-note", action="store_true",
                        help="without the recall note (the setting recall_note off)")
    parser.add_argument("--keep-share", type=float, default=None,
                        help="recall_keep_share: the share of a message's recall the server's "
                             "attention keeps (default: the app's; 1 keeps it whole)")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from halo_weave.settings import Settings

    changes = {"max_context_tokens": args.target, "sampler_seed": args.seed}
    if args.greedy:
        changes["temperature"] = 0.0
    if args.no_recall_note:
        changes["recall_note"] = False
    if args.keep_share is not None:
        changes["recall_keep_share"] = args.keep_share
    settings = Settings().replace(**changes)
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    before = machine()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hw-chat-facts-") as tmp:
        folder = Path(tmp)
        os.environ["HALO_WEAVE_HOME"] = tmp
        if args.server_kind == "ours":
            url, stop = start_ours(args.model, args.threads, settings, folder)
        else:
            url, stop = start_llama_cpp(args.model, args.threads, args.n_ctx, folder)
        try:
            session, index, store = open_session(url, settings, folder)
            try:
                model = session.model_info.name
                rows, facts = chat(session, index, say)
            finally:
                store.close()
                session.backend.close()
        finally:
            stop()
    figures = {"server_kind": args.server_kind, "model": args.model or model, "model_name": model,
               "target": args.target, "seed": args.seed, "threads": args.threads,
               "temperature": settings.sampling.temperature,
               "max_new_tokens": settings.sampling.max_new_tokens, "system_prompt": settings.effective_system_prompt,
               **summary(rows, facts), "wall_s": round(time.perf_counter() - started, 1),
               "cpu": before["cpu"], "cpus": before["cpus"], "load_average_start": before["load_average"],
               "load_average_end": machine()["load_average"]}
    say(f"facts answered {figures['facts_answered']}/{len(facts)}, live {figures['facts_live']}/{len(facts)}; "
        f"TTFT median {figures['ttft_median_s']} s, recalled in place {figures['ttft_recalled_in_place_median_s']} s, "
        f"others {figures['ttft_other_median_s']} s")
    if args.json:
        print(json.dumps(figures))
    else:
        for fact in facts:
            print(f"{fact['fact']}: answered {fact['answered']}, live {fact['live']}: {fact['answer'][:200]!r}")
    return 0


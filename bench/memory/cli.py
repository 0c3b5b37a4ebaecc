"""Does it remember?  Evidence recall on LoCoMo at a fixed context budget.

Replays each LoCoMo conversation turn by turn through the app's core code (conversation,
brightness, pruning, semantic index, resurrection, a store in a temp dir) with attention
teacher-forced from the bundled model, then asks every question (categories 1-4) from
the end-of-conversation state of each method and measures evidence recall: the fraction
of a question's evidence turns that have a live chunk.  Continuation fidelity (ΔNLL of
every assistant turn after the first prune against the model's full window, and the
share of that window's attention the policy kept) comes from the same replays.  See
docs/memory-benchmark.md.

    python scripts/bench_memory.py --quick
    python scripts/bench_memory.py --json --plot docs/memory-brightness.png

The last line with ``--json`` is one JSON object of figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from halo_weave.memory import room  # noqa: E402
from halo_weave.rules import WITHOUT_BRIGHTNESS  # noqa: E402

from .. import locomo  # noqa: E402
from . import fidelity, recall_dump, retrieval  # noqa: E402
from .methods import (QuestionContext, answer_brightness, answer_full, answer_halo,  # noqa: E402
                      answer_halo_dry, answer_halo_in_place, answer_halo_kept, answer_rag, keep_recent)
from .policies import BASE_RULE, METHODS, QUICK_METHODS, RETIRED, past_search, policies  # noqa: E402
from .replay import Policy, replay, tokenize_dialogue  # noqa: E402
from .report import MethodResult, diagnose, merge_outputs, plot_brightness, table  # noqa: E402

DEFAULT_DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "locomo" / "locomo_dev.json"

QUICK_CONVERSATIONS = ["conv-30"]
RAG_CANDIDATES = 200


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(DEFAULT_DATA), help="LoCoMo-format JSON file")
    p.add_argument("--prune-to", type=int, default=1024, help="P: live tokens after each exchange")
    p.add_argument("--context", type=int, default=2048, help="C: the model's context at question time")
    # Pinned to the budget the published figures were measured with, so a change of the
    # app's default (now 512, chosen for chatting) does not move them.
    p.add_argument("--max-new-tokens", type=int, default=200,
                   help="room kept for the answer (default 200, the documented runs' budget)")
    p.add_argument("--hysteresis", type=float, default=0.75,
                   help="halo-hyst prunes to this fraction of P once over P")
    p.add_argument("--conversations", default="", help="comma-separated sample ids (default: all)")
    p.add_argument("--methods", default="", help="comma-separated methods (default: all but the retired ones, "
                        "bench/memory/policies.py RETIRED)")
    p.add_argument("--max-turns", type=int, default=0,
                   help="replay only the first N turns (questions whose evidence lies there)")
    p.add_argument("--kv", choices=["llamacpp", "shift", "exact", "engine"], default="shift",
                   help="teacher-forcing source: transformers with ContextShift (default), "
                        "the llama.cpp engine with its KV surgery, or transformers exact / the "
                        "server's engine (bench/memory/attention.py)")
    p.add_argument("--window", type=int, default=8192,
                   help="the reference context of the fidelity figures (the model's window)")
    p.add_argument("--half-life", type=int, default=256,
                   help="half-life (generated tokens) of the decayed-mass variants")
    p.add_argument("--recall-only", action="store_true",
                   help="no replay for fifo and rag (theirs only gives fidelity figures)")
    p.add_argument("--embed-cache", default="",
                   help="file keeping MiniLM vectors of indexed texts between runs (iteration speed)")
    p.add_argument("--threads", type=int, default=1, help="model threads (llama.cpp or torch)")
    p.add_argument("--jobs", type=int, default=1,
                   help="run the conversations in this many worker processes and merge "
                        "their figures as --merge does (one thread each)")
    p.add_argument("--quick", action="store_true",
                   help=f"subset: {', '.join(QUICK_CONVERSATIONS)}; methods {', '.join(QUICK_METHODS)}")
    p.add_argument("--plot", default="", help="save the evidence-brightness PNG here")
    p.add_argument("--diagnostics", type=int, default=15,
                   help="per-question lines printed where halo loses (0: none)")
    p.add_argument("--json", action="store_true", help="print one JSON object of figures last")
    p.add_argument("--dump-recall", default="", metavar="FILE",
                   help="write each question's recalled paragraphs for the kept methods here, "
                        "a JSON object a line (bench/memory/recall_dump.py)")
    p.add_argument("--merge", nargs="+", default=None, metavar="OUTPUT",
                   help="no run: combine the JSON last lines of earlier runs' outputs")
    p.add_argument("--worker-of", default="", help=argparse.SUPPRESS)  # bench/memory/jobs.py
    return p.parse_args(argv)


def log(*args) -> None:
    print(*args, file=sys.stderr, flush=True)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.merge:
        return merge_outputs(args.merge, args.json, args.plot)
    if args.worker_of:
        from . import jobs

        return jobs.serve(args.worker_of, main, log)
    if args.jobs > 1:
        if args.dump_recall:  # the workers would each write the one file
            raise SystemExit("--dump-recall writes one file: run it with --jobs 1")
        return run_jobs(args, sys.argv[1:] if argv is None else list(argv))
    started = time.perf_counter()
    from halo_weave.memory.embedder import Embedder
    from halo_weave.semantic_index import SemanticIndex
    from halo_weave.settings import Settings
    from halo_weave.store import ConversationStore

    # The replays pin the brightness rule (the seed's voting, pruning dimmest first) rather
    # than follow the app's defaults: each method names what it changes from this base,
    # so a default moved by these figures does not move the figures (halo = voting).
    settings = Settings.of(max_context_tokens=args.prune_to, **BASE_RULE)
    max_new = settings.sampling.max_new_tokens if args.max_new_tokens is None else args.max_new_tokens
    budget = args.context - max_new

    wanted = [m.strip() for m in args.methods.split(",") if m.strip()]
    if args.quick and not wanted:
        wanted = QUICK_METHODS
    methods = [m for m in METHODS if m[0] in wanted] if wanted else [
        m for m in METHODS if m[0] not in RETIRED]
    unknown = set(wanted) - {m[0] for m in METHODS}
    if unknown:
        raise SystemExit(f"unknown methods: {', '.join(sorted(unknown))}")
    convs = [c.strip() for c in args.conversations.split(",") if c.strip()]
    if args.quick and not convs:
        convs = QUICK_CONVERSATIONS

    dialogues = locomo.load(args.data)
    if convs:
        dialogues = [d for d in dialogues if d.sample_id in convs]
    if args.max_turns:
        dialogues = [locomo.truncate(d, args.max_turns) for d in dialogues]

    replay_policies = policies(args.prune_to, budget, args.hysteresis, args.half_life)
    # fifo's and rag's questions use no replay: theirs is for fidelity only (--recall-only skips it).
    needed = {m[1] for m in methods if m[1] and not (args.recall_only and m[0] in ("fifo", "rag"))}
    t = time.perf_counter()
    source = _load_source(args)
    tokenize = source.tokenize
    log(f"model loaded in {time.perf_counter() - t:.0f} s (kv={args.kv})")
    embedder = _loaded(("embedder",), lambda: _load_embedder(Embedder))
    queries = retrieval.CachedEmbedder(embedder, args.embed_cache)  # each text embedded once

    results = {name: MethodResult(name) for name, _, _ in methods}
    shared_owner: dict[str, str] = {}
    for name, key, _ in methods:
        if key:
            shared_owner.setdefault(key, name)
            if shared_owner[key] != name:
                results[name].replay_shared_with = shared_owner[key]
    diagnostics: list[str] = []
    traces, evidence_turns = {}, {}
    reference_seconds = 0.0
    data_quirks = {"malformed_evidence": 0, "dangling_evidence": 0, "questions_without_evidence": 0}
    total_questions = 0
    index_total = 0.0
    tmp = tempfile.TemporaryDirectory(prefix="bench_memory_")
    dump = open(args.dump_recall, "w", encoding="utf-8") if args.dump_recall else None
    dumper = recall_dump.recorder(dump) if dump else None

    for dialogue in dialogues:
        t0 = time.perf_counter()
        tok = tokenize_dialogue(dialogue, tokenize, settings)
        full = replay(tok, Policy("full", 0, attention=False), settings, None).conv
        turn_of = dialogue.turn_index()
        for q in dialogue.questions:
            data_quirks["malformed_evidence"] += q.malformed
            data_quirks["dangling_evidence"] += len(q.dangling)
            data_quirks["questions_without_evidence"] += not q.evidence
        log(f"{dialogue.sample_id}: {len(dialogue.turns)} turns, {full.live_token_count()} tokens, "
            f"{len(dialogue.questions)} questions (categories 1-4)")

        # The store and the index, as the app keeps them (DB-first, every chunk embedded).
        store = ConversationStore.open(Path(tmp.name) / f"{dialogue.sample_id}.db")
        store.save_system_prompt(full)
        for turn in full.turns.values():
            store.save_turn(full, turn)
        indexes = {}
        base_index = SemanticIndex(store.conn, settings, queries if args.embed_cache else embedder,
                                   lock=store.lock)
        t = time.perf_counter()
        base_index.index_pending(full)
        index_total += time.perf_counter() - t
        queries.save()
        log(f"  indexed {base_index.entry_count} chunks in {time.perf_counter() - t:.0f} s")

        if hasattr(source, "forget_shared"):
            source.forget_shared()  # the calls its replays share (bench/memory/prefix.py)
        # One teacher-forced replay per pruning policy the chosen methods need; a policy
        # that resurrects searches an index holding only what was said before.
        searches = {"plain": past_search(_index(indexes, store, settings, queries,
                                                {"user_similarity_boost": 1.0, "hybrid_search": False},
                                                SemanticIndex), RAG_CANDIDATES),
                    "app": past_search(_index(indexes, store, settings, queries, {}, SemanticIndex),
                                       settings.search.query_max_results)}
        replays = {}
        # Replays that read attention first: the calls they share carry rows (prefix.py).
        order = [k for k in replay_policies if k in needed]
        for key in sorted(order, key=lambda k: not replay_policies[k].reads_attention):
            policy = replay_policies[key]
            replays[key] = replay(tok, policy, settings, source,
                                  progress=_progress(f"  replay {key}", len(dialogue.turns)),
                                  search=searches["plain" if policy.resurrect == "plain" else "app"],
                                  model_context=args.context, max_new_tokens=max_new)
            r = replays[key]
            log(f"  replay {key}: {r.seconds:.0f} s (cpu {r.cpu_seconds:.0f} s), {r.votes} votes, {r.prune_events} prunes, "
                f"{r.resurrected_chunks} chunks ({r.resurrected_tokens} tokens) resurrected, "
                f"{r.conv.live_token_count()} live tokens at the end; {_stats(source)}")
        # The reference for continuation fidelity: one pass, shared by every method
        # (after the replays: it starts from the prefix their first calls built).
        t, cpu = time.perf_counter(), time.process_time()
        reference = (fidelity.reference_pass(full, tok.turns, source, args.window, args.prune_to)
                     if needed else {})  # no replay, nothing to compare
        reference_seconds += time.perf_counter() - t
        log(f"  reference ({args.window}-token window): {len(reference)} turns in "
            f"{time.perf_counter() - t:.0f} s (cpu {time.process_time() - cpu:.0f} s); {_stats(source)}")

        if "halo" in replays:
            traces[dialogue.sample_id] = replays["halo"].trace
            evidence_turns[dialogue.sample_id] = {turn_of[d] for q in dialogue.questions
                                                  for d in q.evidence}
        recent = (keep_recent(full, args.prune_to)
                  if any(m[0] == "rag" or m[0].startswith("recent-") for m in methods) else None)

        for name, key, _ in methods:
            if key in replays:
                results[name].replay_seconds += replays[key].seconds
                results[name].fidelity.add(fidelity.score(replays[key].fidelity, reference))
            elif name == "full":
                results[name].fidelity.add(fidelity.identity(reference))
            elif name.startswith("recent-") and "fifo-halo" in replays:  # same live context
                results[name].fidelity.add(fidelity.score(replays["fifo-halo"].fidelity, reference))

        fifo_cache: dict[int, object] = {}
        per_question: dict[str, list] = {name: [] for name, _, _ in methods}
        for qi, question in enumerate(dialogue.questions):
            ids, texts = tok.questions[qi]
            ctx = QuestionContext(question, ids, texts, turn_of, budget, args.context, max_new)
            ctx.framed_tokens = tok.question_tokens(qi)
            total_questions += 1
            for name, key, options in methods:
                t = time.perf_counter()
                if name == "full":
                    out = answer_full(full, ctx)
                elif name == "fifo":  # the most recent whole turns (its replay: fidelity only)
                    limit = budget - ctx.framed_tokens
                    if limit not in fifo_cache:
                        fifo_cache[limit] = keep_recent(full, limit)
                    out = answer_full(fifo_cache[limit], ctx)
                elif name == "rag":
                    plain = {"user_similarity_boost": 1.0, "hybrid_search": False}
                    matches = _index(indexes, store, settings, queries, plain,
                                     SemanticIndex).search(question.question, RAG_CANDIDATES)
                    out = answer_rag(recent, matches, ctx)
                elif name.startswith("recent-"):  # the app's search and plan, its settings changed
                    opts = {k: v for k, v in options.items() if k not in ("recent_turns", "kept", "extra_room")}
                    index = _index(indexes, store, settings, queries, opts, SemanticIndex)
                    text = retrieval.with_recent(recent, question.question, options.get("recent_turns", 0))
                    if options.get("kept"):  # what the app keeps of the plan (memory/relevance.py)
                        matches = index.search(text)
                        record = (dumper(name, dialogue.sample_id, question, turn_of, matches, text, queries)
                                  if dump else None)
                        out = answer_halo_kept(recent, matches, ctx, index.plan,
                                               index.settings.recall.resurrection_budget_cap,
                                               room_floor(index.settings), WITHOUT_BRIGHTNESS, queries,
                                               index.settings.recall.recall_keep_share, text,
                                               extra_room=options.get("extra_room", 0), record=record)
                    else:
                        out = answer_halo_dry(recent, index.search(text), ctx, index.plan,
                                              index.settings.recall.resurrection_budget_cap,
                                              floor=room_floor(index.settings), order=WITHOUT_BRIGHTNESS)
                    for reason in out.missing.values():
                        results[name].missing_reasons[reason] += 1
                elif name == "brightness":
                    out = answer_brightness(replays[key].conv, ctx)
                else:
                    search_opts = {k: v for k, v in options.items() if k != "rule"}
                    index = _index(indexes, store, settings, queries, search_opts, SemanticIndex)
                    matches = index.search(question.question)
                    conv = replays[key].conv
                    if conv.settings.pruning.prune_when == "for_room":  # its plan prunes too: made, read, undone
                        rule = options.get("rule", settings.recall.resurrection_brightness)
                        answer = answer_halo_in_place if rule == "at_prune" else answer_halo  # (a copy)
                        out = answer(conv, matches, ctx, rule, settings.recall.resurrection_budget_cap,
                                     index.plan, floor=room_floor(index.settings))  # the app's plan
                    else:  # the same figures read off the plan (the rule moves no liveness)
                        out = answer_halo_dry(conv, matches, ctx, index.plan, settings.recall.resurrection_budget_cap,
                                              floor=room_floor(index.settings))
                    for reason in out.missing.values():
                        results[name].missing_reasons[reason] += 1
                results[name].question_seconds += time.perf_counter() - t
                results[name].add(question.category, out.recall, out.tokens, out.recalled)
                per_question[name].append(out)
        diagnostics += diagnose(dialogue, per_question, args.diagnostics - len(diagnostics))
        store.close()
        log(f"  {dialogue.sample_id} done in {time.perf_counter() - t0:.0f} s")
    tmp.cleanup()
    if dump:
        dump.close()

    ordered = [results[name] for name, _, _ in methods]
    wall = time.perf_counter() - started
    subset = (f"{', '.join(d.sample_id for d in dialogues)}"
              + (f", first {args.max_turns} turns" if args.max_turns else ""))
    print(f"# bench_memory: P={args.prune_to} C={args.context} prompt budget={budget} "
          f"(C - max_new_tokens {max_new}); kv={args.kv}; {subset}; "
          f"{total_questions} questions; {platform.node()} {os.cpu_count()} cpu; "
          f"indexing {index_total:.0f} s; reference {reference_seconds:.0f} s; wall {wall:.0f} s")
    print(table(ordered))
    print("* replay shared with the method named in the JSON (time counted in each)")
    print(f"data quirks: {data_quirks}")
    for name in ("halo",):
        if name in results and results[name].missing_reasons:
            print(f"{name}: missing evidence turns by reason: {dict(results[name].missing_reasons)}")
    if diagnostics:
        print("where halo loses (question: evidence -> reason):")
        print("\n".join(diagnostics))
    if args.plot and traces:
        plot_brightness(traces, evidence_turns, args.plot,
                        f"halo replay (P={args.prune_to}), {subset}")
        print(f"plot saved to {args.plot}")
    if args.json:
        figures = {
            "prune_to": args.prune_to, "context": args.context, "prompt_budget": budget,
            "kv": args.kv, "conversations": [d.sample_id for d in dialogues],
            "max_turns": args.max_turns, "questions": total_questions, "wall_seconds": round(wall, 1),
            "cpus": os.cpu_count(), "data_quirks": data_quirks, "index_seconds": round(index_total, 1),
            "window": args.window, "reference_seconds": round(reference_seconds, 1),
            "load_average": list(os.getloadavg()),
            "methods": {r.name: r.figures() for r in ordered},
        }
        print(json.dumps(figures, allow_nan=False, default=str))
    return 0


def run_jobs(args, argv: list[str]) -> int:
    """``--jobs N``: every conversation in its own worker, N at a time, then merged."""
    from . import jobs

    convs = [c.strip() for c in args.conversations.split(",") if c.strip()]
    if args.quick and not convs:
        convs = QUICK_CONVERSATIONS
    dialogues = [d for d in locomo.load(args.data) if not convs or d.sample_id in convs]
    if not dialogues:
        raise SystemExit("no conversation to run")
    longest_first = sorted(dialogues, key=lambda d: -sum(len(t.text) for t in d.turns))
    paths, elapsed = jobs.run(argv, [d.sample_id for d in longest_first], args.jobs, log)
    order = {d.sample_id: i for i, d in enumerate(dialogues)}  # merged in the data's order
    paths = sorted(paths, key=lambda p: order[Path(p).stem])
    return merge_outputs(paths, args.json, args.plot, elapsed=elapsed)


def _index(cache, store, settings, embedder, options, cls):
    """A SemanticIndex over the same entries with question-time search options."""
    key = tuple(sorted(options.items()))
    if key not in cache:
        index = cls(store.conn, settings.replace(**options), embedder, lock=store.lock)
        index.load()
        cache[key] = index
    return cache[key]


def _progress(label: str, total: int):
    last = [time.perf_counter()]

    def report(done: int, _total: int) -> None:
        now = time.perf_counter()
        if now - last[0] > 60 or done == total:
            last[0] = now
            log(f"{label}: {done}/{total} turns")

    return report


#: What one process loaded, for the next conversation a ``--jobs`` worker runs.
_LOADED: dict = {}


def room_floor(settings) -> int | None:
    """The floor of the room a question's resurrection makes, as the app's session has it
    (:func:`halo_weave.memory.room.floor`) when the keep share lowers it; else None."""
    return room.floor(settings) if room.shares_room(settings) else None


def _loaded(key: tuple, load):
    """``load()`` once per process and ``key``."""
    if key not in _LOADED:
        _LOADED[key] = load()
    return _LOADED[key]


def _load_embedder(cls):
    embedder = cls()
    embedder.load()
    return embedder


def _load_source(args):
    """The teacher-forcing source ``--kv`` names (see bench/memory/attention.py), loaded
    once per process: a ``--jobs`` worker runs several conversations on one model (its
    figures counted afresh for each)."""
    source = _loaded(("source", args.kv, args.threads), lambda: _new_source(args))
    if hasattr(source, "stats"):
        source.stats = type(source.stats)()
    return source


def _new_source(args):
    if args.kv == "llamacpp":
        from .llama_forcing import LlamaForcing

        return LlamaForcing.load(context_size=args.window, threads=args.threads or 1)
    import torch

    from .attention import load_source

    if args.threads:
        torch.set_num_threads(args.threads)
    return load_source(args.kv)


def _stats(source) -> str:
    s = getattr(source, "stats", None)
    if s is None:
        return ""
    if hasattr(s, "line"):
        return s.line()
    shared = getattr(source, "shared", None)
    return (f"model {s.seconds:.0f} s total, {s.prefill_tokens} prefilled, {s.forced_tokens} forced, "
            f"{s.shifts} shifts ({getattr(s, 'in_place_shifts', 0)} in place), {s.reprefills} re-prefills, {s.restored_tokens} restored"
            + (f", shared: {shared.served_tokens} forced, {shared.adopted_tokens} cached"
               if shared is not None else ""))


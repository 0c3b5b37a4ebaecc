"""The reopening figures as a user meets them: the window, the real server restarted with its
saved caches, a 60-message conversation (see :mod:`bench.resume`, which runs this).

Each reopening starts from the same state: a fresh copy of the conversation file in a fresh
data folder, the server started anew on a copy of the cache folder the server that built
the conversation left when it stopped (its cache from before the last answer's prune, and
the pruned spans), as after a user quit right after an answer; a conversation given
without that folder is opened once first, so that a server saves its cache (``prime``).  The app is the real one (``TurnController``
and ``MainWindow``, offscreen), opening the file at start as after a restart; the next
message is sent with Enter, and the time to the first token is measured from Enter.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
from pathlib import Path

from bench.resume_timeline import Timeline, draw

#: The 61st line: asks after something said early in the LoCoMo dialogue, so it brings back
#: pruned context (the figure ``resume_recalled_tokens`` says how much).
NEXT_MESSAGE = "By the way, what did you say about the support group you went to?"
#: 60 words a minute: five characters a second.
TYPING_CPS = 5.0


class App:
    """The window and its controller on a server URL, in the data folder ``home``."""

    def __init__(self, url: str, home: Path) -> None:
        from halo_weave.app import TurnController
        from halo_weave.settings import Settings
        from halo_weave.ui.main_window import MainWindow, app_qsettings

        os.environ["HALO_WEAVE_HOME"] = str(home)
        # HALO_WEAVE_RECALL_NOTE=0: without the recall note (bench_resume --no-recall-note).
        settings = Settings.of(server_url=url, autostart_server=False,
                            recall_note=os.environ.get("HALO_WEAVE_RECALL_NOTE", "1") != "0")
        self.controller = TurnController(settings, home, autostart=False)
        self.window = MainWindow(self.controller, app_qsettings(home))
        self.window.resize(1180, 780)
        self.window.show()
        self.first_token: float | None = None
        self.request_sent: float | None = None  # "reading N tokens…": the answer's request starts
        self.timeline: Timeline | None = None  # what the first message waits for, when watched
        self.controller.signals.tokens_streamed.connect(self._streamed)
        self.controller.signals.turn_phase.connect(self._phase)

    def _phase(self, _message: str, line: str) -> None:
        if self.request_sent is None and line.startswith("reading") and not self.controller.ahead.warming_up:
            self.request_sent = time.perf_counter()

    def _streamed(self) -> None:
        # Also emitted when the message is saved and when the request starts: the first
        # token is the first emission with an answer token in the session.
        if self.first_token is None and self.controller.session.answer.streamed >= 1:
            self.first_token = time.perf_counter()
            if self.timeline is not None:
                self.timeline.first_token()

    def events(self, seconds: float = 0.0) -> None:
        from PySide6.QtWidgets import QApplication

        deadline = time.perf_counter() + seconds
        while True:
            QApplication.processEvents()
            if self.timeline is not None:
                self.timeline.poll()
            if time.perf_counter() >= deadline:
                return
            time.sleep(0.005)

    def wait(self, condition, timeout: float, what: str) -> None:
        deadline = time.perf_counter() + timeout
        while not condition():
            if time.perf_counter() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            self.events(0.01)

    def close(self) -> None:
        self.window.close()
        self.controller.shutdown()


def prime(url_of, conversation: Path, work: Path) -> None:
    """Open the conversation once, as after bench_chat built it: the server reads its context
    and saves its cache when idle and when stopped (``url_of`` starts the server and returns
    its URL and a stop function)."""
    home = work / "prime"
    home_conv = copy_conversation(conversation, home)
    url, stop = url_of()
    app = App(url, home)
    try:
        app.controller.start(home_conv)
        app.wait(lambda: app.controller.link.state == "connected", 120, "the connection")
        app.wait(lambda: app.controller.ahead.last_warm_up is not None and not app.controller.ahead.warming_up, 600,
                 "the first warm-up")
        app.events(3.0)  # the server saves once it has been idle
    finally:
        app.close()
        stop()


def copy_conversation(conversation: Path, home: Path) -> Path:
    from halo_weave.store import conversations_dir

    folder = conversations_dir(home)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / conversation.name
    shutil.copyfile(conversation, target)
    return target


def reopen(url_of, conversation: Path, home: Path, *, typed: bool, send_after_s: float = 2.0) -> dict:
    """One reopening: start the server, open the app on the conversation, send the next
    message (typed at 60 words a minute from the moment it opened, or pasted and sent
    ``send_after_s`` after it); figures from Enter."""
    path = copy_conversation(conversation, home)
    url, stop = url_of()
    app = App(url, home)
    c = app.controller
    try:
        opened = time.perf_counter()
        app.timeline = timeline = Timeline(c, opened)
        c.start(path)
        if typed:
            box = app.window.input
            for n in range(1, len(NEXT_MESSAGE) + 1):
                box.setPlainText(NEXT_MESSAGE[:n])  # each key press: the draft as the app sees it
                app.events(max(0.0, opened + n / TYPING_CPS - time.perf_counter()))
        else:
            app.events(max(0.0, opened + send_after_s - time.perf_counter()))
            app.window.input.setPlainText(NEXT_MESSAGE)
        app.wait(lambda: not c.gate.input_block_reason() or c.gate.busy, 300, "the input to open")
        live_before = {ch.id for ch in c.conv.live_chunks()}
        turns_before = set(c.conv.turns)
        warming_at_enter = c.ahead.warming_up
        timeline.enter()
        enter = time.perf_counter()
        app.window.send()  # Enter
        shown = None
        while shown is None:
            app.events()
            if app.window.pending_turn.message.isVisible() or "You:" in app.window.heatmap.toPlainText()[-400:]:
                shown = time.perf_counter()
        app.wait(lambda: app.first_token is not None or c.session.answer.finish_reason == "error", 600, "the first token")
        first = app.first_token or time.perf_counter()
        # What the message brought back: chunks of earlier turns that were not live before it.
        recalled = sum(ch.token_count for ch in c.conv.live_chunks()
                       if ch.id not in live_before and not ch.framing and ch.turn_id in turns_before)
        app.wait(lambda: not c.gate.busy, 600, "the answer")
        warm = c.ahead.last_warm_up or {}
        done = getattr(c.turn.last_done, "raw", None) or {}
        timings, kv = done.get("timings") or {}, done.get("kv") or {}
        if timings.get("time_to_first_token_s") is not None:
            timeline.annotate("reading", f"the server waited {1000 * timings.get('waited_s', 0):.0f} ms "
                                         f"for the model, then its own time to first token "
                                         f"{1000 * timings['time_to_first_token_s']:.0f} ms: "
                                         f"{kv.get('appended', 0)} appended, {kv.get('inserted', 0)} inserted "
                                         f"({kv.get('restored', 0)} of them from stored states)")
        timeline.close()
        return {"ttft_s": first - enter, "timeline": timeline.phases, "enter_to_visible_ms": 1000 * (shown - enter),
                "enter_to_request_s": (app.request_sent or first) - enter,
                "server_ttft_s": timings.get("time_to_first_token_s"),
                "server_waited_s": timings.get("waited_s"),
                **{f"kv_{name}": value for name, value in kv.items()},
                "recalled_tokens": recalled, "warming_at_enter": warming_at_enter,
                "restored": int(warm.get("restored", 0) or 0), "warm_up_s": warm.get("seconds"),
                "context_tokens": len(c.conv.live_input_ids()), "opened_to_enter_s": enter - opened}
    finally:
        app.close()
        stop()


def bench_app(args, conversation: Path, built_kv: Path, work: Path) -> dict:
    """The figures of the issue's resume benchmark (medians over ``args.app_reopens``);
    ``built_kv``: the saved caches of the server that built the conversation (if any)."""
    from PySide6.QtWidgets import QApplication

    from halo_weave.server.launcher import start_server
    from halo_weave.settings import Settings

    QApplication.instance() or QApplication(sys.argv[:1])
    primed = work / "kv-primed"
    built = built_kv.is_dir() and any(built_kv.glob("*.kvstate"))
    if built:
        shutil.copytree(built_kv, primed)
    server_args = [*Settings().server_args(), "--threads", str(args.threads)]

    def server_on(folder: Path):
        def start():
            process = start_server(port=0, extra_args=[*server_args, "--kv-dir", str(folder)])
            return process.wait_ready(timeout=600), process.stop
        return start

    if not built:
        prime(server_on(primed), conversation, work)
    saved = [p for p in primed.rglob("*.kvstate")]
    if not saved:
        raise RuntimeError("the server saved no cache for the conversation")
    runs: dict[str, list[dict]] = {"typed": [], "pasted": [], "no_state": []}
    for n in range(args.app_reopens):
        for mode in runs:
            folder = work / f"kv-{mode}-{n}"
            if mode != "no_state":
                shutil.copytree(primed, folder)
            else:
                folder.mkdir()
            runs[mode].append(reopen(server_on(folder), conversation, work / f"home-{mode}-{n}",
                                     typed=mode == "typed"))
            shutil.rmtree(folder, ignore_errors=True)
            shown = {k: v for k, v in runs[mode][-1].items() if k != "timeline"}
            print(f"reopening {n + 1} {mode}: {shown}", file=sys.stderr, flush=True)

    def median(mode: str, key: str) -> float:
        return round(statistics.median(r[key] for r in runs[mode]), 3)

    def median_run(mode: str) -> dict:
        ordered = sorted(runs[mode], key=lambda r: r["ttft_s"])
        return ordered[(len(ordered) - 1) // 2]

    tokens = runs["pasted"][0]["context_tokens"]
    state_bytes = sum(p.stat().st_size for p in saved)
    return {
        "resume_ttft_s": median("typed", "ttft_s"),
        "resume_ttft_pasted_s": median("pasted", "ttft_s"),
        "resume_ttft_no_state_s": median("no_state", "ttft_s"),
        "restore_s": median("pasted", "warm_up_s"),
        "resume_prefill_warm_up_s": median("no_state", "warm_up_s"),
        "enter_to_visible_ms": round(statistics.median(r["enter_to_visible_ms"] for mode in runs for r in runs[mode]), 1),
        "resume_recalled_tokens": int(statistics.median(r["recalled_tokens"] for r in runs["pasted"])),
        "state_bytes_per_token": round(state_bytes / max(1, tokens), 1),
        "span_file_mb": round(sum(p.stat().st_size for p in primed.rglob("*.kvspans")) / 1e6, 1),
        "resume_context_tokens": tokens,
        "resume_reopens": args.app_reopens,
        "resume_from": "the building server's saved caches" if built else "a first opening's saved cache",
        # What the first message waited for in the reopening of median time to first token
        # (ms from the opening; every run's is in resume_runs).
        "resume_timeline": {mode: median_run(mode)["timeline"] for mode in runs},
        "resume_runs": runs,
    }


def timeline_lines(figures: dict) -> list[str]:
    """The timelines of :func:`bench_app`'s figures as text lines (one block per mode)."""
    words = {"typed": "typed at 60 words a minute", "pasted": "pasted, sent 2 s after opening",
             "no_state": "no saved cache (prefilled)"}
    lines = []
    for mode, phases in figures.get("resume_timeline", {}).items():
        first = next((p["start_ms"] for p in phases if p["phase"] == "first token"), None)
        enter = next((p["start_ms"] for p in phases if p["phase"] == "Enter"), None)
        ttft = f", first token {first - enter:.0f} ms after Enter" if first is not None and enter is not None else ""
        lines += draw(phases, f"timeline, {words.get(mode, mode)} (the median reopening{ttft}), ms from opening:")
    return lines

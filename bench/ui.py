"""Widget timings: heatmap first paint and per-token cost at 30k live tokens, graveyard scroll.

Offscreen (QT_QPA_PLATFORM=offscreen), synthetic conversation built with the core
functions (add_turn / begin_turn / append_token / apply_attention), no server.

    python scripts/bench_ui.py [--live-tokens 30000] [--tokens 300] [--graveyard 10000]
                               [--markdown | --raw] [--png heatmap.png] [--json]

``--markdown``: the answers (those already there and the streamed ones) are real Markdown
(headings, lists, bold and italic, inline code, fenced Python code) and the view renders
it; ``--raw``: the plain-prose conversation with rendering off (the view as typed).
Without either: plain prose, rendering on.  The JSON says which (``"markdown"``).

Figures (ms; *_cpu_* are process CPU time, robust to a busy machine, the rest wall):
  first_paint_ms          set_conversation() + the first synchronous paint of the view
  token_p50_ms/_p95_ms    per generated token: append_streamed (text and colours) +
                          flush (one frame) + the paint Qt then does (the widget's share),
                          with attention shaped like a real model's (sink, recency tail,
                          a few focus tokens): few tokens change colour per step
  token_random_attention_*  the same with pessimistic attention (a quarter of the tokens
                          gain every step, the top-20 % ranking reshuffles)
  token_full_repaint_p50/_p95_ms  one step with a forced repaint of the whole viewport
  token_core_p50/_p95_ms  the core's share of the same step (append_token + apply_attention)
  rebuild_ms              rebuild() of the whole view + its paint
  graveyard_open_ms       set_rows(10k chunks) + first paint
  graveyard_frame_*       one wheel notch (three rows) as Qt does it: blit + paint the
                          rows that came into view
  graveyard_page_jump_*   a jump of a page or more + a forced repaint of every row on
                          screen (each one new: previews loaded, lines elided)
  graveyard_filter_first_ms  the first filter, index not built yet (every preview loaded
                          through the one-chunk preview callable)
  graveyard_filter_max_later_ms  the slowest of the next filters (index ready)
  load_average_1min_*     the machine's load at start and end
With ``--json`` the last line is one JSON object of all figures.

For the app engineer: :func:`measure_launch` times any window factory against the same
synthetic conversation (see its docstring); :func:`synthetic_conversation` builds it.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Callable

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
from PySide6.QtWidgets import QApplication, QWidget

from halo_weave.conversation import Chunk, Conversation, Framing
from halo_weave.settings import Settings

WORDS = (
    "the model keeps an endless conversation inside a fixed window by letting attention "
    "decide which paragraphs stay bright while the rest fade and wait in the graveyard "
    "until a later question brings them back at their place with anchors pinned"
).split()

CHATML = Framing(
    prefix={r: ([1, 2, 3], ["<|im_start|>", r, "\n"]) for r in ("system", "user", "assistant")},
    suffix={r: ([4, 5], ["<|im_end|>", "\n"]) for r in ("system", "user", "assistant")},
)


def _paragraph(rng: np.random.Generator, n: int) -> list[str]:
    picks = rng.integers(0, len(WORDS), n)
    texts = [(" " if i else "") + WORDS[p] for i, p in enumerate(picks)]
    texts[-1] += "."
    return texts


def _markdown_tokens(rng: np.random.Generator) -> list[str]:
    """One Markdown answer as model-like tokens: a heading, prose with emphasis and
    inline code, a list, a fenced Python block, a closing paragraph."""
    words = _paragraph(rng, int(rng.integers(20, 50)))
    texts = ["##", " " + WORDS[int(rng.integers(len(WORDS)))].title(), " notes", "\n\n"]
    texts += words[:8] + [" **", WORDS[int(rng.integers(len(WORDS)))], "**"] + words[8:16]
    texts += [" `", "prune", "_chunk", "()`"] + words[16:] + ["\n\n"]
    for item in range(3):
        texts += ["-", " *", WORDS[int(rng.integers(len(WORDS)))], "*"] + _paragraph(rng, int(rng.integers(5, 12))) + ["\n"]
    texts += ["\n", "```", "python", "\n"]
    for line in range(int(rng.integers(3, 8))):
        texts += ["def", f" step_{line}", "(x", ",", " y", "):", "\n", "    ", "return", " x", " +", " y",
                  " *", f" {line}", "  ", "# ", WORDS[int(rng.integers(len(WORDS)))], "\n"]
    texts += ["```", "\n\n"] + _paragraph(rng, int(rng.integers(20, 60)))
    return texts


def synthetic_conversation(live_tokens: int = 30_000, seed: int = 0, settings: Settings | None = None,
                           markdown: bool = False) -> Conversation:
    """A multi-turn conversation of about ``live_tokens`` live tokens with varied brightness."""
    rng = np.random.default_rng(seed)
    conv = Conversation(settings or Settings.of(max_context_tokens=0), framing=CHATML)
    prompt = "You are a helpful assistant."
    conv.set_system_prompt(prompt, list(range(8)), ["<|im_start|>", "system", "\n", prompt, "<|im_end|>", "\n", "", ""])
    now = time.time() - 3600
    turn = 0
    while len(conv.table) < live_tokens:
        role = "user" if turn % 2 == 0 else "assistant"
        texts: list[str] = []
        if markdown and role == "assistant":
            for p in range(int(rng.integers(1, 3))):
                texts += (["\n\n"] if p else []) + _markdown_tokens(rng)
        else:
            for p in range(int(rng.integers(1, 4)) if role == "user" else int(rng.integers(2, 6))):
                if p:
                    texts.append("\n\n")
                texts += _paragraph(rng, int(rng.integers(40, 120)))
        conv.add_turn(role, rng.integers(10, 50_000, len(texts)).tolist(), texts, created_at=now + 30 * turn)
        turn += 1
    table = conv.table
    # Brightness shaped like real runs: most tokens decayed a little, a few chunks hot.
    table.brightness[:] = 10_000 - rng.integers(0, 3000, len(table))
    ids, starts = table.chunk_spans()
    hot = rng.choice(len(ids), max(1, len(ids) // 10), replace=False)
    bounds = list(starts) + [len(table)]
    for i in hot:
        table.brightness[bounds[i] : bounds[i + 1]] = 10_000 - rng.integers(0, 300, bounds[i + 1] - bounds[i])
    return conv


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 2)


def _percentile(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 2)


def measure_launch(build_window: Callable[[Conversation], QWidget], conv: Conversation) -> float:
    """Milliseconds from ``build_window(conv)`` to its first painted frame.

    ``build_window`` must return a widget showing ``conv`` (e.g. the main window with
    the conversation already opened); timing includes show() and one synchronous
    repaint, which is when the window is usable.
    """
    app = QApplication.instance() or QApplication([])
    start = time.perf_counter()
    window = build_window(conv)
    window.show()
    app.processEvents()
    window.repaint()
    elapsed = time.perf_counter() - start
    window.close()
    return _ms(elapsed)


def realistic_attention(rng: np.random.Generator, n: int, focus: np.ndarray) -> np.ndarray:
    """One generated token's attention shaped like a real model's: a sink on the first
    token, a recency tail over the last few dozen tokens and a handful of focus tokens
    (what the answer is about); every other token gets far less than a fair share."""
    attention = rng.random(n, dtype=np.float32) * np.float32(0.05 / n)
    attention[0] += 0.45
    recent = min(n - 1, 48)
    tail = 1.0 / np.arange(recent, 0, -1, dtype=np.float32)
    attention[n - recent :] += 0.3 * tail / tail.sum()
    attention[focus[focus < n]] += 0.2 / max(len(focus), 1)
    return attention / attention.sum()


def random_attention(rng: np.random.Generator, n: int) -> np.ndarray:
    """Pessimistic attention: a quarter of all tokens above a fair share every step, so
    the top-20 % ranking reshuffles and many tokens change colour each step."""
    attention = rng.random(n, dtype=np.float32) ** 8
    return attention / attention.sum()


def _stream_texts(markdown: bool, tokens: int, rng: np.random.Generator) -> list[str]:
    """What the timed answer streams: prose with a paragraph break every 90 tokens, or
    Markdown answers one after another."""
    if not markdown:
        return ["\n\n" if i % 90 == 89 else (" " if i % 90 else "") + WORDS[i % len(WORDS)] for i in range(tokens)]
    texts: list[str] = []
    while len(texts) < tokens:
        texts += _markdown_tokens(rng) + ["\n\n"]
    return texts[:tokens]


def _time_tokens(app, view, conv: Conversation, rng: np.random.Generator, tokens: int,
                 attention: Callable[[int, int], np.ndarray],
                 markdown: bool = False) -> tuple[list[float], list[float], list[float]]:
    """Stream ``tokens`` tokens; per token (wall ms of the widget's share, its CPU ms,
    the core's wall ms)."""
    widget_times, widget_cpu, core_times = [], [], []
    conv.begin_turn("assistant")
    for i, text in enumerate(_stream_texts(markdown, tokens, rng)):
        t0 = time.perf_counter()
        conv.append_token(int(rng.integers(10, 50_000)), text)
        conv.apply_attention(attention(i, conv.live_token_count()))
        t1 = time.perf_counter()
        c1 = time.process_time()
        view.append_streamed()  # the app's one call per token: text and colours, one frame
        view.flush()  # one frame: append text, request repaint of what changed
        app.processEvents()  # ...and Qt paints it
        t2 = time.perf_counter()
        widget_cpu.append((time.process_time() - c1) * 1000)
        core_times.append((t1 - t0) * 1000)
        widget_times.append((t2 - t1) * 1000)
    conv.end_turn()
    view.rebuild()  # what the app does when a turn ends
    view.flush()
    app.processEvents()
    return widget_times, widget_cpu, core_times


def bench_heatmap(live_tokens: int, tokens: int, png: str | None, markdown: bool = False,
                  render: bool = True) -> dict:
    from halo_weave.ui.heatmap import HeatmapView
    from halo_weave.ui.theme import apply_dark_theme

    app = QApplication.instance() or QApplication([])
    apply_dark_theme(app)
    conv = synthetic_conversation(live_tokens, markdown=markdown)
    view = HeatmapView()
    view.set_markdown(render)
    view.resize(1100, 800)
    view.show()
    app.processEvents()

    start, cpu = time.perf_counter(), time.process_time()
    view.set_conversation(conv)
    view.flush()
    view.viewport().repaint()
    first_paint, first_paint_cpu = time.perf_counter() - start, time.process_time() - cpu

    rng = np.random.default_rng(1)
    focus = rng.integers(0, live_tokens, 24)

    def realistic(i: int, n: int) -> np.ndarray:
        if i % 30 == 29:  # the answer moves on to another part of the context
            focus[:] = rng.integers(0, n, len(focus))
        return realistic_attention(rng, n, focus)

    real_wall, real_cpu, core = _time_tokens(app, view, conv, rng, tokens, realistic, markdown)
    rand_wall, rand_cpu, _ = _time_tokens(app, view, conv, rng, tokens,
                                          lambda i, n: random_attention(rng, n), markdown)
    full_times = []
    conv.begin_turn("assistant")
    for i in range(min(tokens, 100)):
        conv.append_token(int(rng.integers(10, 50_000)), " " + WORDS[i % len(WORDS)])
        conv.apply_attention(random_attention(rng, conv.live_token_count()))
        t1 = time.perf_counter()
        view.append_streamed()
        view.flush()
        view.viewport().repaint()
        full_times.append((time.perf_counter() - t1) * 1000)
    conv.end_turn()

    start, cpu = time.perf_counter(), time.process_time()
    view.rebuild()
    view.viewport().repaint()
    rebuild, rebuild_cpu = time.perf_counter() - start, time.process_time() - cpu
    if png:
        view.grab().save(png)
    figures = {
        "markdown": markdown,
        "rendered": render,
        "live_tokens": len(conv.table),
        "first_paint_ms": _ms(first_paint),
        "first_paint_cpu_ms": _ms(first_paint_cpu),
        "token_p50_ms": _percentile(real_wall, 50),
        "token_p95_ms": _percentile(real_wall, 95),
        "token_cpu_p50_ms": _percentile(real_cpu, 50),
        "token_cpu_p95_ms": _percentile(real_cpu, 95),
        "token_random_attention_p50_ms": _percentile(rand_wall, 50),
        "token_random_attention_p95_ms": _percentile(rand_wall, 95),
        "token_random_attention_cpu_p50_ms": _percentile(rand_cpu, 50),
        "token_random_attention_cpu_p95_ms": _percentile(rand_cpu, 95),
        "token_full_repaint_p50_ms": _percentile(full_times, 50),
        "token_full_repaint_p95_ms": _percentile(full_times, 95),
        "token_core_p50_ms": _percentile(core, 50),
        "token_core_p95_ms": _percentile(core, 95),
        "rebuild_ms": _ms(rebuild),
        "rebuild_cpu_ms": _ms(rebuild_cpu),
    }
    view.close()
    return figures


def bench_graveyard(count: int, frames: int = 120) -> dict:
    from halo_weave.ui.graveyard import GraveyardPanel

    app = QApplication.instance() or QApplication([])
    rng = np.random.default_rng(2)
    rows = [
        Chunk(i, i // 3, i % 3, "user" if (i // 3) % 2 == 0 else "assistant", start=10_000_000 - 64 * i,
              token_count=int(rng.integers(64, 200)), live=False, brightness_at_prune=int(rng.integers(7000, 10000)))
        for i in range(count)
    ]
    texts = {r.id: " ".join(WORDS[j % len(WORDS)] for j in range(r.id % 17, r.id % 17 + 40)) for r in rows}
    panel = GraveyardPanel()
    panel.resize(380, 800)
    panel.show()
    app.processEvents()
    start = time.perf_counter()
    panel.set_rows(rows, texts.__getitem__)
    app.processEvents()
    panel.list_view().viewport().repaint()
    opened = time.perf_counter() - start
    view = panel.list_view()
    bar = view.verticalScrollBar()

    def scroll(values: list[int], full: bool) -> tuple[list[float], list[float]]:
        wall, cpu = [], []
        for value in values:
            t0, c0 = time.perf_counter(), time.process_time()
            bar.setValue(value)  # Qt moves the pixels...
            if full:
                view.viewport().repaint()  # ...or every row on screen is painted again
            else:
                app.processEvents()  # ...and paints the rows that came into view
            wall.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.process_time() - c0) * 1000)
        return wall, cpu

    wheel = view.sizeHintForRow(0) * 3  # one wheel notch: three rows
    start_at = bar.maximum() // 3
    wheel_wall, wheel_cpu = scroll([start_at + i * wheel for i in range(frames)], False)
    page = max(1, bar.maximum() // frames)  # a page or more per frame: every row is new
    jump_wall, jump_cpu = scroll([min(bar.maximum(), i * page) for i in range(frames)], True)
    filter_wall, filter_cpu = [], []
    for text in ("graveyard anchors", "t12 assistant", "", "window"):
        t0, c0 = time.perf_counter(), time.process_time()
        panel.set_filter(text)
        app.processEvents()
        filter_wall.append(_ms(time.perf_counter() - t0))
        filter_cpu.append(_ms(time.process_time() - c0))
    panel.close()
    return {
        "graveyard_rows": count,
        "graveyard_open_ms": _ms(opened),
        "graveyard_frame_p50_ms": _percentile(wheel_wall, 50),
        "graveyard_frame_p95_ms": _percentile(wheel_wall, 95),
        "graveyard_frame_cpu_p50_ms": _percentile(wheel_cpu, 50),
        "graveyard_frame_cpu_p95_ms": _percentile(wheel_cpu, 95),
        "graveyard_page_jump_p50_ms": _percentile(jump_wall, 50),
        "graveyard_page_jump_p95_ms": _percentile(jump_wall, 95),
        "graveyard_page_jump_cpu_p50_ms": _percentile(jump_cpu, 50),
        "graveyard_page_jump_cpu_p95_ms": _percentile(jump_cpu, 95),
        "graveyard_filter_first_ms": filter_wall[0],
        "graveyard_filter_first_cpu_ms": filter_cpu[0],
        "graveyard_filter_max_later_ms": max(filter_wall[1:]),
        "graveyard_filter_max_later_cpu_ms": max(filter_cpu[1:]),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--live-tokens", type=int, default=30_000)
    parser.add_argument("--tokens", type=int, default=300, help="generated tokens to time")
    parser.add_argument("--graveyard", type=int, default=10_000, help="pruned chunks in the graveyard")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--markdown", action="store_true", help="answers in real Markdown, rendered")
    mode.add_argument("--raw", action="store_true", help="plain prose with rendering off (as typed)")
    parser.add_argument("--png", help="save a PNG of the heatmap after the run")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)
    QApplication.instance() or QApplication([])
    figures = {"platform": os.environ.get("QT_QPA_PLATFORM"), "cpus": os.cpu_count(),
               "load_average_1min_start": round(os.getloadavg()[0], 2)}
    figures.update(bench_heatmap(args.live_tokens, args.tokens, args.png, markdown=args.markdown,
                                 render=not args.raw))
    figures.update(bench_graveyard(args.graveyard))
    figures["load_average_1min_end"] = round(os.getloadavg()[0], 2)
    figures["process_cpu_s"] = round(time.process_time(), 2)
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:28s} {value}")
    return figures

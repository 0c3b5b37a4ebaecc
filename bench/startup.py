"""Time from launch to a usable window with a large live conversation (no model load).

Builds a conversation of ``--live-tokens`` live tokens (plus as many pruned) in a
temporary data directory, then launches the app in a fresh interpreter, offscreen, with
no server (so no model loads) and measures, inside that process, from the start of the
interpreter to the first paint of the heatmap showing the conversation, with the event
loop then answering within a frame.  Prints one JSON object as its last line with --json.

    python scripts/bench_startup.py [--live-tokens 30000] [--runs 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_S = 0.8

WORDS = (
    "the attention of a model decides which paragraph stays alive while older chunks fade "
    "into the graveyard until a later question brings them back at their place tea cat "
    "lighthouse dragon river mountain code function return value list of numbers"
).split()

CHILD = r"""
import os, sys, time
T0 = float(os.environ["BENCH_T0"])
from pathlib import Path
from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtWidgets import QApplication
from halo_weave.app import TurnController
from halo_weave.settings import Settings
from halo_weave.ui.main_window import MainWindow, app_qsettings

app = QApplication([])
try:
    from halo_weave.ui.theme import apply_dark_theme
    apply_dark_theme(app)
except ImportError:
    pass
data_dir = Path(os.environ["HALO_WEAVE_HOME"])
settings = Settings.of(server_url="http://127.0.0.1:9", autostart_server=False)
controller = TurnController(settings, data_dir, autostart=False)
window = MainWindow(controller, app_qsettings(data_dir))
painted = []

class Watch(QObject):
    def eventFilter(self, obj, event):
        if event.type() == QEvent.Type.Paint and controller.conv is not None and not painted:
            painted.append(time.time())
        return False

watch = Watch()
window.heatmap.viewport().installEventFilter(watch)
window.show()
controller.start(None)
deadline = time.time() + 60
while not painted and time.time() < deadline:
    app.processEvents()
# Usable = the event loop answers a zero-timer within a frame after the first paint.
answered = []
QTimer.singleShot(0, lambda: answered.append(time.time()))
while not answered:
    app.processEvents()
live = controller.conv.live_token_count()
print("RESULT", painted[0] - T0, answered[0] - T0, live, flush=True)
controller.shutdown()
os._exit(0)
"""


BASELINE = r"""
import os, time
T0 = float(os.environ["BENCH_T0"])
import numpy
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMainWindow, QPlainTextEdit
app = QApplication([])
window = QMainWindow()
window.setCentralWidget(QPlainTextEdit("word " * 2000))
window.show()
app.processEvents()
answered = []
QTimer.singleShot(0, lambda: answered.append(time.time()))
while not answered:
    app.processEvents()
print("RESULT", answered[0] - T0, answered[0] - T0, 0, flush=True)
os._exit(0)
"""


def build_conversation(data_dir: Path, live_tokens: int, seed: int = 7) -> Path:
    """A conversation with ``live_tokens`` live tokens and as many pruned ones."""
    from halo_weave.conversation import Conversation, Framing
    from halo_weave.settings import Settings
    from halo_weave.store import ConversationStore, new_conversation_path

    rng = random.Random(seed)
    framing = Framing(
        prefix={r: ([1, 2, 3], ["<|im_start|>", r, "\n"]) for r in ("system", "user", "assistant")},
        suffix={r: ([4, 5], ["<|im_end|>", "\n"]) for r in ("system", "user", "assistant")},
    )
    path = new_conversation_path(data_dir)
    store = ConversationStore.open(path)
    conv = store.load(Settings.of(max_context_tokens=live_tokens), framing)
    role = "user"
    while conv.live_token_count() < 2 * live_tokens:
        texts = []
        for paragraph in range(rng.randint(2, 5)):
            texts += [" " + rng.choice(WORDS) for _ in range(rng.randint(40, 120))]
            texts.append("\n\n")
        ids = [rng.randint(10, 40000) for _ in texts]
        turn = conv.add_turn(role, ids, texts)
        store.save_turn(conv, turn)
        role = "assistant" if role == "user" else "user"
    conv.set_brightness([rng.randint(-200, 10000) for _ in range(len(conv.table))])
    store.save_brightness(conv)
    pruned = conv.prune_to_fit(live_tokens)
    store.save_chunks(conv, pruned)
    store.close()
    (data_dir / "last_conversation").write_text(str(path))
    return path


def run_once(data_dir: Path, priority: bool = False, code: str = CHILD) -> tuple[float, float, int]:
    env = dict(os.environ, HALO_WEAVE_HOME=str(data_dir), QT_QPA_PLATFORM=os.environ.get("QT_QPA_PLATFORM", "offscreen"),
               BENCH_T0=repr(time.time()))
    # A user's launch reads cached bytecode; some sandboxes forbid writing it, which
    # would add the compile time of every module to every launch.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    command = [sys.executable, "-c", code]
    if priority:
        # On a shared, busy machine: run the launch ahead of other work, as on an idle desktop.
        command = ["nice", "-n", "-15", *command]
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT"):
            _, paint, usable, live = line.split()
            return float(paint), float(usable), int(live)
    raise RuntimeError(f"child failed:\n{out.stdout}\n{out.stderr}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--live-tokens", type=int, default=30000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--priority", action="store_true",
                        help="run the launches at raised priority (needs root): approximates an idle machine")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        t = time.perf_counter()
        build_conversation(data_dir, args.live_tokens)
        build_s = time.perf_counter() - t
        run_once(data_dir)  # warm-up: bytecode cache and OS file cache, as on a second launch
        results = [run_once(data_dir, args.priority) for _ in range(args.runs)]
        # What this machine needs for any PySide6 + numpy window: the floor under the figure.
        baseline = [run_once(data_dir, args.priority, BASELINE)[1] for _ in range(args.runs)]
    usable = [r[1] for r in results]
    figures = {
        "live_tokens": results[0][2],
        "load_average_1min": round(os.getloadavg()[0], 2),
        "raised_priority": args.priority,
        "launch_to_first_paint_s": [round(r[0], 3) for r in results],
        "launch_to_usable_window_s": [round(u, 3) for u in usable],
        "launch_to_usable_window_median_s": round(statistics.median(usable), 3),
        "baseline_bare_pyside_numpy_window_median_s": round(statistics.median(baseline), 3),
        "goal_s": GOAL_S,
        "meets_goal": statistics.median(usable) <= GOAL_S,
        "build_fixture_s": round(build_s, 1),
    }
    if not args.json:
        print(f"launch -> usable window with {figures['live_tokens']} live tokens: "
              f"median {figures['launch_to_usable_window_median_s']} s (goal <= {GOAL_S} s)")
    print(json.dumps(figures))

"""Screenshots of find in the chat, the Markdown export, the light and the dark theme, and
of what a newcomer tripped on, fixed: the graveyard's rows, the stats bar on one line at
the default size, the list entry of a branched conversation, a recall line.

No model is needed: the window runs on a closed port and the conversation (24 messages
with Markdown and code, pruned paragraphs, a branch, what a message recalled) is written
into a real conversation file first; the connection's line is set as a connected
bundled server would show it.  Run under a real X server to see what a user sees:

    xvfb-run -a -s "-screen 0 1400x1000x24" python scripts/screenshot_find_theme.py --out docs/screenshots

Saves find_in_chat, find_pruned_menu, theme_light, theme_dark, export_markdown_menu,
export_markdown_dialog, graveyard_rows, chunk_menu, stats_bar_one_line,
conversation_list_branches and recall_back (PNG) in --out; prints one JSON object last.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

EXCHANGES = [
    ("I fly to Lisbon on 3 March, early in the morning. What should I pack?",
     "For Lisbon in early March, pack **layers**:\n\n- a light rain jacket\n- comfortable walking shoes\n"
     "- a warm sweater for the evenings\n\nThe city is hilly, so good shoes matter most."),
    ("My cat is called Mochi. She is a grey tabby and hates the carrier.",
     "Mochi sounds lovely! To make the carrier easier, leave it open at home with a blanket inside.\n\n"
     "Treats near the carrier help her see it as a safe place."),
    ("Can you write a Python function that converts Celsius to Fahrenheit?",
     "```python\n# Define the conversion\ndef to_fahrenheit(celsius):\n    return celsius * 9 / 5 + 32\n```\n\n"
     "Call `to_fahrenheit(20)` and it returns `68.0`."),
    ("What is there to eat in Lisbon?",
     "Try *pastel de nata* in Belém.\n\nGrilled sardines are a Lisbon classic in summer, "
     "and bacalhau is on every menu all year."),
    ("How long should I boil an egg for a soft yolk?",
     "About six minutes from boiling water, then cool it under cold water for a minute."),
    ("What are three easy stretches for a stiff back?",
     "1. Child's pose for thirty seconds.\n2. Cat-cow, slowly, ten times.\n3. A gentle seated twist each side."),
    ("Suggest a name for a small bakery by the sea.",
     "How about **Salt & Crumb**? It hints at the sea and at fresh bread."),
    ("Which day trip from Lisbon is easiest by train?",
     "Sintra: forty minutes from Rossio station, with palaces in the hills.\n\n"
     "Cascais is another easy one, by the sea."),
    ("Why do leaves change colour in autumn?",
     "Chlorophyll breaks down as days shorten, and the yellow and orange pigments show through."),
    ("What is a good way to keep basil alive on a windowsill?",
     "Water it when the top of the soil is dry, give it six hours of sun, and pinch the tips often."),
    ("Remind me: when do I fly, and where to?",
     "You fly to Lisbon on 3 March, early in the morning."),
    ("And what did I say about Mochi?",
     "Mochi is your grey tabby, and she hates the carrier."),
]
RECALLED_FOR = 10  # the question (0-based exchange) whose recall line is shown


def _pieces(text: str) -> list[str]:
    return re.findall(r"\n+|[^\S\n]*\S+", text)


def write_conversation(data_dir: Path) -> Path:
    """The chat, in a real file: every third answer's second paragraph pruned, the last
    question recalling the Lisbon and Mochi paragraphs, and a branch at its first message."""
    from halo_weave.settings import Settings
    from halo_weave.storage import branches, recall_rows
    from halo_weave.store import ConversationStore, new_conversation_path

    path = new_conversation_path(data_dir)
    with ConversationStore.open(path) as store:
        conv = store.load(Settings.of(min_chunk_tokens=6))
        for question, answer in EXCHANGES:
            for role, text in (("user", question), ("assistant", answer)):
                pieces = _pieces(text)
                store.save_turn(conv, conv.add_turn(role, list(range(100, 100 + len(pieces))), pieces))
        turns = list(conv.turns)
        pruned = []
        for n in (1, 3, 4, 7):  # whole exchanges and single paragraphs go to the graveyard
            for turn in turns[2 * n: 2 * n + 2]:
                for chunk in conv.content_chunks(turn):
                    if chunk.live and (n in (1, 4) or chunk.chunk_index > 0 or "sardines" in conv.chunk_text(chunk.id)):
                        pruned += conv.prune_chunk(chunk.id)
        code = [c for c in conv.content_chunks(turns[5]) if "def to_fahrenheit" in conv.chunk_text(c.id)]
        pruned += conv.prune_chunk(code[0].id)
        store.save_chunks(conv, pruned)
        mochi = [c.id for c in conv.content_chunks(turns[2])] + [c.id for c in conv.content_chunks(turns[3])]
        conv.record_recall(turns[2 * RECALLED_FOR + 2], mochi)
        with store.transaction():
            recall_rows.write(store.conn, conv, turns[2 * RECALLED_FOR + 2])
        # A branch at the first message: the user asked about Porto instead, first.
        pieces = _pieces("I fly to Porto on 3 March instead. What should I pack?")
        turn, _ = branches.edit_message(conv, store, turns[0], list(range(100, 100 + len(pieces))), pieces)
        answer = _pieces("For Porto in March: a rain jacket and shoes with a good grip.")
        store.save_turn(conv, conv.add_turn("assistant", list(range(100, 100 + len(answer))), answer))
        shown = branches.stashed(store)
        branches.switch(store, shown[0])  # show the first wording again
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/screenshots"))
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="halo-weave-find-shots-"))
    os.environ["HALO_WEAVE_HOME"] = str(home)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from PySide6.QtCore import QPoint
    from PySide6.QtWidgets import QApplication, QFileDialog

    from halo_weave.app import TurnController
    from halo_weave.settings import Settings
    from halo_weave.ui.control.link import model_first
    from halo_weave.ui.main_window import MainWindow, app_qsettings
    from halo_weave.ui.theme import apply_theme

    app = QApplication.instance() or QApplication(sys.argv[:1])
    apply_theme(app, "dark")
    args.out.mkdir(parents=True, exist_ok=True)
    path = write_conversation(home)
    controller = TurnController(Settings.of(server_url="http://127.0.0.1:9", autostart_server=False,
                                            min_chunk_tokens=6), home, autostart=False)
    window = MainWindow(controller, app_qsettings(home))
    window.show()
    saved: dict[str, str] = {}

    def settle(seconds: float = 0.3) -> None:
        end = time.time() + seconds
        while time.time() < end:
            app.processEvents()
            time.sleep(0.02)

    def shot(name: str, widget=None, whole_screen: bool = False) -> None:
        settle()
        target = widget or window
        file = args.out / f"{name}.png"
        if whole_screen:
            target.screen().grabWindow(0).copy(window.frameGeometry()).save(str(file))
        else:
            target.grab().save(str(file))
        saved[name] = str(file)

    settle(1.0)
    controller.files.open_conversation(path)
    settle(0.5)
    name = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    bar = window.stats_bar
    bar.show_connection("connected", model_first(f"Halo Weave server · 32768 ctx · {name}", name))
    stats = controller.stats()
    stats.update(tokens_per_s=11.8, first_token_s=0.4)
    bar.update_stats(**stats)
    shot("stats_bar_one_line", whole_screen=True)
    shot("conversation_list_branches", window.conversation_list)

    # The recall line under the last-but-one question: its paragraphs pruned again.
    view = window.heatmap
    conv = controller.conv
    question = list(conv.turns)[2 * RECALLED_FOR + 2] if len(conv.turns) > 2 * RECALLED_FOR + 2 else None
    if question is not None:
        view.rebuild()
        settle()
        view.verticalScrollBar().setValue(view.verticalScrollBar().maximum())
        shot("recall_back", view)

    # The graveyard and the context menu: the same words for a paragraph.
    window.graveyard.show_graveyard_of(conv)
    shot("graveyard_rows", window.graveyard)
    live = next(c for c in conv.live_chunks() if not c.framing and c.chunk_index == 0 and c.role == "assistant")
    view.scroll_to_chunk(live.id)
    settle()
    menu = view.context_menu_for(view.chunk_rect(live.id).center())
    menu.popup(view.viewport().mapToGlobal(view.chunk_rect(live.id).center()))
    settle()
    shot("chunk_menu", menu)
    menu.close()

    # Find in the chat.
    window.find_bar.open()
    window.find_bar.edit.setText("Lisbon")
    settle(0.6)
    window.find_bar.step(1)
    shot("find_in_chat", whole_screen=True)
    pruned_menu = window.find_bar.pruned_button.menu()
    if pruned_menu is not None:
        button = window.find_bar.pruned_button
        pruned_menu.popup(button.mapToGlobal(QPoint(0, button.height())))
        settle()
        shot("find_pruned_menu", pruned_menu)
        pruned_menu.close()

    # The themes.
    window.menus.theme_actions["light"].trigger()
    settle(0.6)
    shot("theme_light", whole_screen=True)
    window.menus.theme_actions["dark"].trigger()
    settle(0.6)
    shot("theme_dark", whole_screen=True)
    window.find_bar.close_bar()

    # The Markdown export: the File menu, and the dialog's file name (the title).
    file_menu = window.menuBar().actions()[0].menu()
    file_menu.popup(window.mapToGlobal(QPoint(0, window.menuBar().height())))
    file_menu.setActiveAction(window.menus.markdown_export_action)
    settle()
    shot("export_markdown_menu", file_menu)
    file_menu.close()
    dialog = QFileDialog(window, "Export conversation as Markdown", window.menus.export_start(".md"), "Markdown (*.md)")
    dialog.setOption(QFileDialog.Option.DontUseNativeDialog)
    dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
    dialog.selectFile(Path(window.menus.export_start(".md")).name)
    dialog.resize(760, 420)
    dialog.show()
    settle(0.6)
    shot("export_markdown_dialog", dialog)
    dialog.close()
    exported = home / "export.md"
    controller.files.export_markdown(exported, window.menus.export_title())
    window.close()
    print(json.dumps({"saved": saved, "title": window.menus.export_title(),
                      "markdown_head": exported.read_text(encoding="utf-8")[:400]}))


if __name__ == "__main__":
    main()

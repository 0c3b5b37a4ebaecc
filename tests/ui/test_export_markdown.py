"""File → Export Markdown… and the export's file name: a conversation as a reader wants
it (roles, turns in order, pruned paragraphs included and marked), in a file named after
the conversation's title, not its timestamp id.  Real SQLite files in ``tmp_path``; a
window on a closed port (no model is needed to export)."""

from __future__ import annotations

import re
from pathlib import Path

from halo_weave.settings import Settings
from halo_weave.storage.transfer_markdown import PRUNED_MARK, file_name_for
from halo_weave.store import ConversationStore, new_conversation_path

MESSAGES = [
    ("user", "Packing for Kyoto in April: what should I bring?"),
    ("assistant", "Bring layers: mornings are cool.\n\nA light rain jacket helps in April showers.\n\n"
                  "```python\nprint('umbrella')\n```"),
    ("user", "And shoes?"),
    ("assistant", "Comfortable walking shoes: temples mean many steps."),
]


def write_pruned_conversation(data_dir: Path) -> Path:
    """:data:`MESSAGES` in a file, the answer's second paragraph pruned."""
    path = new_conversation_path(data_dir)
    with ConversationStore.open(path) as store:
        conv = store.load(Settings.of(min_chunk_tokens=4))
        for role, text in MESSAGES:
            pieces = re.findall(r"\n+|[^\S\n]*\S+", text)
            store.save_turn(conv, conv.add_turn(role, list(range(100, 100 + len(pieces))), pieces))
        answer = list(conv.turns)[1]
        rain = next(c for c in conv.content_chunks(answer) if "rain" in conv.chunk_text(c.id))
        store.save_chunks(conv, conv.prune_chunk(rain.id))
    return path


def test_export_markdown_holds_every_message_and_marks_the_pruned_paragraph(offline_window, tmp_path):
    window = offline_window
    path = write_pruned_conversation(tmp_path)
    assert window.controller.files.open_conversation(path)
    start = Path(window.menus.export_start(".md"))
    assert start.name == "Packing for Kyoto in April what should I.md", "named after the title"
    assert not re.match(r"\d{8}-\d{6}", start.name)
    assert Path(window.menus.export_start(".json")).name == "Packing for Kyoto in April what should I.json"

    out = tmp_path / start.name
    assert window.controller.files.export_markdown(out, window.menus.export_title())
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Packing for Kyoto in April: what should I")
    headings = re.findall(r"^## (\d+) · (\w+)", text, re.M)
    assert headings == [("1", "User"), ("2", "Assistant"), ("3", "User"), ("4", "Assistant")]
    assert "Bring layers: mornings are cool." in text and "Comfortable walking shoes" in text
    assert f"{PRUNED_MARK}\n\n> A light rain jacket helps in April showers." in text, "pruned: included, marked"
    assert "```python\nprint('umbrella')\n```" in text, "code stays a fenced block"
    assert text.count(PRUNED_MARK) == 1
    assert window.menus.markdown_export_action.text() == "Export &Markdown…"


def test_a_file_name_keeps_only_what_file_systems_accept():
    assert file_name_for("What is 3/4 of 12? A: 9 …", ".md") == "What is 3 4 of 12 A 9.md"
    assert file_name_for("", ".json") == "conversation.json"
    assert len(file_name_for("word " * 100, ".md")) <= 83

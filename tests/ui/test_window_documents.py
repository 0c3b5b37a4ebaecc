"""Attaching a document in the window: Chat → Attach a document (or a file dropped on the
window) reads it on a thread with the status bar's progress bar, lists its paragraphs in
the graveyard with the file's name and page, and refuses a file it cannot read with a
dialog while the conversation stays as it was.  The real window, server, model, embedder
and SQLite file (``make_app``)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent

from bench.pdf_writer import write_pdf
from test_app import TURN_TIMEOUT_MS, make_app  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow

#: Loading the embedder and embedding a document on a busy 2-core machine takes minutes.
INDEX_TIMEOUT_MS = 900_000


def settle(app, qtbot) -> None:
    """Wait for the memory to load and every paragraph to be indexed."""
    qtbot.waitUntil(lambda: app.controller.memory.pending == 0, timeout=INDEX_TIMEOUT_MS)
    qtbot.wait(50)


def pages(count: int) -> list[list[str]]:
    return [[f"Ship log, page {n}.", f"On day {n} the ferry carried {n * 7} crates of pears to the island."]
            for n in range(1, count + 1)]


def graveyard_texts(app) -> list[str]:
    model = app.window.graveyard.model()
    return [model.preview(model.row_at(i).chunk_id) for i in range(model.rowCount())]


def test_attach_a_pdf_shows_progress_and_its_pages_in_the_graveyard(make_app, qtbot, tmp_path):
    app = make_app().start()
    app.say("Hello, I will send you the ship log.")
    progress = []
    app.controller.signals.progress.connect(lambda what, done, total: progress.append((what, done, total)))
    pdf = write_pdf(tmp_path / "ship log.pdf", pages(40))
    with qtbot.wait_signal(app.controller.documents.attached, timeout=TURN_TIMEOUT_MS) as done:
        assert app.controller.documents.attach(pdf)
        assert app.controller.gate.busy, "input stays closed while the file is read"
    attached = done.args[0]
    assert attached.pages == 40 and not attached.live
    reading = [p for p in progress if p[0] == "Reading ship log.pdf" and p[2] > 0]
    assert reading and reading[-1][1] == reading[-1][2], "the bar counted up to the end"
    assert "Attached ship log.pdf" in app.window.statusBar().currentMessage()
    settle(app, qtbot)
    indexing = [p for p in progress if p[0] == "Indexing ship log.pdf"]
    assert indexing and indexing[-1][1] == indexing[-1][2] == len(attached.chunk_ids), \
        "indexing shows its own progress, to the end (after the memory loaded, if it was loading)"
    texts = graveyard_texts(app)
    assert any(t.startswith("[ship log.pdf, page 12]") for t in texts)
    assert not app.controller.gate.busy
    assert app.say("How many crates of pears did the ferry carry on day 12?") in ("stop", "length")
    recalled = [c for c in app.conv.live_chunks() if c.role == "document"]
    assert any("[ship log.pdf, page 12]" in app.conv.chunk_text(c.id) for c in recalled), \
        "the page asked about came back into the context"
    assert "[ship log.pdf, page 12]" in app.window.heatmap.toPlainText(), "and shows in the heatmap"


def test_a_dropped_file_is_attached_and_an_unreadable_one_refused(make_app, qtbot, tmp_path):
    app = make_app().start()
    app.say("Hello.")
    turns = list(app.conv.turns)
    binary = tmp_path / "photo.jpg"
    binary.write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(512))
    with qtbot.wait_signal(app.controller.documents.refused, timeout=TURN_TIMEOUT_MS) as refused:
        app.controller.documents.attach(binary)
    assert "photo.jpg is a binary file" in refused.args[0]
    assert list(app.conv.turns) == turns, "nothing of the conversation changed"
    assert app.window.messages.history[-1].title == "Document not attached"
    assert not app.controller.gate.busy

    notes = tmp_path / "notes.md"
    notes.write_text("# Packing list\n\nTent, stove, two blue mugs.\n")
    data = QMimeData()
    data.setUrls([QUrl.fromLocalFile(str(notes))])
    drop = QDropEvent(QPointF(50, 50), Qt.DropAction.CopyAction, data, Qt.MouseButton.NoButton,
                      Qt.KeyboardModifier.NoModifier)
    with qtbot.wait_signal(app.controller.documents.attached, timeout=TURN_TIMEOUT_MS):
        app.window.dropEvent(drop)
    settle(app, qtbot)
    assert any(t.startswith("[notes.md, line 1]") for t in graveyard_texts(app))

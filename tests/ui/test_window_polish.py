"""The window as the screen shows it: the message box's placeholder after a busy spell
(the pixels, not the property), a window that fits a 1280 px screen with the graveyard
open, the first-start box beside (not over) the system prompt, and no pile of empty
conversations in the list.  Real SQLite files in ``tmp_path``; the answer and the system
prompt tests use the real server and model."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtGui import QImage

from halo_weave.settings import Settings
from halo_weave.exchange import transfer
from halo_weave.store import list_conversations

from test_app import TURN_TIMEOUT_MS, make_app  # noqa: F401 - the fixture
from window_helpers import write_conversation

#: Left columns of the message box left out of pixel comparisons: the text cursor blinks there.
CURSOR_COLUMNS = 12


@pytest.fixture
def window(offline_window):
    return offline_window


def _pixels(image: QImage) -> np.ndarray:
    image = image.convertToFormat(QImage.Format.Format_RGB32)
    rows = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine())
    return rows[:, : image.width() * 4].reshape(image.height(), image.width(), 4)[..., :3].copy()


def stale_pixels(widget) -> int:
    """Pixels where the screen (the window's backing store) differs from what the widget
    draws now: more than a handful means the screen shows an old picture."""
    top = widget.window()
    shot = top.screen().grabWindow(top.winId()).toImage()
    on_screen = _pixels(shot.copy(QRect(widget.mapTo(top, QPoint(0, 0)), widget.size())))
    fresh = _pixels(widget.grab().toImage())
    return int((on_screen != fresh).any(axis=2)[:, CURSOR_COLUMNS:].sum())


# ---------------------------------------------------------------- the placeholder
def test_after_an_import_the_message_box_no_longer_says_importing(window, qtbot, tmp_path):
    controller, box = window.controller, window.input
    controller.files.open_conversation(None)
    exported = tmp_path / "tea.json"
    transfer.export_conversation(write_conversation(tmp_path, "Green tea or oolong for the evening?"), exported)
    qtbot.wait(50)
    controller.files.import_json(exported)
    assert box.placeholderText() == "Importing…"
    box.viewport().repaint()  # the screen shows the busy text, as it does while a big import runs
    assert stale_pixels(box.viewport()) < 5
    qtbot.waitUntil(lambda: not controller.gate.busy and len(controller.conv.turns) > 0, timeout=30_000)
    qtbot.wait(100)  # every pending paint reaches the screen
    assert box.placeholderText() == controller.gate.input_block_reason() != "Importing…"
    assert stale_pixels(box.viewport()) < 5, "the screen still shows the old placeholder"


@pytest.mark.slow
def test_after_an_answer_the_message_box_shows_the_message_hint_again(make_app, qtbot):
    app = make_app(max_new_tokens=12).start()
    window, box = app.window, app.window.input
    qtbot.waitExposed(window)
    app.say("Hello!")  # the bar of the last exchange appears (a re-layout repaints everything)
    window.input.setPlainText("Name three colours.")
    with qtbot.wait_signal(app.controller.signals.turn_finished, timeout=TURN_TIMEOUT_MS):
        qtbot.keyClick(box, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: app.controller.turn.generating, timeout=TURN_TIMEOUT_MS)
        assert box.placeholderText() == "The model is answering — Esc stops"
        box.viewport().repaint()
    qtbot.waitUntil(lambda: not app.controller.gate.busy, timeout=10_000)
    qtbot.wait(100)
    assert window.send_button.isEnabled() and window.answer_bar.continue_button.isEnabled()
    assert box.placeholderText().startswith("Message — Enter sends")
    assert stale_pixels(box.viewport()) < 5, "the screen still says the model is answering"


# ---------------------------------------------------------------- a 1280 px screen
def test_the_window_fits_a_1280_px_screen_with_the_graveyard_open(window, qtbot):
    window.controller.files.open_conversation(None)
    window.set_graveyard_visible(True)
    bar = window.stats_bar
    detail = ("Qwen2.5-0.5B-Instruct-Q4_K_M.gguf · llama.cpp 0.3.2 · 32,768 ctx · attention from layers 12-23 "
              "of 24 · served at http://127.0.0.1:5001")
    bar.show_connection("connected", detail)
    bar.set_brightness_source("reader", "reader's attention (SmolLM2-135M) · pruning by the reader " * 2, "")
    bar.update_stats(123_456, 200_000, 9_876_543, 12_345, 9_876.0, 123.4, 12, first_token_s=12.3,
                     brightness_source="reader")
    assert window.minimumSizeHint().width() <= 1280
    window.resize(1280, 800)
    qtbot.waitUntil(lambda: window.width() == 1280, timeout=2000)
    inside = window.rect()
    for widget in (bar.graveyard_button, bar.connection_label, bar.budget_label, window.graveyard,
                   window.send_button):
        rect = QRect(widget.mapTo(window, QPoint(0, 0)), widget.size())
        assert widget.isVisible() and inside.contains(rect), f"{widget} is cut off by the screen's edge"
    label = bar.connection_label
    assert label.is_elided() and label.displayed_text().endswith("…")
    assert label.toolTip().startswith(detail), "the whole text is in the tooltip"
    assert not bar.budget_label.is_elided(), "the context budget, the most needed figure, stays whole"


def test_at_the_default_size_every_figure_of_the_stats_bar_is_whole(window, qtbot):
    """A newcomer saw the bar wrap onto two lines at the size a first start opens at, and
    the model's name cut: the bar spans the window and fits one line, the name first."""
    from halo_weave.ui.control.link import model_first

    window.controller.files.open_conversation(None)
    assert (window.width(), window.height()) == (1180, 780), "the size a first start opens at"
    bar = window.stats_bar
    name = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    bar.show_connection("connected", model_first(f"Halo Weave server · 32768 ctx · {name}", f"/models/{name}"))
    bar.update_stats(2_346, 2_048, 9_646, 12, 4_567.0, 23.4, 310, first_token_s=0.8, exchange_open=True)
    qtbot.wait(50)
    inside = window.rect()
    for label in (bar.budget_label, bar.recalled_label, bar.totals_label, bar.brightness_label,
                  bar.speed_label, bar.connection_label):
        rect = QRect(label.mapTo(window, QPoint(0, 0)), label.size())
        assert label.isVisible() and inside.contains(rect), f"{label.text()!r} is outside the window"
        assert not label.is_elided(), f"{label.text()!r} reads {label.displayed_text()!r}"
    assert bar.connection_label.text().startswith(f"{name} · "), "the model's name whole"
    assert not bar.is_two_lines(), "one line at the default size"
    assert bar.width() > window.width() * 0.95, "the bar spans the window"
    # A wide window has room for one line.
    window.set_graveyard_visible(False)
    window.resize(1600, 900)
    qtbot.waitUntil(lambda: window.width() == 1600, timeout=2000)
    assert not bar.is_two_lines()
    qtbot.waitUntil(lambda: bar.speed_label.geometry().center().y() == bar.budget_label.geometry().center().y(),
                    timeout=2000)


# ---------------------------------------------------------------- an empty conversation
@pytest.mark.slow
def test_the_first_start_box_leaves_the_system_prompt_readable(make_app, qtbot):
    # The longest prompt the app writes: the default with the notebook's instructions.
    app = make_app(system_prompt=Settings().chat.system_prompt, notes_tool=True).start()
    window, view = app.window, app.window.heatmap
    qtbot.waitUntil(lambda: "notes.json" in view.toPlainText(), timeout=10_000)
    hint = window.guide.hint
    assert hint.isVisible()
    text_bottom = view.viewport().y() + view.blockBoundingGeometry(
        view.document().lastBlock()).translated(view.contentOffset()).bottom()
    assert text_bottom < view.viewport().height() / 2, "room below the prompt"
    assert hint.geometry().top() >= text_bottom, "the box covers the end of the system prompt"
    assert view.viewport().geometry().contains(hint.geometry())


def test_an_empty_new_conversation_is_not_left_in_the_list(window, qtbot, tmp_path):
    kept = write_conversation(tmp_path, "Packing for Kyoto in April")
    controller, listed = window.controller, window.conversation_list
    controller.start()  # no last conversation: a new, empty one
    qtbot.waitUntil(lambda: "New conversation" in listed.titles(), timeout=2000)
    empty = controller.files.path
    item = listed.list.item(listed.titles().index("Packing for Kyoto in April"))
    qtbot.mouseClick(listed.list.viewport(), Qt.MouseButton.LeftButton,
                     pos=listed.list.visualItemRect(item).center())
    assert controller.files.path == kept
    assert listed.titles() == ["Packing for Kyoto in April"], "the unused one is gone from the list"
    assert not empty.exists()
    # Ctrl+N twice: still one empty conversation, not two.
    qtbot.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert sorted(listed.titles()) == ["New conversation", "Packing for Kyoto in April"]


def test_an_empty_conversation_with_a_changed_system_prompt_is_kept(window, qtbot, tmp_path):
    kept = write_conversation(tmp_path, "Packing for Kyoto in April")
    controller = window.controller
    controller.files.open_conversation(None)
    empty = controller.files.path
    window.apply_settings(controller.settings.replace(system_prompt="You answer in haiku."))
    assert controller.files.open_conversation(kept)
    assert empty.exists() and empty in [s.path for s in list_conversations(tmp_path)]
    assert len(window.conversation_list.titles()) == 2

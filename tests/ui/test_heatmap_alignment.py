"""The colour overlay sits exactly on the text it colours: at every scroll position, while
an answer streams wrapped lines, after a resize, a prune and a resurrection.

Three pixel checks on what is on screen (the window's backing store, the pixels a user
sees, not a fresh render):

* with highlighting off every glyph is tinted by its chunk's colour, so a box that
  slid off its word leaves white text behind: no pure white pixel may remain;
* with highlighting on, the yellow background behind lit tokens may only lie on lines
  that hold text: none in the empty space below the last paragraph;
* the pixels on screen equal a fresh render of the view: nothing stale was left behind
  by scrolling or streaming.
"""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QGuiApplication, QImage, QWheelEvent
from PySide6.QtWidgets import QApplication

from halo_weave.conversation import Conversation
from halo_weave.settings import Settings
from halo_weave.ui.heatmap import HeatmapView

WORDS = "the model keeps an endless conversation inside a fixed window by letting attention decide".split()


def pieces(rng: np.random.Generator, n: int) -> list[str]:
    """Model-like token texts: words, split words, single and double newlines, a list,
    bold markers, non-ASCII, and a Windows line end now and then (imported chats)."""
    out: list[str] = []
    for _ in range(n):
        r, word = rng.random(), WORDS[rng.integers(len(WORDS))]
        if r < 0.03:
            out.append(".\n")
        elif r < 0.05:
            out.append("\n\n")
        elif r < 0.07:
            out.append("\n- ")
        elif r < 0.08:
            out += [".\r", "\n"]
        elif r < 0.09:
            out.append(" naïve 🙂\r\n")
        elif r < 0.12:
            out += [" " + word[:2], word[2:]]
        elif r < 0.14:
            out.append(" **" + word + "**")
        else:
            out.append(" " + word)
    return out


def long_conversation(highlight_fraction: float, turns: int = 16) -> Conversation:
    conv = Conversation(Settings.of(min_chunk_tokens=16, highlight_fraction=highlight_fraction))
    conv.set_system_prompt("Be brief.\r\nBe kind.", [1], ["Be brief.\r\nBe kind."])
    rng = np.random.default_rng(5)
    for t in range(turns):
        texts = pieces(rng, 120)
        conv.add_turn("user" if t % 2 == 0 else "assistant", list(range(len(texts))), texts)
    return conv


def vary_brightness(conv: Conversation, rng: np.random.Generator) -> None:
    attention = rng.random(conv.live_token_count()).astype(np.float32) ** 8
    conv.apply_attention(attention / attention.sum())


def rgb(image: QImage) -> np.ndarray:
    image = image.convertToFormat(QImage.Format.Format_RGB32)
    data = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine() // 4, 4)
    return data[:, : image.width(), 2::-1].astype(np.int32)  # BGRA in memory -> RGB


def on_screen(view: HeatmapView) -> np.ndarray:
    """The viewport's pixels as the window shows them (the backing store), once what is
    pending has painted: a timer that fires inside one round of events (the re-wrap after a
    resize) posts its repaint for the next, which the screen shows a frame later."""
    for _ in range(3):
        view.flush()
        QApplication.processEvents()
    viewport = view.viewport()
    origin = viewport.mapTo(view.window(), QPoint(0, 0))
    screen = QGuiApplication.primaryScreen()
    shot = screen.grabWindow(view.window().winId(), origin.x(), origin.y(), viewport.width(), viewport.height())
    pixels = rgb(shot.toImage())
    button = view.follower.button
    if button.isVisible():  # a child of the view floating over the viewport
        g = button.geometry().translated(-viewport.geometry().x(), -viewport.geometry().y())
        pixels[max(g.top(), 0) : g.bottom() + 1, max(g.left(), 0) : g.right() + 1] = 0
    return pixels


def fresh_render(view: HeatmapView) -> np.ndarray:
    pixels = rgb(view.viewport().grab().toImage())
    button = view.follower.button
    if button.isVisible():
        viewport = view.viewport()
        g = button.geometry().translated(-viewport.geometry().x(), -viewport.geometry().y())
        pixels[max(g.top(), 0) : g.bottom() + 1, max(g.left(), 0) : g.right() + 1] = 0
    return pixels


def white_pixels(pixels: np.ndarray) -> int:
    return int((pixels.min(axis=2) >= 250).sum())


def text_rows(view: HeatmapView) -> np.ndarray:
    """Viewport rows covered by a laid-out line that has text."""
    height = view.viewport().height()
    rows = np.zeros(height, bool)
    offset = view.contentOffset()
    block = view.firstVisibleBlock()
    while block.isValid():
        geo = view.blockBoundingGeometry(block).translated(offset)
        if geo.top() > height:
            break
        layout = block.layout()
        for i in range(layout.lineCount()):
            line = layout.lineAt(i)
            if line.naturalTextWidth() > 0:
                top = int(geo.top() + line.y())
                rows[max(top, 0) : max(min(int(top + line.height()) + 1, height), 0)] = True
        block = block.next()
    return rows


def yellow_rows(pixels: np.ndarray) -> np.ndarray:
    """Rows with the highlight's yellow background (red and green well above blue, dim)."""
    r, g, b = pixels[..., 0], pixels[..., 1], pixels[..., 2]
    yellowish = (r > b + 25) & (g > b + 15) & (r < 140)
    return yellowish.sum(axis=1) >= 3


def check(view: HeatmapView, highlight: bool, where: str) -> None:
    shown = on_screen(view)
    assert np.abs(shown - fresh_render(view)).sum(axis=2).max() <= 30, f"stale pixels on screen {where}"
    if highlight:
        stray = yellow_rows(shown) & ~text_rows(view)
        assert not stray.any(), f"highlight over empty lines {where}: rows {np.flatnonzero(stray)[:10]}"
    else:
        assert white_pixels(shown) == 0, f"untinted glyphs (a box beside its word) {where}"


def wheel(view: HeatmapView, notches: int) -> None:
    viewport = view.viewport()
    centre = QPointF(viewport.width() / 2, viewport.height() / 2)
    for _ in range(abs(notches)):
        delta = QPoint(0, 120 if notches > 0 else -120)
        QApplication.sendEvent(viewport, QWheelEvent(
            centre, viewport.mapToGlobal(centre), QPoint(0, 0), delta, Qt.MouseButton.NoButton,
            Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False))


@pytest.fixture
def view(qtbot):
    widget = HeatmapView()
    qtbot.addWidget(widget)
    widget.resize(620, 460)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


@pytest.mark.parametrize("highlight", [False, True], ids=["tint", "highlight"])
def test_overlay_matches_text_at_several_scroll_positions(view, highlight):
    conv = long_conversation(0.2 if highlight else 0.0)
    vary_brightness(conv, np.random.default_rng(1))
    view.set_conversation(conv)
    bar = view.verticalScrollBar()
    for value in (0, bar.maximum() // 3, bar.maximum() // 2, bar.maximum()):
        bar.setValue(value)
        check(view, highlight, f"at scroll {value}/{bar.maximum()}")


@pytest.mark.parametrize("highlight", [False, True], ids=["tint", "highlight"])
def test_overlay_follows_a_streamed_answer_with_wrapped_lines(view, highlight):
    conv = long_conversation(0.2 if highlight else 0.0)
    view.set_conversation(conv)
    rng = np.random.default_rng(2)
    conv.begin_turn("assistant")
    for i, text in enumerate(pieces(rng, 700)):
        conv.append_token(5, text)
        vary_brightness(conv, rng)
        view.append_streamed()
        if i % 3 == 0:
            view.refresh_brightness()
            view.flush()
            QApplication.processEvents()
        if i in (150, 160):
            wheel(view, 2)  # the user scrolls up to read while it streams ...
        if i in (260, 270, 280):
            wheel(view, -2)  # ... and back down
        if i == 400:
            view.resize(540, 460)
        if i % 70 == 69:
            check(view, highlight, f"after streamed token {i}")
    conv.end_turn()
    view.rebuild()
    check(view, highlight, "after the answer ended")
    bar = view.verticalScrollBar()
    for value in (bar.maximum(), bar.maximum() - 7, bar.maximum() // 2):
        bar.setValue(value)
        check(view, highlight, f"at scroll {value} after the answer")


def test_overlay_after_resize_prune_and_resurrection(view, qtbot):
    conv = long_conversation(0.0)
    vary_brightness(conv, np.random.default_rng(3))
    view.set_conversation(conv)
    view.resize(480, 520)
    qtbot.wait(200)  # the view re-lays out after a resize settles
    check(view, False, "after a resize")
    victims = [c.id for c in conv.live_chunks() if not c.framing and c.chunk_index > 0][:6]
    for chunk_id in victims:
        conv.prune_chunk(chunk_id)
    view.rebuild()
    assert "pruned here" in view.toPlainText()
    bar = view.verticalScrollBar()
    for value in (0, bar.maximum() // 2, bar.maximum()):
        bar.setValue(value)
        check(view, False, f"after a prune, at scroll {value}")
    conv.resurrect(victims[:3], brightness=10000, pin=True)
    view.rebuild()
    for value in (0, bar.maximum() // 2, bar.maximum()):
        bar.setValue(value)
        check(view, False, f"after a resurrection, at scroll {value}")


def test_carriage_returns_do_not_shift_later_tokens(view):
    conv = long_conversation(0.0, turns=2)
    view.set_conversation(conv)
    plan = view.plan
    assert plan.length == view.document().characterCount() - 1
    units = view.toPlainText().replace("\u2029", "\n").encode("utf-16-le")
    for row, start, end in zip(plan.rows, plan.starts, plan.ends):
        chunk = conv.chunks[int(conv.table.chunk_id[row])]
        expected = conv.chunk_texts(chunk.id)[int(conv.table.position[row]) - chunk.start]
        assert units[2 * start : 2 * end].decode("utf-16-le") == expected.replace("\r", "")


def table_pieces(rng: np.random.Generator, rows: int) -> list[str]:
    """A Markdown table whose cells have different lengths, as streamed tokens."""
    out = ["|", " Item", " |", " Count", " |", " Note", " |", "\n", "|---|:---:|---:|", "\n"]
    for _ in range(rows):
        for cell in range(3):
            words = rng.choice(["a", " tea", " kettle", " 12", " 3,400", " **big**", " `x`"],
                               size=int(rng.integers(1, 4)))
            out += ["|" if cell == 0 else " |", *[str(w) for w in words]]
        out += [" |", "\n"]
    return out + ["\n", "Done", "."]


@pytest.mark.parametrize("highlight", [False, True], ids=["tint", "highlight"])
def test_overlay_stays_on_aligned_table_columns(view, highlight):
    conv = long_conversation(0.2 if highlight else 0.0, turns=2)
    rng = np.random.default_rng(7)
    texts = table_pieces(rng, 12)
    conv.add_turn("assistant", list(range(len(texts))), texts)
    vary_brightness(conv, rng)
    view.set_conversation(conv)
    bar = view.verticalScrollBar()
    bar.setValue(bar.maximum())
    check(view, highlight, "over a table")
    conv.begin_turn("assistant")
    for i, text in enumerate(table_pieces(rng, 8)):
        conv.append_token(5, text)
        vary_brightness(conv, rng)
        view.append_streamed()
        if i % 3 == 0:
            view.refresh_brightness()
            view.flush()
            QApplication.processEvents()
    conv.end_turn()
    check(view, highlight, "over a streamed table")

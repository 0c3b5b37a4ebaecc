"""Messages rendered as Markdown: what a reader sees (bold without its asterisks, headings,
code in monospace with syntax colours, links), the Copy buttons, and the heatmap's
overlay still exactly over the rendered text, hidden markup's brightness included."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QFont, QGuiApplication, QTextCharFormat
from PySide6.QtWidgets import QApplication

from halo_weave.conversation import Conversation
from halo_weave.settings import Settings
from halo_weave.ui.heatmap import HeatmapView
from halo_weave.ui.markdown_formats import CODE_COLORS

from test_heatmap_alignment import check, fresh_render, on_screen, vary_brightness, wheel

ANSWER = [
    "#", " Converting", " units", "\n\n",
    "Some", " **", "bold", "**", " text", " and", " `", "x", "`", " inline", ".", "\n\n",
    "-", " first", " item", "\n", "-", " second", " *", "one", "*", "\n\n",
    "See", " [", "the", " docs", "](", "https://example.org/docs", ")", ".", "\n\n",
    "```", "python", "\n", "def", " f", "(x", "):", "\n", "    ", "return", " x", " *", " 9", " /", " 5", "\n",
    "iiii", "\n", "mmmm", "\n", "```", "\n\n",
    "|", " a", " |", " b", " |", "\n", "|---|---|", "\n", "|", " 1", " |", " 2", " |", "\n\n",
    "Done", ".",
]
CODE = "def f(x):\n    return x * 9 / 5\niiii\nmmmm"


def conversation(highlight_fraction: float = 0.0, answer: list[str] = ANSWER) -> Conversation:
    conv = Conversation(Settings.of(min_chunk_tokens=4, highlight_fraction=highlight_fraction))
    conv.set_system_prompt("Be brief.", [1], ["Be brief."])
    question = ["Show", " me", " **", "markdown", "**", "."]
    conv.add_turn("user", list(range(len(question))), question)
    conv.add_turn("assistant", list(range(len(answer))), answer)
    return conv


@pytest.fixture
def view(qtbot):
    widget = HeatmapView()
    qtbot.addWidget(widget)
    widget.resize(640, 560)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def block_starting(view: HeatmapView, prefix: str):
    block = view.document().firstBlock()
    while block.isValid():
        if block.text().startswith(prefix):
            return block
        block = block.next()
    raise AssertionError(prefix)


def x_at(block, offset: int) -> float:
    layout = block.layout()
    return layout.lineForTextPosition(offset).cursorToX(offset)[0]


def format_at(block, offset: int):
    """The character format the rendering gave the character at ``offset`` of ``block``."""
    spans = block.layout().formats()
    for span in spans:
        if span.start <= offset < span.start + span.length:
            return QTextCharFormat(span.format)
    return None


def test_bold_is_bold_and_its_asterisks_take_no_room(view):
    view.set_conversation(conversation())
    view.flush()
    block = block_starting(view, "Some **bold**")
    text = block.text()
    first, last = text.index("**"), text.index("**", text.index("bold"))
    assert x_at(block, first) == x_at(block, first + 2), "the opening ** is drawn at no width"
    assert x_at(block, last) == x_at(block, last + 2), "the closing ** is drawn at no width"
    assert format_at(block, text.index("bold")).fontWeight() == QFont.Weight.Bold
    assert format_at(block, text.index("text")) is None, "the prose after it is plain"
    tick = text.index("`")
    assert x_at(block, tick) == x_at(block, tick + 1), "inline code's backticks are hidden"
    assert format_at(block, tick + 1).fontFixedPitch(), "inline code is monospace"
    # ... on a background of its own (the prose around it keeps the view's).
    pixels = fresh_render(view)
    geo = view.blockBoundingGeometry(block).translated(view.contentOffset())
    line = block.layout().lineAt(0)
    y = int(geo.top() + line.y() + line.height() / 2)
    code_x = int(geo.left() + x_at(block, tick + 1)) - 1
    prose_x = int(geo.left() + x_at(block, text.index(" and")) + 1)
    assert pixels[y, code_x, 1] >= 32 and pixels[y, prose_x, 1] <= 26


def test_headings_lists_and_links_render(view):
    view.set_conversation(conversation())
    view.flush()
    heading = block_starting(view, "# Converting")
    assert x_at(heading, 0) == x_at(heading, 2), "the # and its space are hidden"
    body = block_starting(view, "Some **bold**")
    assert heading.layout().lineAt(0).height() > body.layout().lineAt(0).height(), "a heading is larger"
    item = block_starting(view, "- second")
    assert format_at(item, item.text().index("one")).fontItalic()
    link = block_starting(view, "See [the docs]")
    label = link.text().index("the docs")
    assert format_at(link, label).fontUnderline()
    address = link.text().index("https")
    assert x_at(link, address) == x_at(link, link.text().index(")") + 1), "the address itself is hidden"
    geo = view.blockBoundingGeometry(link).translated(view.contentOffset())
    line = link.layout().lineAt(0)
    point = QPointF(geo.left() + (x_at(link, label) + x_at(link, label + 3)) / 2, geo.top() + line.y() + line.height() / 2)
    assert view.markdown_layer.link_at(point) == "https://example.org/docs"


def test_fenced_code_is_monospace_coloured_and_its_copy_button_copies_it(view, qtbot):
    view.set_conversation(conversation())
    view.flush()
    iiii, mmmm = block_starting(view, "iiii"), block_starting(view, "mmmm")
    assert iiii.layout().lineAt(0).naturalTextWidth() == pytest.approx(mmmm.layout().lineAt(0).naturalTextWidth())
    code = block_starting(view, "def f")
    assert format_at(code, 0).foreground().color() == CODE_COLORS["c-keyword"], "def is a keyword"
    fence = block_starting(view, "```python")
    assert x_at(fence, 0) == x_at(fence, 3), "the fence's backticks are hidden, its language shown"
    buttons = [(rect, target) for rect, kind, target in view.markdown_layer.copy_buttons() if kind == "code"]
    assert len(buttons) == 1
    QGuiApplication.clipboard().clear()
    with qtbot.waitSignal(view.copied) as copied:
        qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=buttons[0][0].center().toPoint())
    assert copied.args == ["code"]
    assert QGuiApplication.clipboard().text() == CODE


def test_each_message_has_a_copy_button(view, qtbot):
    conv = conversation()
    view.set_conversation(conv)
    view.flush()
    view.verticalScrollBar().setValue(0)
    messages = [(rect, turn) for rect, kind, turn in view.markdown_layer.copy_buttons() if kind == "message"]
    assert len(messages) == 2, "the question and the answer"
    rect, turn = messages[1]
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center().toPoint())
    assert QGuiApplication.clipboard().text() == "".join(ANSWER), "the answer as typed, Markdown included"


def test_raw_text_can_be_shown_instead(view):
    view.set_conversation(conversation())
    view.flush()
    view.set_markdown(False)
    view.flush()
    block = block_starting(view, "Some **bold**")
    first = block.text().index("**")
    assert x_at(block, first + 2) > x_at(block, first), "the asterisks are shown as typed"
    assert view.markdown_layer.copy_buttons() == []
    view.set_markdown(True)
    view.flush()
    block = block_starting(view, "Some **bold**")
    assert x_at(block, first + 2) == x_at(block, first)


def yellow_in(pixels: np.ndarray, left: float, right: float, top: float, bottom: float) -> int:
    area = pixels[int(top) + 1 : int(bottom) - 1, int(left) + 1 : int(right) - 1]
    r, g, b = area[..., 0], area[..., 1], area[..., 2]
    return int(((r > b + 25) & (g > b + 15) & (r < 140)).sum())


def test_hidden_markers_brightness_goes_to_the_span_they_mark(view):
    conv = conversation(highlight_fraction=0.05)
    table = conv.table
    table.brightness[:] = 5000
    answer_rows = np.flatnonzero(table.chunk_id >= 0)
    texts = {}
    for chunk in conv.live_chunks():
        for offset, text in enumerate(conv.chunk_texts(chunk.id)):
            texts[chunk.start + offset] = text
    rows = [r for r in answer_rows if texts.get(int(table.position[r])) in (" **", "**")
            and conv.chunks[int(table.chunk_id[r])].role == "assistant"]
    assert len(rows) == 2
    table.brightness[rows] = 10_000  # only the bold markers are bright
    view.set_conversation(conv)
    view.verticalScrollBar().setValue(0)
    pixels = on_screen(view)
    block = block_starting(view, "Some **bold**")
    geo = view.blockBoundingGeometry(block).translated(view.contentOffset())
    line = block.layout().lineAt(0)
    top, bottom = geo.top() + line.y(), geo.top() + line.y() + line.height()
    bold = block.text().index("bold")
    after = block.text().index("text")
    assert yellow_in(pixels, geo.left() + x_at(block, bold), geo.left() + x_at(block, bold + 4), top, bottom) > 20, \
        "the bold word carries its markers' highlight"
    assert yellow_in(pixels, geo.left() + x_at(block, after), geo.left() + x_at(block, after + 4), top, bottom) < 5, \
        "the plain word after it is not lit (a glyph's tinted edge aside)"


@pytest.mark.parametrize("highlight", [False, True], ids=["tint", "highlight"])
def test_overlay_stays_on_rendered_markdown_while_it_streams_and_scrolls(view, highlight):
    conv = conversation(0.2 if highlight else 0.0)
    for _ in range(3):
        conv.add_turn("user", list(range(len(ANSWER))), ANSWER)
        conv.add_turn("assistant", list(range(len(ANSWER))), ANSWER)
    vary_brightness(conv, np.random.default_rng(4))
    view.set_conversation(conv)
    bar = view.verticalScrollBar()
    for value in (0, bar.maximum() // 2, bar.maximum()):
        bar.setValue(value)
        check(view, highlight, f"rendered, at scroll {value}/{bar.maximum()}")
    rng = np.random.default_rng(6)
    conv.begin_turn("assistant")
    long_words = [" streamed", " **words**", " of", " a", " long", " paragraph", " with", " `code`"] * 40
    for i, text in enumerate(ANSWER + ["\n\n"] + long_words + ["\n\n"] + ANSWER):
        conv.append_token(5, text)
        vary_brightness(conv, rng)
        view.append_streamed()
        if i % 4 == 0:
            view.flush()
            QApplication.processEvents()
        if i == 120:
            wheel(view, 2)
        if i == 200:
            wheel(view, -4)
        if i % 90 == 89:
            check(view, highlight, f"after streamed token {i}")
    conv.end_turn()
    view.rebuild()
    check(view, highlight, "after the answer ended")


def test_markdown_renders_as_it_streams(view):
    conv = conversation(answer=["Hi", "."])
    view.set_conversation(conv)
    conv.begin_turn("assistant")
    for text in ["Now", " **", "bold"]:
        conv.append_token(5, text)
    view.append_streamed()
    view.flush()
    block = view.document().lastBlock()
    star = block.text().index("**")
    assert x_at(block, star + 2) > x_at(block, star), "an unclosed ** is shown as typed"
    conv.append_token(5, "**")
    view.append_streamed()
    view.flush()
    block = view.document().lastBlock()
    assert x_at(block, star + 2) == x_at(block, star), "closed, it is rendered at once"
    assert format_at(block, star + 2).fontWeight() == QFont.Weight.Bold
    conv.end_turn()


def test_emphasis_across_the_cuts_of_a_long_streamed_paragraph(view):
    conv = conversation(answer=["Hi", "."])
    view.set_conversation(conv)
    conv.begin_turn("assistant")
    words = ["Start", " **", "bold"] + [" bold"] * 120 + ["**", " plain", " end"]
    for i, text in enumerate(words):
        conv.append_token(5, text)
        view.append_streamed()
        if i % 5 == 0:
            view.flush()
            QApplication.processEvents()
    view.flush()
    QApplication.processEvents()
    assert view.plan.soft_breaks, "the streaming paragraph was cut into blocks"
    start = block_starting(view, "Start **")
    star = start.text().index("**")
    assert x_at(start, star) == x_at(start, star + 2), "the opening ** is hidden once the closing one came"
    assert format_at(start, star + 3).fontWeight() == QFont.Weight.Bold, "the first part is bold too"
    conv.end_turn()


def test_the_view_menu_switches_to_raw_text_and_remembers_it(qtbot, tmp_path, monkeypatch):
    from halo_weave.ui.main_window import app_qsettings
    from halo_weave.ui.settings_io import load_settings

    from window_helpers import offline_window, write_conversation

    path = write_conversation(tmp_path, "Show me **bold**", ("assistant", "Here is **bold** text"))
    window = offline_window(qtbot, tmp_path, monkeypatch)
    window.controller.files.open_conversation(path)
    view = window.heatmap
    view.flush()
    block = block_starting(view, "Here is **bold**")
    star = block.text().index("**")
    assert x_at(block, star) == x_at(block, star + 2), "rendered by default"
    action = window.menus.markdown_action
    assert action.isChecked()
    action.trigger()
    view.flush()
    block = block_starting(view, "Here is **bold**")
    assert x_at(block, star + 2) > x_at(block, star), "View → Render Markdown off: as typed"
    assert load_settings(app_qsettings(tmp_path)).chat.render_markdown is False, "remembered for the next start"
    window.close()


def test_a_long_conversation_opens_rendered_where_it_is_read_and_then_everywhere(view, qtbot, monkeypatch):
    from halo_weave.ui import heatmap

    monkeypatch.setattr(heatmap, "DEFER_MARKDOWN_LINES", 40)  # "long" at a test's size
    conv = conversation(0.2)
    for _ in range(8):
        conv.add_turn("user", list(range(len(ANSWER))), ANSWER)
        conv.add_turn("assistant", list(range(len(ANSWER))), ANSWER)
    vary_brightness(conv, np.random.default_rng(8))
    view.set_conversation(conv)
    last = view.document().lastBlock()
    while not last.text().startswith("| 1 |"):
        last = last.previous()
    assert format_at(last, 0).fontFixedPitch(), "what is on screen is rendered at once"
    check(view, True, "at the end of a long conversation")
    heading = block_starting(view, "# Converting")

    def heading_rendered() -> bool:
        hash_mark = format_at(heading, 0)
        return hash_mark is not None and hash_mark.foreground().color().alpha() == 0  # hidden

    qtbot.waitUntil(heading_rendered, timeout=5000)
    view.verticalScrollBar().setValue(0)
    check(view, True, "at the top, rendered after opening")
    heading = block_starting(view, "# Converting")
    assert x_at(heading, 0) == x_at(heading, 2), "the # takes no room there either"


def test_markup_after_characters_outside_the_basic_plane_lands_on_the_right_letters(view):
    answer = ["🙂", " naïve", " 🙂", " **", "bold", "**", " and", " `", "x", "`", "."]
    view.set_conversation(conversation(answer=answer))
    view.flush()
    block = block_starting(view, "🙂 naïve")
    text = block.text()

    def at(word: str, after: int = 0) -> int:
        """Qt's position of ``word`` in the block: UTF-16 units, each 🙂 is two."""
        i = text.index(word) + after
        return len(text[:i].encode("utf-16-le")) // 2

    assert x_at(block, at("**")) == x_at(block, at("**") + 2)
    assert format_at(block, at("bold")).fontWeight() == QFont.Weight.Bold
    assert format_at(block, at("bold", 7)) is None, "'and' after the closing ** is plain"
    assert format_at(block, at("`x") + 1).fontFixedPitch()


def test_scrolling_up_while_an_answer_streams_shows_rendered_text(view, monkeypatch):
    from halo_weave.ui import heatmap

    monkeypatch.setattr(heatmap, "DEFER_MARKDOWN_LINES", 40)
    conv = conversation(0.0)
    for _ in range(8):
        conv.add_turn("user", list(range(len(ANSWER))), ANSWER)
        conv.add_turn("assistant", list(range(len(ANSWER))), ANSWER)
    view.set_conversation(conv)
    conv.begin_turn("assistant")
    for text in ["Streaming", " on", " and", " on"]:
        conv.append_token(5, text)
        view.append_streamed()  # the rest of the Markdown waits while tokens come
        view.flush()
    view.verticalScrollBar().setValue(0)
    check(view, False, "scrolled to the top while streaming")
    heading = block_starting(view, "# Converting")
    assert x_at(heading, 0) == x_at(heading, 2), "rendered as soon as it came into view"
    conv.end_turn()


TABLE = [
    "|", " Name", " |", " Qty", " |", "\n", "|---|---:|", "\n",
    "|", " apple", " |", " 3", " |", "\n",
    "|", " **", "kiwi", "**", " |", " 1200", " |", "\n",
    "|", "fig", "|", "12", "|", "\n\n",
    "Done", ".",
]


def pipe_xs(view: HeatmapView) -> list[list[float]]:
    """The x of every separating ``|`` of each table row, as laid out."""
    rows = []
    block = block_starting(view, "| Name")
    while block.isValid() and "|" in block.text():
        text = block.text()
        rows.append([x_at(block, i) for i, c in enumerate(text) if c == "|"])
        block = block.next()
    return rows


def assert_columns_line_up(rows: list[list[float]]) -> None:
    assert len(rows) == 5
    for row in rows[1:]:
        assert len(row) == len(rows[0])
        assert np.allclose(row, rows[0], atol=0.5), f"pipes at {row}, header's at {rows[0]}"


def test_table_columns_line_up_whatever_the_cells_lengths(view):
    view.set_conversation(conversation(answer=TABLE))
    view.flush()
    rows = pipe_xs(view)
    assert_columns_line_up(rows)
    kiwi = block_starting(view, "| **kiwi**")
    apple = block_starting(view, "| apple")
    three, number = apple.text().index("3"), kiwi.text().index("1200")
    assert x_at(apple, three + 1) == pytest.approx(x_at(kiwi, number + 4), abs=0.5), \
        "the right-aligned column ends its numbers at the same x"
    assert kiwi.text() == "| **kiwi** | 1200 |", "the text itself is unchanged"


def test_a_streamed_row_that_widens_a_column_realigns_the_rows_above(view):
    conv = conversation(answer=["Hi", "."])
    view.set_conversation(conv)
    conv.begin_turn("assistant")
    for i, text in enumerate(TABLE):
        conv.append_token(5, text)
        view.append_streamed()
        if i % 3 == 0:
            view.flush()
            QApplication.processEvents()
    for _ in range(3):
        view.flush()
        QApplication.processEvents()
    assert_columns_line_up(pipe_xs(view))
    conv.end_turn()


def test_highlight_of_a_token_in_a_table_cell_covers_its_letters(view):
    conv = conversation(highlight_fraction=0.05, answer=TABLE)
    table = conv.table
    table.brightness[:] = 5000
    texts = {}
    for chunk in conv.live_chunks():
        for offset, text in enumerate(conv.chunk_texts(chunk.id)):
            texts[chunk.start + offset] = text
    rows = [r for r in np.flatnonzero(table.chunk_id >= 0) if texts.get(int(table.position[r])) == " apple"]
    assert len(rows) == 1
    table.brightness[rows] = 10_000  # only "apple" is bright
    view.set_conversation(conv)
    view.verticalScrollBar().setValue(0)
    pixels = on_screen(view)
    block = block_starting(view, "| apple")
    geo = view.blockBoundingGeometry(block).translated(view.contentOffset())
    line = block.layout().lineAt(0)
    top, bottom = geo.top() + line.y(), geo.top() + line.y() + line.height()
    start = block.text().index("apple")
    left, right = geo.left() + x_at(block, start), geo.left() + x_at(block, start + 5)
    width = int(right - left) - 2
    area = pixels[int(top) + 1 : int(bottom) - 1, int(left) + 1 : int(right) - 1]
    r, g, b = area[..., 0], area[..., 1], area[..., 2]
    lit = ((r > b + 25) & (g > b + 15) & (r < 140)).any(axis=0)
    assert lit.sum() >= 0.8 * width, "the highlight spans the word's letters"
    three = block.text().index("3")
    assert yellow_in(pixels, geo.left() + x_at(block, three), geo.left() + x_at(block, three + 1), top, bottom) < 5, \
        "the number in the next cell is not lit"

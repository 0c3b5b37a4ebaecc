"""What a message recalled, as the window says it: the line under the message, a click
that shows the chunk, the violet mark, the budget counted apart from the recall, and all
of it again after reopening the file.  The real window, server, model, embedder and SQLite.
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from halo_weave.core import recall
from halo_weave.ui.heatmap_recall import recall_marks
from halo_weave.ui.recall_line import ALL_BACK, MORE, NBSP, count_words, first_words

from server_steps import CAT, prune_the_cat
from test_app import make_app  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow

QUESTION = "What is the name of my cat? Mochi?"
AGAIN = "Remind me, what is my cat called? Mochi?"
ORANGE = "#e6b450"


def _line_under(view, conv, turn_id: int) -> str:
    """The line the heatmap shows under the message ``turn_id``: the text after the
    message's own words, up to the next label."""
    text = view.toPlainText()
    words = "".join(conv.chunk_text(c.id) for c in conv.content_chunks(turn_id)).strip()
    after = text[text.rindex(words) + len(words):].lstrip("\n")
    return after.split("\n\n")[0].replace("\n", " ").replace(NBSP, " ").strip()


def _click_link(app, turn_id: int, chunk_id: int) -> None:
    """Click the chunk's link on the message's line (its "+ N more" first, if it hides it)."""
    view, qtbot = app.window.heatmap, app.qtbot
    view.follower.jump_to_latest()
    view.flush()
    qtbot.wait(30)
    link_rect = view.finder.recall_link_rect
    if link_rect(turn_id, chunk_id) is None and link_rect(turn_id, MORE) is not None:
        qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=link_rect(turn_id, MORE).center())
        view.follower.jump_to_latest()
        view.flush()
        qtbot.wait(30)
    rect = view.finder.recall_link_rect(turn_id, chunk_id)
    assert rect is not None, "the chunk's link is on screen"
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    view.flush()
    qtbot.wait(30)


def test_a_message_says_what_it_recalled_and_a_click_shows_each(make_app, qtbot):
    app = make_app(max_new_tokens=10, max_context_tokens=150, min_chunk_tokens=16).start()
    c, window = app.controller, app.window
    view, bar = window.heatmap, window.stats_bar
    assert app.say(CAT) in ("stop", "length")
    cat = prune_the_cat(app)[0]
    app.settle()

    # A limit the question's recall goes far beyond: the counter says what is recalled,
    # beside the limit, and no orange while the answer is written.
    limit = c.conv.live_token_count()  # whatever the question recalls goes beyond it
    window.apply_settings(c.settings.replace(max_context_tokens=limit))
    seen = []
    view.streamed_frame.connect(lambda: seen.append((c.conv.live_token_count(), recall.recalled_tokens(c.conv),
                                                   bar.budget_label.text(), bar.recalled_label.text(),
                                                   bar.recalled_label.isVisible(), bar.budget_label.styleSheet())))
    assert app.say(QUESTION) in ("stop", "length")
    over = [s for s in seen if s[1] and s[0] > limit]
    assert over, "the recall took the live context over the limit while the model answered"
    live, recalled, budget, recalled_text, shown, style = over[-1]
    assert budget == f"Live {live - recalled:,} / {limit:,}" and recalled_text == f"+ {recalled:,} recalled" and shown
    assert ORANGE not in style
    first = c.conv.turns.last("user")
    first_recalled = c.conv.recalls.of(first)
    assert first_recalled[0] == cat.id, "the question recalled the cat, and ranks it first"
    if cat.live:  # the prune after the answer may have left it: the user prunes it by hand
        with qtbot.wait_signal(c.signals.conversation_changed, timeout=10_000):
            c.levers.prune_chunk(cat.id)
    view.flush()
    line = _line_under(view, c.conv, first)
    cat_words = f"“{first_words(c.conv.chunk_text(cat.id))}”"
    assert f"{cat_words} (back in the graveyard)" in line or (
        line == f"Recalled for this message: 1 chunk{ALL_BACK}: {cat_words}"), line

    # A roomy limit: what the next question recalls stays live after its answer.
    window.apply_settings(c.settings.replace(max_context_tokens=4000))
    assert app.say(AGAIN) in ("stop", "length")
    conv = c.conv
    question = conv.turns.last("user")
    recalled_ids = conv.recalls.of(question)
    assert cat.id in recalled_ids and cat.live and cat.recalled_for == question
    line = _line_under(view, conv, question)
    assert line.startswith(f"Recalled for this message: {count_words(len(recalled_ids))}: "), line
    assert f"“{first_words(conv.chunk_text(recalled_ids[0]))}”" in line
    # The earlier question's line is still there, the cat live again.
    earlier = _line_under(view, conv, first)
    assert earlier.startswith(f"Recalled for this message: {count_words(len(first_recalled))}")
    assert f"“{first_words(conv.chunk_text(cat.id))}” (back in the graveyard)" not in earlier
    # The counter: the recall beside the limit, the rest within it.
    app.window.refresh_stats()
    recalled_tokens = recall.recalled_tokens(conv)
    marked = sum(conv.chunks[i].token_count for i in recalled_ids if conv.chunks[i].live)
    assert marked <= recalled_tokens
    assert bar.recalled_label.isVisible() and bar.recalled_label.text() == f"+ {recalled_tokens:,} recalled"
    assert bar.budget_label.text() == f"Live {conv.live_token_count() - recalled_tokens:,} / 4,000"
    assert ORANGE not in bar.budget_label.styleSheet()
    # The heatmap marks the recalled chunk; its tooltip says why.
    assert "recalled for your message" in view.tips.for_chunk(cat.id)

    # A click on its first words shows the chunk, outlined.
    _click_link(app, question, cat.id)
    assert view.finder.flashed_chunk == cat.id and view.chunk_rect(cat.id) is not None, "the cat's chunk is on screen"
    marks = recall_marks(view, view.canvas.frame())
    assert any(chunk == cat.id for chunk, _, _ in marks), "a violet bar beside it"

    # Reopened, the file says the same.
    path = c.files.path
    app.close()
    again = make_app(max_new_tokens=10, max_context_tokens=4000, min_chunk_tokens=16).start(path)
    conv2, view2 = again.conv, again.window.heatmap
    again.window.heatmap.flush()
    assert conv2.recalls.of(question) == recalled_ids
    assert _line_under(view2, conv2, question) == line
    assert conv2.chunks[cat.id].recalled_for == question
    assert again.window.stats_bar.recalled_label.text() == f"+ {recall.recalled_tokens(conv2):,} recalled"

    # Pruned by hand, it is no longer marked, the line says so, and its link opens the graveyard.
    with qtbot.wait_signal(again.controller.signals.conversation_changed, timeout=10_000):
        again.controller.levers.prune_chunk(cat.id)
    assert conv2.chunks[cat.id].recalled_for is None
    view2.flush()
    assert "back in the graveyard" in _line_under(view2, conv2, question)
    again.window.set_graveyard_visible(False)
    _click_link(again, question, cat.id)
    graveyard = again.window.graveyard
    assert graveyard.isVisible()
    assert graveyard.list_view().currentIndex().data(graveyard.model().ChunkIdRole) == cat.id
    again.close()


def _file_with_a_long_recall(data_dir) -> tuple[object, int, list[int]]:
    """A conversation file whose last question recalled ten paragraphs, the first of them
    pruned again since: (path, the question's turn id, the recalled chunk ids)."""
    from halo_weave.session import ChatSession
    from halo_weave.settings import Settings
    from halo_weave.store import ConversationStore, new_conversation_path

    def pieces(text):
        words = [(" " if i else "") + w for i, w in enumerate(text.split(" "))]
        return list(range(100, 100 + len(words))), words

    path = new_conversation_path(data_dir)
    session = ChatSession(Settings.of(min_chunk_tokens=4, max_context_tokens=0))
    session.open(ConversationStore.open(path))
    conv = session.conv
    for i in range(12):
        session.add_user_message(*pieces(f"Fact number {i}: the {i}th box holds {i} red marbles today."))
        session.begin_answer()
        conv.append_token(300, "Noted.")
        session.finish_turn("stop", prune=False)
    session.prune(limit=10)
    facts = [c for c in conv.graveyard() if c.role == "user"][::-1][:10]
    back = conv.resurrect([c.id for c in facts], with_anchors=False)
    session.store.save_chunks(conv, back)
    question = session.add_user_message(*pieces("How many marbles are in the boxes?"), recalled=back)
    session.levers.prune(facts[0].id)
    session.store.close()
    return path, question.turn_id, [c.id for c in facts]


def test_a_long_recall_lists_six_then_the_rest_on_a_click_and_a_pruned_one_opens_the_graveyard(
        offline_window, qtbot, tmp_path):
    path, question, ids = _file_with_a_long_recall(tmp_path)
    window, view = offline_window, offline_window.heatmap
    window.controller.files.open_conversation(path)
    view.flush()
    conv = window.controller.conv
    assert conv.recalls.of(question) == tuple(ids)
    line = _line_under(view, conv, question)
    assert line.startswith(f"Recalled for this message: 10 chunks: “{first_words(conv.chunk_text(ids[0]))}” "
                           "(back in the graveyard) · “Fact number 1: the 1th box…” · ")
    assert line.endswith(" · + 4 more") and line.count("“") == 6
    # "+ 4 more": the whole list.
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton,
                     pos=view.finder.recall_link_rect(question, MORE).center())
    view.flush()
    line = _line_under(view, conv, question)
    assert line.count("“") == 10 and "more" not in line
    # The pruned one: its row in the graveyard.
    window.set_graveyard_visible(False)
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton,
                     pos=view.finder.recall_link_rect(question, ids[0]).center())
    assert window.graveyard.isVisible()
    graveyard = window.graveyard
    assert graveyard.list_view().currentIndex().data(graveyard.model().ChunkIdRole) == ids[0]
    # A live one: shown and outlined, marked in the gutter, the counter says what came back.
    view.follower.jump_to_latest()
    view.flush()
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton,
                     pos=view.finder.recall_link_rect(question, ids[5]).center())
    assert view.finder.flashed_chunk == ids[5] and view.chunk_rect(ids[5]) is not None
    assert not view.follower.following
    window.refresh_stats()
    bar = window.stats_bar
    assert bar.recalled_label.text() == f"+ {recall.recalled_tokens(conv):,} recalled" and recall.recalled_tokens(conv) > 0
    # All of them pruned: the line says it once, and the counter has nothing recalled to add.
    for chunk_id in ids:
        if conv.chunks[chunk_id].live:
            window.controller.levers.prune_chunk(chunk_id)
    view.flush()
    line = _line_under(view, conv, question)
    assert line.startswith(f"Recalled for this message: 10 chunks{ALL_BACK}: “")
    assert "(back in the graveyard)" not in line
    window.refresh_stats()
    assert bar.recalled_label.isHidden() and recall.recalled_tokens(conv) == 0

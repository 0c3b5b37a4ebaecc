"""Chatting as in the apps people already use, against the real window, server and model:
the speed shows while the answer streams, and the view follows the answer."""

from __future__ import annotations

import re

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCursor

from halo_weave.ui.graveyard import chunk_preview
from test_app import TURN_TIMEOUT_MS, make_app  # noqa: F401 - the fixture
from halo_weave.core import pruning
from halo_weave.core import recall

pytestmark = pytest.mark.slow

#: The stats bar's colour for a context over its limit.
ORANGE = "#e6b450"

LONG_TOPIC = "Tell me a long story about a lighthouse keeper and the sea, in many paragraphs."


def test_speed_and_first_token_show_while_the_answer_streams(make_app, qtbot):
    app = make_app(max_new_tokens=24).start()
    seen: list[str] = []
    app.controller.signals.tokens_streamed.connect(lambda: seen.append(app.window.stats_bar.speed_label.text()))
    app.window.input.setPlainText("Count from one to twenty in words.")
    with qtbot.wait_signal(app.controller.signals.turn_finished, timeout=TURN_TIMEOUT_MS):
        qtbot.keyClick(app.window.input, Qt.Key.Key_Return)
        # Read the label while the answer is still streaming, not after it ended.
        qtbot.waitUntil(lambda: any(re.search(r"\d+\.\d tok/s", s) for s in seen), timeout=TURN_TIMEOUT_MS)
        assert app.controller.turn.generating
    live = [s for s in seen if re.search(r"\d+\.\d tok/s", s)]
    assert live and "first token" in live[0] and re.search(r"first token \d+\.\d s", live[0])
    final = app.window.stats_bar.speed_label.text()
    assert re.search(r"\d+\.\d tok/s", final) and "first token" in final


def test_window_follows_a_long_answer_and_respects_a_reader(make_app, qtbot):
    app = make_app(max_new_tokens=40, max_context_tokens=0).start()
    app.window.resize(900, 520)
    for _ in range(4):
        app.say(LONG_TOPIC)
    heatmap = app.window.heatmap
    bar = heatmap.verticalScrollBar()
    assert bar.maximum() > 0, "the conversation is longer than the window"
    assert bar.value() == bar.maximum(), "the newest answer is in view after each exchange"
    # Now the user scrolls up to read while the next answer streams.
    app.window.input.setPlainText(LONG_TOPIC)
    with qtbot.wait_signal(app.controller.signals.turn_finished, timeout=TURN_TIMEOUT_MS):
        qtbot.keyClick(app.window.input, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: app.controller.turn.generating, timeout=TURN_TIMEOUT_MS)
        bar.triggerAction(bar.SliderAction.SliderToMinimum)
        assert heatmap.follower.button.isVisible()
    qtbot.waitUntil(lambda: not app.controller.gate.busy, timeout=10_000)
    assert bar.value() == 0, "the reader was not moved"
    qtbot.mouseClick(heatmap.follower.button, Qt.MouseButton.LeftButton)
    assert bar.value() == bar.maximum()


def _answer(conv, turn_id) -> str:
    return "".join(conv.chunk_text(c.id) for c in conv.content_chunks(turn_id))


def _last(conv, role):
    return max(t for t, turn in conv.turns.items() if turn.role == role)


def _press(app, qtbot, widget) -> str:
    """Click a button of the answer bar and wait for the answer; returns the finish reason."""
    with qtbot.wait_signal(app.controller.signals.turn_finished, timeout=TURN_TIMEOUT_MS) as blocker:
        qtbot.mouseClick(widget, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not app.controller.gate.busy, timeout=10_000)
    return blocker.args[0]


def test_continue_extends_a_cut_answer_in_the_same_turn(make_app, qtbot):
    app = make_app(max_new_tokens=10).start()
    assert app.say("Write a long story about a lighthouse keeper.") == "length"
    assert "Continue" in app.window.messages.history[-1].text, "the cut answer points at Continue"
    conv = app.conv
    answer_id = _last(conv, "assistant")
    before = _answer(conv, answer_id)
    turns = len(conv.turns)
    assert app.window.answer_bar.continue_button.isEnabled()
    _press(app, qtbot, app.window.answer_bar.continue_button)
    after = _answer(conv, answer_id)
    assert len(conv.turns) == turns and _last(conv, "assistant") == answer_id, "same turn"
    assert after.startswith(before) and len(after) > len(before)
    assert after.strip()[-15:] in app.window.heatmap.toPlainText().replace("\u2029", "\n")
    app.close()
    # The file holds the longer answer, closed with its framing, like any answer.
    from halo_weave.store import ConversationStore
    with ConversationStore.open(app.controller.files.path or conv_path(app), create=False) as store:
        saved = store.load(app.controller.settings)
        assert _answer(saved, answer_id) == after and saved.turns[answer_id].complete


def test_after_a_continue_the_context_is_back_under_its_limit(make_app, qtbot):
    app = make_app(max_new_tokens=24, max_context_tokens=130).start()
    controller, bar = app.controller, app.window.stats_bar
    for question in ("Tell me about the sea.", "Tell me about the moon.", "Tell me a long story about a dragon."):
        app.say(question)
    pruned = len(app.conv.graveyard())
    assert _press(app, qtbot, app.window.answer_bar.continue_button) in ("stop", "length")
    assert controller.session.answer.streamed > 0, "the answer went on"
    live = app.conv.live_token_count() - recall.recalled_tokens(app.conv)
    assert live <= 130 or live <= pruning.kept_tokens(app.conv), f"{live} live after the Continue"
    assert len(app.conv.graveyard()) >= pruned
    assert bar.budget_label.text() == f"Live {live:,} / 130"
    assert ORANGE not in bar.budget_label.styleSheet()


def conv_path(app):
    from halo_weave.store import list_conversations
    return list_conversations(app.controller.data_dir)[0].path


def test_regenerate_keeps_versions_to_flip_through(make_app, qtbot):
    app = make_app(max_new_tokens=12, temperature=1.0, sampler_seed=-1).start()
    app.say("Suggest a name for a cat.")
    conv = app.conv
    first = _answer(conv, _last(conv, "assistant"))
    question = _last(conv, "user")
    window = app.window
    assert not window.answer_bar.version_label.isVisible()
    _press(app, qtbot, window.answer_bar.regenerate_button)
    assert _last(conv, "user") == question, "the same question, answered again"
    assert len([t for t in conv.turns.values() if t.role == "assistant"]) == 1
    second = _answer(conv, _last(conv, "assistant"))
    assert window.answer_bar.version_label.isVisible() and window.answer_bar.version_label.text() == "2 / 2"
    assert first not in "".join(chunk_preview(conv, c) for c in conv.graveyard()), "versions stay out of the graveyard"
    qtbot.mouseClick(window.answer_bar.previous_version_button, Qt.MouseButton.LeftButton)
    assert _answer(conv, _last(conv, "assistant")) == first
    assert window.answer_bar.version_label.text() == "1 / 2"
    assert first.strip()[:15] in window.heatmap.toPlainText()
    qtbot.mouseClick(window.answer_bar.next_version_button, Qt.MouseButton.LeftButton)
    assert _answer(conv, _last(conv, "assistant")) == second and window.answer_bar.version_label.text() == "2 / 2"


def test_edit_last_message_and_resend(make_app, qtbot):
    app = make_app(max_new_tokens=8).start()
    app.say("What colour is the sky?")
    window, conv = app.window, app.conv
    qtbot.mouseClick(window.answer_bar.edit_button, Qt.MouseButton.LeftButton)
    assert window.input.toPlainText() == "What colour is the sky?"
    assert "Editing" in window.reason.text()
    window.input.setPlainText("What colour is grass?")
    with qtbot.wait_signal(app.controller.signals.turn_finished, timeout=TURN_TIMEOUT_MS):
        qtbot.keyClick(window.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not app.controller.gate.busy, timeout=10_000)
    users = [t for t in conv.turns.values() if t.role == "user"]
    assert len(users) == 1 and _answer(conv, users[0].turn_id) == "What colour is grass?"
    text = window.heatmap.toPlainText()
    assert "What colour is grass?" in text and "What colour is the sky?" not in text
    assert window.answer_bar.version_label.text() == "2 / 2", "the answer to the old wording stays reachable"
    assert "Editing" not in window.reason.text()


def test_import_a_sillytavern_chat_opens_and_indexes_it(make_app, qtbot):
    from pathlib import Path

    app = make_app().start()
    source = Path(__file__).parents[1] / "data" / "foreign" / "sillytavern_current.jsonl"
    with qtbot.wait_signal(app.controller.signals.conversation_opened, timeout=TURN_TIMEOUT_MS):
        app.controller.files.import_json(source)
    app.settle()
    text = app.window.heatmap.toPlainText()
    assert "Welcome to the glade" in text and "stay until morning" in text
    assert app.window.conversation_list.titles()[0] == "Seraphina (SillyTavern)"
    # The character and the user speak under their own names, not "Assistant" and "User".
    assert "Seraphina\n" in text and "Sam · " in text
    assert "Assistant\n" not in text and "User · " not in text
    entries = app.controller.session.store.conn.execute(
        "SELECT COUNT(*) FROM semantic_entries WHERE embedding IS NOT NULL").fetchone()[0]
    assert entries >= 4, "every message is in the memory index"


def test_words_typed_while_the_server_reads_an_older_draft_are_read_at_once(make_app, qtbot):
    """A long paste is being read ahead when the user types on: the newer draft is sent
    while the server still reads the older one, which stops for it (a recall the newer
    words change would otherwise make the new words wait for the whole older read), and
    Enter still finds the message read."""
    app = make_app(max_new_tokens=4).start()
    app.say("Hello! Name three colours.")
    c = app.controller
    pasted = " ".join(f"Row {n}: the tide at {n % 12} o'clock was {n % 7} feet." for n in range(150))
    app.window.input.setPlainText(pasted + " ")  # a paste: read ahead at once, seconds of prompt
    qtbot.waitUntil(lambda: c.ahead.read_ahead_text == pasted, timeout=30_000)
    message = pasted + " Which row had the highest tide?"
    app.window.input.moveCursor(QTextCursor.MoveOperation.End)
    qtbot.keyClicks(app.window.input, "Which row had the highest tide?")
    qtbot.waitUntil(lambda: c.ahead.read_ahead_text == message and not c.ahead.reading_ahead, timeout=120_000)
    assert c.ahead.replaced >= 1  # an older draft's read-ahead gave way to a newer one
    with qtbot.wait_signal(c.signals.turn_finished, timeout=TURN_TIMEOUT_MS):
        qtbot.keyClick(app.window.input, Qt.Key.Key_Return)
    kv = c.turn.last_done.raw["kv"]
    assert kv["appended"] <= 10 and kv["rerun"] == 0, kv  # the message was in the cache already


def test_what_is_typed_is_read_ahead_so_enter_runs_only_the_end_of_the_prompt(make_app, qtbot):
    """The app sends the prompt of the message being typed to the server before Enter:
    the answer then waits only for what the read-ahead could not know (the closing
    framing and the answer's opening), not for the whole message at the whole context."""
    app = make_app(max_new_tokens=4).start()
    app.say("Hello! Name three colours.")
    c = app.controller
    message = ("My lighthouse logbook lists every ship that passed at dawn and at dusk, with the "
               "weather and the colour of the sea. Which ship should I expect first tomorrow?")
    qtbot.keyClicks(app.window.input, message)  # key by key, as a user types
    # After each finished word, and once the user pauses, the whole message.
    qtbot.waitUntil(lambda: c.ahead.read_ahead_text == message and not c.ahead.reading_ahead, timeout=60_000)
    assert c.ahead.read_aheads >= 1
    with qtbot.wait_signal(c.signals.turn_finished, timeout=TURN_TIMEOUT_MS):
        qtbot.keyClick(app.window.input, Qt.Key.Key_Return)
    kv = c.turn.last_done.raw["kv"]  # the server's account of the answer's prompt
    assert len(c.session.server.tokenize(message)) > 30
    assert kv["appended"] <= 10 and kv["rerun"] == 0, kv  # the message itself was in the cache already

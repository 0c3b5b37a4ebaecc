"""Coming back to a conversation, against the real window, server, model and embedder:
the server has its context before the first message (read back from the cache it saved,
or prefilled while the user reads), a message sent meanwhile waits for that instead of
making the server read the context twice, the message shows at once with a quiet line
saying what the turn waits for, and Stop works in every phase."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from conftest import TEST_CACHE_DIR
from halo_weave.server.kv_files import file_name
from halo_weave.storage.transfer_document import CACHE_KEY_META
from test_app import LONG_MESSAGE, TURN_TIMEOUT_MS, make_app  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow

OTHER = "Name three rivers in Europe."


def saved_cache(app):
    return TEST_CACHE_DIR / "kv-states" / file_name(app.controller.session.store.get_meta(CACHE_KEY_META))


def chat_then_switch_away(app, qtbot, messages):
    """Chat in a conversation, then in a new one (the server's cache then holds that one);
    returns the first conversation's path and its live context length."""
    c = app.controller
    for text in messages:
        app.say(text)
    first, context = c.files.path, len(c.conv.live_input_ids())
    cache = saved_cache(app)
    c.files.new_conversation()
    qtbot.waitUntil(lambda: not c.gate.input_block_reason(), timeout=30_000)  # its system prompt is set
    app.say(OTHER)
    qtbot.waitUntil(cache.exists, timeout=60_000)  # saved when the other conversation opened
    return first, context, cache


def test_a_reopened_conversation_is_read_back_so_its_first_answer_reads_only_the_message(make_app, qtbot):
    app = make_app(max_new_tokens=8).start()
    c = app.controller
    first, context, _cache = chat_then_switch_away(app, qtbot, [LONG_MESSAGE, "And which tea is the strongest?"])

    assert c.files.open_conversation(first)  # from the list
    qtbot.waitUntil(lambda: c.ahead.last_warm_up is not None and not c.ahead.warming_up, timeout=TURN_TIMEOUT_MS)
    # All but the answer's closing framing (the server held the answer's last token unread).
    assert c.ahead.last_warm_up["restored"] >= context - 4 and c.ahead.last_warm_up["ran"] <= 4, c.ahead.last_warm_up
    app.say("Thanks!")
    kv = c.turn.last_done.raw["kv"]
    # Only the message and its framing were new to the server: not the conversation again.
    assert kv["rerun"] == 0 and kv["reused"] >= context, kv
    assert kv["appended"] < 20, kv


def test_a_message_sent_while_the_server_reads_the_conversation_waits_for_it(make_app, qtbot):
    app = make_app(max_new_tokens=4).start()
    c = app.controller
    first, context, cache = chat_then_switch_away(app, qtbot, ["\n\n".join([LONG_MESSAGE] * 8)])
    cache.unlink()  # nothing saved: reopening it makes the server prefill it (seconds)

    assert c.files.open_conversation(first)
    qtbot.waitUntil(lambda: c.ahead.warming_up > 0, timeout=30_000)
    app.window.input.setPlainText("Summarise that in one line.")
    phases = []
    c.signals.turn_phase.connect(lambda message, line: phases.append(line))
    with qtbot.wait_signal(c.signals.turn_finished, timeout=TURN_TIMEOUT_MS) as finished:
        qtbot.keyClick(app.window.input, Qt.Key.Key_Return)
        assert app.window.stop_button.isEnabled()  # Stop works before the answer starts too
    assert finished.args[0] in ("stop", "length")
    warm = c.ahead.last_warm_up
    assert warm["restored"] == 0 and warm["ran"] + warm["reused"] == context  # the warm-up read it ...
    kv = c.turn.last_done.raw["kv"]
    assert kv["rerun"] == 0 and kv["reused"] >= context and kv["appended"] < 20, kv  # ... once
    assert f"reading {context:,} tokens…" in phases, phases


def test_enter_shows_the_message_at_once_and_stop_before_the_answer_gives_it_back(make_app, qtbot):
    app = make_app(max_new_tokens=8).start()
    c, window = app.controller, app.window
    app.say("Hello! Name three colours.")
    turns = len(c.conv.turns)
    message = "Now name three animals that live in the sea."
    window.input.setPlainText(message)
    qtbot.keyClick(window.input, Qt.Key.Key_Return)
    # At once, before the server has even tokenized it.
    assert window.pending_turn.isVisible() and message in window.pending_turn.message.text()
    assert window.stop_button.isEnabled()
    with qtbot.wait_signal(c.signals.turn_finished, timeout=30_000) as finished:
        qtbot.keyClick(window.input, Qt.Key.Key_Escape)
    assert finished.args == ["aborted"]
    qtbot.waitUntil(lambda: not c.gate.busy, timeout=10_000)
    assert window.input.toPlainText() == message  # back in the box, to send again
    assert len(c.conv.turns) == turns  # nothing saved, nothing answered
    assert not window.pending_turn.isVisible()
    assert app.say(message) in ("stop", "length")


def test_stop_while_the_server_reads_the_conversation_keeps_the_message_unanswered(make_app, qtbot):
    app = make_app(max_new_tokens=4).start()
    c = app.controller
    first, _context, cache = chat_then_switch_away(app, qtbot, ["\n\n".join([LONG_MESSAGE] * 8)])
    cache.unlink()
    assert c.files.open_conversation(first)
    qtbot.waitUntil(lambda: c.ahead.warming_up > 0, timeout=30_000)
    turns = len(c.conv.turns)
    app.window.input.setPlainText("Summarise that in one line.")
    qtbot.keyClick(app.window.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(c.conv.turns) == turns + 1, timeout=30_000)  # saved, shown, waiting
    assert c.ahead.warming_up and app.window.stop_button.isEnabled()
    with qtbot.wait_signal(c.signals.turn_finished, timeout=10_000) as finished:
        qtbot.keyClick(app.window.input, Qt.Key.Key_Escape)
    assert finished.args == ["aborted"] and not c.gate.busy
    assert c.conv.turns[max(c.conv.turns)].role == "user"  # kept, without an answer
    qtbot.waitUntil(lambda: not c.ahead.warming_up, timeout=TURN_TIMEOUT_MS)


def test_the_memory_loads_right_after_the_window_paints(make_app, qtbot):
    app = make_app().start()
    c = app.controller
    # No message sent: the embedder and the index load on their thread by themselves.
    qtbot.waitUntil(lambda: c.session.recall.index is not None and c.session.recall.index.embedder.loaded, timeout=120_000)
    assert not c.gate.busy


def test_at_start_the_last_conversation_is_read_back(make_app, qtbot, server):
    from halo_weave.kobold_client import KoboldClient

    app = make_app(max_new_tokens=8).start()
    app.say(LONG_MESSAGE)
    context, cache = len(app.conv.live_input_ids()), saved_cache(app)
    app.close()  # the server saves its cache before another conversation's replaces it
    with KoboldClient(server.url) as other:  # another client's chat takes the server's cache
        other.model_info()
        other.conversation = "another-client"
        other.prepare([i for i, _ in other.tokenize("<|im_start|>user\n" + OTHER * 20)])

    again = make_app(max_new_tokens=8).start()  # the app started again: the last conversation opens
    c = again.controller
    qtbot.waitUntil(lambda: c.ahead.last_warm_up is not None and not c.ahead.warming_up, timeout=TURN_TIMEOUT_MS)
    assert c.ahead.last_warm_up["restored"] >= context - 4, c.ahead.last_warm_up
    again.say("Thanks!")
    kv = c.turn.last_done.raw["kv"]
    assert kv["rerun"] == 0 and kv["reused"] >= context and kv["appended"] < 20, kv


def test_opening_another_conversation_stops_reading_the_one_left(make_app, qtbot):
    app = make_app(max_new_tokens=4).start()
    c = app.controller
    first, context, cache = chat_then_switch_away(app, qtbot, ["\n\n".join([LONG_MESSAGE] * 8)])
    second = c.files.path
    cache.unlink()  # reopening the first makes the server prefill it
    answers = []
    c.signals.warm_up_changed.connect(lambda tokens: answers.append(c.ahead.last_warm_up) if tokens == 0 else None)
    assert c.files.open_conversation(first)
    qtbot.waitUntil(lambda: c.ahead.warming_up > 0, timeout=30_000)
    assert c.files.open_conversation(second)  # the user clicks on, before the server has read the first
    qtbot.waitUntil(lambda: len(answers) == 2, timeout=TURN_TIMEOUT_MS)
    left, opened = answers
    assert left["stopped"] is True and left["ran"] < context, left
    assert opened["stopped"] is False

"""The app as a user meets it: the real window, the real server and model, the real store
(in ``tmp_path`` through ``HALO_WEAVE_HOME``) and the real embedder.

Answers are kept short (``max_new_tokens`` 12-20) so each turn takes a second or two on
two CPU cores.
"""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPoint, Qt

from halo_weave.app import TurnController
from halo_weave.settings import MAX_BRIGHTNESS, Settings
from halo_weave.store import ConversationStore
from halo_weave.ui.main_window import MainWindow, app_qsettings
from halo_weave.ui.settings_io import load_settings

pytestmark = pytest.mark.slow

TURN_TIMEOUT_MS = 120_000
SHORT_SYSTEM_PROMPT = "You are a helpful assistant."
CONNECT_TIMEOUT_MS = 60_000

LONG_MESSAGE = (
    "Tell me about the history of tea. Tea was first drunk in China, as a medicine and "
    "later as a daily drink, and it travelled along trade routes to Japan, India and "
    "Europe. Describe how it is grown, picked, dried and brewed, and why people love it.\n\n"
    "Also explain the difference between green tea, black tea and oolong tea, and what "
    "happens to the leaves during oxidation, rolling and firing in each style.\n\n"
    "Finally, suggest a simple way to brew a good cup at home with ordinary kitchen tools."
)


class App:
    """One window + controller on a data dir, with helpers that wait like a user."""

    def __init__(self, qtbot, data_dir, settings: Settings) -> None:
        self.qtbot = qtbot
        self.qsettings = app_qsettings(data_dir)
        self.controller = TurnController(settings, data_dir, autostart=False)
        self.window = MainWindow(self.controller, self.qsettings)
        qtbot.addWidget(self.window)
        self.window.show()

    @property
    def conv(self):
        return self.controller.conv

    def start(self, conversation=None) -> "App":
        self.controller.start(conversation)
        self.qtbot.waitUntil(lambda: self.controller.link.state == "connected", timeout=CONNECT_TIMEOUT_MS)
        self.qtbot.waitUntil(lambda: not self.controller.gate.input_block_reason(), timeout=CONNECT_TIMEOUT_MS)
        return self

    def say(self, text: str) -> str:
        """Type a message, press Enter, wait for the answer; returns the finish reason."""
        self.window.input.setPlainText(text)
        with self.qtbot.wait_signal(self.controller.signals.turn_finished, timeout=TURN_TIMEOUT_MS) as blocker:
            self.qtbot.keyClick(self.window.input, Qt.Key.Key_Return)
        self.qtbot.waitUntil(lambda: not self.controller.gate.busy, timeout=10_000)
        return blocker.args[0]

    def settle(self) -> None:
        """Wait for background indexing (so the database equals the UI)."""
        self.qtbot.waitUntil(lambda: self.controller.memory.pending == 0, timeout=TURN_TIMEOUT_MS)
        self.qtbot.wait(50)

    def close(self) -> None:
        self.settle()
        self.window.close()


@pytest.fixture
def make_app(qtbot, tmp_path, monkeypatch, server):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    apps: list[App] = []

    def make(**overrides) -> App:
        # A short system prompt: keeps the small max-context budgets these tests prune to
        # about the conversation (SHORT_SYSTEM_PROMPT says what it is).
        values = dict(server_url=server.url, max_new_tokens=12, autostart_server=False, temperature=0.0,
                      system_prompt=SHORT_SYSTEM_PROMPT)
        values.update(overrides)
        app = App(qtbot, tmp_path, Settings.of(**values))
        apps.append(app)
        return app

    yield make
    for app in apps:
        if not app.controller.gate.closing:
            app.window.close()


def _assistant_text(conv, turn_id: int) -> str:
    return "".join(conv.chunk_text(c.id) for c in conv.content_chunks(turn_id))


def test_send_streams_tokens_with_brightness_colours(make_app, qtbot):
    app = make_app(max_new_tokens=16).start()
    streamed = []
    app.controller.signals.tokens_streamed.connect(lambda: streamed.append(app.conv.live_token_count()))
    assert app.say("Hello! Name three colours.") in ("stop", "length")

    conv = app.conv
    user, answer = sorted(conv.turns)[-2:]
    assert conv.turns[user].role == "user" and conv.turns[answer].role == "assistant"
    text = _assistant_text(conv, answer)
    assert text.strip()
    assert len(streamed) >= 2 and streamed == sorted(streamed), "tokens arrive one by one"
    assert text.strip()[:20] in app.window.heatmap.toPlainText()
    # Attention moved brightness: the question's tokens no longer all sit at 10000.
    rows = conv.table.turn_id == user
    assert (conv.table.brightness[rows] != MAX_BRIGHTNESS).any()
    assert app.controller.session.attention_available
    # The heatmap paints colour: its pixels are not just background + white text.
    image = app.window.heatmap.viewport().grab().toImage()
    colours = {image.pixelColor(x, y).name() for x in range(0, image.width(), 3) for y in range(0, image.height(), 3)}
    assert len(colours) > 5
    assert app.window.input.isReadOnly() is False and app.window.send_button.isEnabled()


def test_input_disabled_with_reason_while_generating_and_stop_keeps_partial(make_app, qtbot):
    app = make_app(max_new_tokens=200).start()
    c = app.controller
    app.window.input.setPlainText("Write a long story about a dragon who loves tea.")
    qtbot.keyClick(app.window.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: c.turn.generating and c.conv.open_turn is not None
                    and c.session.answer.streamed >= 4, timeout=TURN_TIMEOUT_MS)
    assert app.window.input.isReadOnly()
    assert "Esc" in app.window.reason.text()
    assert not app.window.send_button.isEnabled() and app.window.stop_button.isEnabled()
    with qtbot.wait_signal(c.signals.turn_finished, timeout=30_000) as blocker:
        qtbot.keyClick(app.window.input, Qt.Key.Key_Escape)
    assert blocker.args == ["aborted"]
    answer = max(c.conv.turns)
    partial = _assistant_text(c.conv, answer)
    assert partial.strip() and c.session.answer.streamed < 200
    assert c.conv.turns[answer].complete
    assert any("partial" in m.text for m in app.window.messages.history)
    app.close()
    with ConversationStore.open(c.files.path) as store:
        again = store.load(Settings())
        assert _assistant_text(again, answer) == partial


def test_pruning_fills_graveyard_and_click_resurrects_pinned_in_place(make_app, qtbot):
    app = make_app(max_new_tokens=16, max_context_tokens=150, min_chunk_tokens=16).start()
    for _ in range(3):
        app.say(LONG_MESSAGE)
    conv = app.conv
    assert conv.live_token_count() <= 150 or any(c.pinned for c in conv.chunks.values())
    pruned = conv.graveyard()
    assert pruned, "pruned chunks are in the graveyard"
    panel = app.window.graveyard
    assert panel.model().total_count() == len(pruned)

    # Click the newest grave: the first row.
    target = pruned[0]
    view = panel.list_view()
    rect = view.visualRect(panel.model().index(0))
    with qtbot.wait_signal(app.controller.signals.conversation_changed, timeout=10_000):
        qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert target.live and target.pinned
    rows = conv.chunk_rows(target)
    assert (conv.table.brightness[rows] == MAX_BRIGHTNESS).all()
    positions = conv.table.position
    assert (np.diff(positions) > 0).all(), "it came back at its chronological place"
    assert target.id not in [c.id for c in conv.graveyard()]
    assert panel.model().total_count() == len(conv.graveyard())
    assert conv.chunk_text(target.id).strip()[:15] in app.window.heatmap.toPlainText()
    path = app.controller.files.path
    app.close()
    with ConversationStore.open(path) as store:
        again = store.load(Settings())
        assert again.chunks[target.id].live and again.chunks[target.id].pinned


def _menu_action(app, chunk_id: int, label: str):
    heatmap = app.window.heatmap
    heatmap.scroll_to_chunk(chunk_id)
    heatmap.flush()
    app.qtbot.wait(30)
    rect = heatmap.chunk_rect(chunk_id)
    assert rect is not None, "chunk is on screen"
    menu = heatmap.context_menu_for(QPoint(rect.left() + 2, rect.top() + 2))
    return next(a for a in menu.actions() if label in a.text())


def test_pin_merge_prune_through_context_menu(make_app, qtbot):
    app = make_app(max_new_tokens=12, min_chunk_tokens=8, max_context_tokens=0).start()
    app.say(LONG_MESSAGE)
    conv = app.conv
    user_turn = min(t for t, turn in conv.turns.items() if turn.role == "user")
    chunks = conv.content_chunks(user_turn)
    assert len(chunks) >= 3

    first = chunks[0]
    pin = _menu_action(app, first.id, "Pin")
    from halo_weave.ui.colors import has_glyph

    assert has_glyph(app.window.heatmap.font(), pin.text()), "no missing-glyph box in the menu"
    pin.trigger()
    assert first.pinned and (conv.table.brightness[conv.chunk_rows(first)] == MAX_BRIGHTNESS).all()
    _menu_action(app, first.id, "Unpin").trigger()
    assert not first.pinned

    second, third = chunks[1], chunks[2]
    tokens = second.token_count + third.token_count
    _menu_action(app, second.id, "Merge").trigger()
    assert second.token_count == tokens and third.id not in conv.chunks

    last = conv.content_chunks(user_turn)[-1]
    _menu_action(app, last.id, "Prune now").trigger()
    assert not last.live and last.id in [c.id for c in conv.graveyard()]

    path = app.controller.files.path
    app.close()
    with ConversationStore.open(path) as store:
        again = store.load(Settings())
        assert again.chunks[second.id].token_count == tokens and third.id not in again.chunks
        assert not again.chunks[last.id].live and not again.chunks[first.id].pinned


def test_settings_persist_across_restart(make_app, qtbot):
    app = make_app().start()
    changed = app.controller.settings.replace(temperature=0.3, max_context_tokens=777, system_prompt="Be brief.")
    app.window.apply_settings(changed)
    qtbot.waitUntil(lambda: app.conv.system.text == "Be brief.", timeout=10_000)
    app.close()

    reloaded = load_settings(app_qsettings(app.controller.data_dir))
    assert reloaded.sampling.temperature == pytest.approx(0.3)
    assert reloaded.pruning.max_context_tokens == 777
    assert reloaded.chat.system_prompt == "Be brief."


def test_restart_rehydrates_exactly_and_export_import_reproduces(make_app, qtbot, tmp_path):
    app = make_app(max_new_tokens=12, max_context_tokens=120, min_chunk_tokens=16).start()
    app.say("My cat is called Tuna and she likes boxes.")
    app.say(LONG_MESSAGE)
    before = app.conv
    path = app.controller.files.path
    snapshot = _snapshot(before)
    export = tmp_path / "export.json"
    assert app.controller.files.export_json(export) and export.stat().st_size > 0
    app.close()

    again = make_app(max_new_tokens=12, max_context_tokens=120, min_chunk_tokens=16).start()
    assert again.controller.files.path == path, "the last conversation reopens"
    assert _snapshot(again.conv) == snapshot
    assert again.window.heatmap.toPlainText() == app.window.heatmap.toPlainText()

    with qtbot.wait_signal(again.controller.signals.conversation_opened, timeout=60_000):
        again.controller.files.import_json(export)
    assert again.controller.files.path != path
    assert _snapshot(again.conv) == snapshot
    again.settle()
    assert again.controller.memory.index.entry_count > 0, "the import was re-indexed"
    assert again.say("What is my cat called?") in ("stop", "length")


def _snapshot(conv):
    table = conv.table
    return (
        table.position.tolist(), table.token_id.tolist(), table.brightness.tolist(),
        sorted((c.id, c.turn_id, c.chunk_index, c.role, c.live, c.pinned, c.token_count)
               for c in conv.chunks.values()),
        [conv.chunk_text(c.id) for c in conv.live_chunks()],
        conv.system.text, conv.next_position,
    )


def test_each_conversation_keeps_the_system_prompt_given_it_in_chat_system_prompt(make_app, qtbot):
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QDialogButtonBox

    from halo_weave.ui.settings_dialog import SettingsDialog

    app = make_app().start()
    controller, window = app.controller, app.window
    app.say("Hello!")
    done = []

    def drive() -> None:
        dialog = QApplication.activeModalWidget()
        if not isinstance(dialog, SettingsDialog):
            return  # no dialog: `done` stays empty and the test fails below
        try:
            assert dialog.tabs.currentIndex() == dialog.prompt_tab, "it opens at the system prompts"
            own = dialog.conversation_prompt_edit
            assert own.toPlainText() == SHORT_SYSTEM_PROMPT
            own.setPlainText("You answer in French.")
            ok = dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Ok)
            qtbot.mouseClick(ok, Qt.MouseButton.LeftButton)
            done.append(dialog.result())
        finally:
            if dialog.isVisible():  # never leave a modal dialog waiting for a user
                dialog.reject()

    QTimer.singleShot(200, drive)
    window.menus.prompt_action.trigger()
    assert done == [SettingsDialog.DialogCode.Accepted]
    qtbot.waitUntil(lambda: app.conv.system.text == "You answer in French.", timeout=10_000)
    assert controller.settings.chat.system_prompt == SHORT_SYSTEM_PROMPT, "the default for new ones is unchanged"
    french = controller.files.path
    # A new conversation starts with the default; the first keeps its own when reopened.
    controller.files.new_conversation()
    qtbot.waitUntil(lambda: app.conv.system.text == SHORT_SYSTEM_PROMPT, timeout=10_000)
    assert controller.files.open_conversation(french)
    qtbot.waitUntil(lambda: not controller.gate.input_block_reason(), timeout=CONNECT_TIMEOUT_MS)
    assert app.conv.system.text == "You answer in French."
    assert "You answer in French." in window.heatmap.toPlainText()

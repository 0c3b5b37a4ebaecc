"""Settings → Server, "Built-in model": the user picks what the built-in server runs, a
model that is not installed says how to install it, a GGUF file of their own can be
opened, and the server the window runs starts again with the model chosen."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication, QDialogButtonBox

from halo_weave.app import TurnController
from halo_weave.server import bundled
from halo_weave.settings import Settings
from halo_weave.ui.control import connection as connection_mod
from halo_weave.ui.main_window import MainWindow, app_qsettings
from halo_weave.ui.settings_dialog import SettingsDialog

NOTHING_LISTENS = "http://127.0.0.1:9"
START_TIMEOUT_MS = 300_000


def test_the_dialog_lists_the_bundled_models_and_says_how_to_install_a_missing_one(qtbot, tmp_path):
    dialog = SettingsDialog(Settings())
    qtbot.addWidget(dialog)
    choice = dialog.model_choice
    combo = choice.combo
    offered = bundled.offered()
    assert [combo.itemData(i) for i in range(len(offered))] == ["", "qwen1.5b", "smollm2"]
    assert choice.value() == "", "the default is chosen"
    assert combo.itemText(0).startswith("Qwen2.5-Coder-0.5B-Instruct — the default")
    for i, model in enumerate(offered):
        item = combo.model().item(i)
        tip = combo.itemData(i, Qt.ItemDataRole.ToolTipRole)
        if model.missing is None:
            assert item.isEnabled() and "not installed" not in combo.itemText(i)
        else:  # greyed out, its tooltip the command that installs it
            assert not item.isEnabled() and combo.itemText(i).endswith("(not installed)")
            assert "install" in tip and model.title in tip
    assert dialog.explanations["server_model"].text().startswith("What the built-in server runs")

    # A file of the user's own: listed by its name, kept as its path.
    own = tmp_path / "my-model.gguf"
    own.write_bytes(b"GGUF")
    choice.select(str(own))
    assert combo.currentText() == "my-model.gguf" and choice.value() == str(own)
    assert dialog.current_settings().server.server_model == str(own)
    # Any name of a bundled model selects it; the default's name is the default.
    choice.select("SmolLM2")
    assert choice.value() == "smollm2"
    choice.select("qwen")
    assert choice.value() == ""


def test_a_setting_naming_a_file_shows_that_file(qtbot, tmp_path):
    path = str(tmp_path / "elsewhere.gguf")
    dialog = SettingsDialog(Settings.of(server_model=path))
    qtbot.addWidget(dialog)
    assert dialog.model_choice.value() == path
    assert dialog.model_choice.combo.currentText() == "elsewhere.gguf"


@pytest.mark.slow
def test_choosing_another_model_starts_the_builtin_server_again_with_it(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    monkeypatch.setattr(connection_mod, "DEFAULT_SERVER_URL", NOTHING_LISTENS)
    settings = Settings.of(server_url=NOTHING_LISTENS, autostart_server=True, max_new_tokens=6,
                           server_model="smollm2")
    controller = TurnController(settings, tmp_path, autostart=True)
    window = MainWindow(controller, app_qsettings(tmp_path))
    qtbot.addWidget(window)
    window.show()
    served: list[str] = []  # the model each server connected to says it serves
    controller.signals.models_changed.connect(lambda models, current: served.append(current.lower()))
    try:
        controller.start()
        qtbot.waitUntil(lambda: not controller.gate.input_block_reason(), timeout=START_TIMEOUT_MS)
        first = controller.link.server
        assert served and "smollm2" in served[-1]
        window.input.setPlainText("My cat is called Mochi.")
        with qtbot.wait_signal(controller.signals.turn_finished, timeout=120_000):
            qtbot.keyClick(window.input, Qt.Key.Key_Return)
        done = []

        def drive() -> None:
            dialog = QApplication.activeModalWidget()
            if not isinstance(dialog, SettingsDialog):
                return
            try:
                assert dialog.model_choice.value() == "smollm2"
                dialog.model_choice.select("")  # the default, Qwen2.5-Coder-0.5B
                ok = dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Ok)
                qtbot.mouseClick(ok, Qt.MouseButton.LeftButton)
                done.append(dialog.result())
            finally:
                if dialog.isVisible():
                    dialog.reject()

        QTimer.singleShot(200, drive)
        window.menus.settings_action.trigger()
        assert done == [SettingsDialog.DialogCode.Accepted]
        assert controller.settings.server.server_model == ""
        qtbot.waitUntil(lambda: controller.link.server is not None and controller.link.server is not first
                        and not controller.gate.input_block_reason(), timeout=START_TIMEOUT_MS)
        assert not first.alive(), "the old server was stopped"
        assert "qwen2.5-coder-0.5b" in served[-1]
        # The conversation goes on with the new model, the earlier message kept.
        window.input.setPlainText("Hello!")
        with qtbot.wait_signal(controller.signals.turn_finished, timeout=120_000) as blocker:
            qtbot.keyClick(window.input, Qt.Key.Key_Return)
        assert blocker.args[0] in ("stop", "length")
        text = window.heatmap.toPlainText()
        assert "My cat is called Mochi." in text and "Hello!" in text
        assert not [m for m in window.messages.history if m.serious]
    finally:
        window.close()


def test_a_server_the_window_does_not_run_takes_the_model_when_it_next_starts(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    settings = Settings.of(server_url=NOTHING_LISTENS, autostart_server=False)
    controller = TurnController(settings, tmp_path, autostart=False)
    window = MainWindow(controller, app_qsettings(tmp_path))
    qtbot.addWidget(window)
    window.show()
    try:
        def drive() -> None:
            dialog = QApplication.activeModalWidget()
            if not isinstance(dialog, SettingsDialog):
                return
            try:
                dialog.model_choice.select("smollm2")
                dialog.accept()
            finally:
                if dialog.isVisible():
                    dialog.reject()

        QTimer.singleShot(200, drive)
        window.menus.settings_action.trigger()
        assert controller.settings.server.server_model == "smollm2"
        assert controller.link.server is None, "nothing was started"
        assert any("will run smollm2 when it next starts" in m.text for m in window.messages.history)
    finally:
        window.close()

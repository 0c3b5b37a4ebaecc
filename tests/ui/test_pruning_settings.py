"""Settings → What decides pruning: the brightness rules in words, a half-life that cannot
be wrong, the choice saved to disk and applied to the open conversation, and the window
(stats line, legend, heatmap tooltip and colours) saying which score is in use.  Real
SQLite files and the real settings file in ``tmp_path``; no model needed."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QRect, QSettings, Qt, QTimer
from PySide6.QtWidgets import QApplication, QComboBox, QDialogButtonBox, QLabel, QSpinBox

from halo_weave import settings as settings_mod
from halo_weave.settings import CHOICES, MAX_BRIGHTNESS, Choice, Settings, choice_values
from halo_weave.ui.main_window import app_qsettings
from halo_weave.ui.settings_dialog import SettingsDialog
from halo_weave.ui.settings_io import load_settings, save_settings, settings_problems

from test_app import make_app  # noqa: F401 - the fixture
from window_helpers import write_conversation


@pytest.fixture
def dialog(qtbot) -> SettingsDialog:
    widget = SettingsDialog(Settings(), keyring=False)
    qtbot.addWidget(widget)
    widget.tabs.setCurrentWidget(widget.pruning_page)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def test_the_page_lists_every_rule_with_its_explanation(dialog, qtbot):
    rules: QComboBox = dialog.editors["brightness_rule"]
    assert dialog.tabs.tabText(dialog.tabs.currentIndex()) == "What decides pruning"
    assert [rules.itemData(i) for i in range(rules.count())] == ["vote", "decay", "mass"]
    for i, option in enumerate(CHOICES["brightness_rule"]):
        assert rules.itemText(i) == option.label
        assert rules.itemData(i, Qt.ItemDataRole.ToolTipRole) == option.explanation
    shown = dialog.pruning_page.explanations["brightness_rule"]
    assert "takes 1 from every other word" in shown.text() and rules.toolTip() == shown.text()
    for name in ("new_token_brightness", "chunk_rank", "prune_order", "prune_when"):
        box = dialog.editors[name]
        assert [box.itemData(i) for i in range(box.count())] == list(choice_values(name))
    orders = dialog.editors["prune_order"]
    assert "Oldest first" in orders.itemText(orders.findData("age"))
    when = dialog.pruning_page.findChild(QLabel, "whenItApplies")
    assert when.isVisible() and "from the next generated token" in when.text()


def test_the_half_life_is_enabled_only_for_the_rule_that_uses_it(dialog):
    rules, half_life, k = (dialog.editors[n] for n in ("brightness_rule", "brightness_half_life", "chunk_rank_k"))
    assert not half_life.isEnabled() and not k.isEnabled()
    rules.setCurrentIndex(rules.findData("decay"))
    assert half_life.isEnabled()
    assert "halves every half-life" in dialog.pruning_page.explanations["brightness_rule"].text()
    rules.setCurrentIndex(rules.findData("mass"))
    assert not half_life.isEnabled()
    dialog.editors["chunk_rank"].setCurrentIndex(dialog.editors["chunk_rank"].findData("topk"))
    assert k.isEnabled()


def test_a_user_cannot_enter_an_invalid_half_life(dialog, qtbot):
    rules, box = dialog.editors["brightness_rule"], dialog.editors["brightness_half_life"]
    assert isinstance(box, QSpinBox)
    rules.setCurrentIndex(rules.findData("decay"))
    for typed in ("0", "-5", "abc", "99999999999"):
        box.selectAll()
        qtbot.keyClicks(box, typed)
        box.interpretText()
        chosen = dialog.current_settings().brightness.brightness_half_life
        assert 1 <= chosen <= 10_000_000, (typed, chosen)
        assert not dialog.problems()
    box.selectAll()
    qtbot.keyClicks(box, "128")
    box.interpretText()
    assert dialog.current_settings().brightness.brightness_half_life == 128
    # What the spin box keeps out is refused everywhere else too: a clear sentence, and a
    # hand-edited settings file falls back to the default.
    assert any("brightness_half_life" in p for p in settings_problems(Settings.of(brightness_half_life=0)))


def test_a_bad_half_life_in_the_settings_file_falls_back(tmp_path):
    qs = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    save_settings(Settings.of(brightness_rule="decay"), qs)
    qs.setValue("settings/brightness_half_life", -3)
    qs.setValue("settings/chunk_rank", "loudest")
    qs.sync()
    loaded = load_settings(qs)
    assert loaded.brightness.brightness_rule == "decay"
    assert loaded.brightness.brightness_half_life == Settings().brightness.brightness_half_life
    assert loaded.brightness.chunk_rank == "peak"


def test_a_rule_declared_in_settings_appears_in_the_dialog_without_a_ui_edit(qtbot, monkeypatch):
    extra = Choice("newest", "A rule added later", "What it does, plainly.", "a later rule",
                   uses=("brightness_half_life",))
    monkeypatch.setitem(settings_mod.CHOICES, "brightness_rule", CHOICES["brightness_rule"] + (extra,))
    dialog = SettingsDialog(Settings(), keyring=False)
    qtbot.addWidget(dialog)
    rules = dialog.editors["brightness_rule"]
    rules.setCurrentIndex(rules.findData("newest"))
    assert rules.currentText() == "A rule added later" and dialog.editors["brightness_half_life"].isEnabled()
    assert dialog.current_settings().brightness.brightness_rule == "newest" and not dialog.problems()


# ---------------------------------------------------------------- the window


def _choose_in_settings(window, qtbot, **values) -> None:
    """File → Settings…, the pruning page, choose ``values`` (field: value), OK: as a user."""
    done = []

    def drive() -> None:
        dialog = QApplication.activeModalWidget()
        if not isinstance(dialog, SettingsDialog):
            return  # no dialog: `done` stays empty and the test fails below
        try:
            dialog.tabs.setCurrentWidget(dialog.pruning_page)
            for name, value in values.items():
                editor = dialog.editors[name]
                if isinstance(editor, QComboBox):
                    editor.setCurrentIndex(editor.findData(value))
                else:
                    editor.selectAll()
                    qtbot.keyClicks(editor, str(value))
                    editor.interpretText()
            ok = dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Ok)
            qtbot.mouseClick(ok, Qt.MouseButton.LeftButton)
            done.append(dialog.result())
        finally:
            if dialog.isVisible():  # never leave a modal dialog waiting for a user
                dialog.reject()

    QTimer.singleShot(200, drive)
    window.menus.settings_action.trigger()
    assert done == [SettingsDialog.DialogCode.Accepted], "the dialog was driven and accepted"


def test_choosing_a_rule_saves_it_and_the_window_says_which_score_is_in_use(offline_window, qtbot, tmp_path):
    window, bar = offline_window, offline_window.stats_bar
    controller = window.controller
    controller.files.open_conversation(None)
    window.guide.show_legend()
    assert bar.scoring_label.text() == "☀ magnitude votes · peak · pruning oldest first"
    assert "magnitude votes" in window.guide.legend.scoring_text

    _choose_in_settings(window, qtbot, brightness_rule="decay", brightness_half_life=128, prune_order="brightness")

    on_disk = load_settings(app_qsettings(tmp_path))  # a fresh read of the settings file
    assert (on_disk.brightness.brightness_rule, on_disk.brightness.brightness_half_life,
            on_disk.pruning.prune_order) == ("decay", 128, "brightness")
    assert controller.conv.settings.brightness.brightness_rule == "decay", "applied to the open conversation"
    assert bar.scoring_label.text() == "☀ decayed attention mass (half-life 128) · peak · pruning dimmest first"
    legend = window.guide.legend
    assert "decayed attention mass (half-life 128)" in legend.scoring_text
    assert "Dim paragraphs are pruned first" in legend.descriptions[0] and "halves every half-life" in legend.scoring_text
    assert window.heatmap.tips.note == bar.scoring_label.text()  # the tooltip's last line
    # On a 1280 px screen, with the graveyard open, the words are whole in the window.
    window.set_graveyard_visible(True)
    window.resize(1280, 800)
    qtbot.waitUntil(lambda: window.width() == 1280, timeout=2000)
    label = bar.scoring_label
    where = QRect(label.mapTo(window, QPoint(0, 0)), label.size())
    assert label.isVisible() and window.rect().contains(where) and not label.is_elided()


def test_switching_the_chunk_score_repaints_the_heatmap(offline_window, qtbot, tmp_path):
    window, controller = offline_window, offline_window.controller
    path = write_conversation(tmp_path, ("user", " ".join(["tea"] * 30)), ("assistant", " ".join(["leaf"] * 30)))
    assert controller.files.open_conversation(path)
    window.apply_settings(controller.settings.replace(highlight_fraction=0.0))  # colour alone, no highlights
    conv, view = controller.conv, window.heatmap
    user, answer = (conv.content_chunks(t)[0] for t in sorted(conv.turns))
    # One word read a lot in the question, the whole answer read evenly: the question's peak
    # is higher, the answer's top-4 mean is higher.
    conv.table.brightness[conv.chunk_rows(user)] = 0
    conv.table.brightness[conv.chunk_rows(user).start] = 9000
    conv.table.brightness[conv.chunk_rows(answer)] = 5000
    controller.signals.conversation_changed.emit()
    qtbot.waitUntil(lambda: view.chunk_rect(answer.id) is not None, timeout=2000)

    def gold(chunk) -> float:
        """How gold the chunk's text looks: the mean red of its brightest pixels, as painted
        with the next frame (no new token comes)."""
        qtbot.wait(100)
        image = view.viewport().grab(view.chunk_rect(chunk.id)).toImage()
        pixels = np.array([image.pixelColor(x, y).red() for x in range(0, image.width(), 2)
                           for y in range(0, image.height(), 2)])
        return float(np.sort(pixels)[-20:].mean())

    before = gold(answer)
    assert "peak brightness 5,000" in view.tips.for_chunk(answer.id)
    window.apply_settings(controller.settings.replace(chunk_rank="topk", chunk_rank_k=4))
    qtbot.wait(50)
    assert gold(answer) > before + 40, "the answer turned from olive to gold without a new token"
    assert "top-4 mean brightness 5,000" in view.tips.for_chunk(answer.id)
    assert "top-4 mean" in view.tips.for_chunk(answer.id).splitlines()[-1]
    assert "top-4 mean" in window.stats_bar.scoring_label.text()


@pytest.mark.slow
def test_a_new_rule_counts_from_the_next_generated_token_with_the_real_model(make_app, qtbot):
    app = make_app(max_new_tokens=12).start()
    c, window = app.controller, app.window
    assert app.say("My cat is called Mochi and she likes boxes.") in ("stop", "length")
    conv = app.conv
    first = conv.content_chunks(min(conv.turns))[0]
    rows = conv.chunk_rows(first)
    under_votes = conv.table.brightness[rows].copy()
    assert under_votes.min() > MAX_BRIGHTNESS - 100, "votes take 1 per generated token from an unread word"

    window.apply_settings(c.settings.replace(brightness_rule="decay", brightness_half_life=16))
    said = [m.text for m in window.messages.history]
    assert any("decayed attention mass (half-life 16), from the next generated token on" in t for t in said), said
    assert (conv.table.brightness[rows] == under_votes).all(), "nothing recomputed: the brightness so far carries over"
    assert window.stats_bar.scoring_label.text().startswith("☀ decayed attention mass (half-life 16)")

    assert app.say("What is my cat called?") in ("stop", "length")
    # A dozen generated tokens with a half-life of 16: what the model did not read fades
    # by a third or so, far below anything votes could take away in that time.
    assert conv.table.brightness[rows].min() < MAX_BRIGHTNESS * 0.9, conv.table.brightness[rows]
    app.close()

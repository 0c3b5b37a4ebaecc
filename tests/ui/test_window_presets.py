"""Chat → Presets… in the window (no model needed: the prompt is kept in the conversation's
real file and framed once a server connects): a preset picked is used, for this
conversation and new ones, and kept; the prompt and sampling in use save as a preset."""

from __future__ import annotations

from halo_weave.settings.presets import PresetBook, presets_file
from halo_weave.ui.preset_dialog import IN_USE, PresetDialog, apply_preset
from halo_weave.ui.settings_io import load_settings


def test_preset_picked_in_the_window_sets_the_prompt_and_sampling(offline_window, qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("HALO_WEAVE_CONFIG", str(tmp_path / "config"))  # presets.json beside settings.ini
    window = offline_window
    c = window.controller
    c.start()
    qtbot.waitUntil(lambda: c.conv is not None, timeout=10_000)
    assert window.menus.presets_action.text() == "Pre&sets…"
    book = PresetBook()
    dialog = PresetDialog(book, c.session.prompt.own(), c.settings, True, window)
    qtbot.addWidget(dialog)
    items = [dialog.list.item(i).text() for i in range(dialog.list.count())]
    assert items[:3] == ["Assistant  (built in)", "Coder  (built in)", "Writer  (built in)"]
    assert not any(IN_USE in item for item in items), "the one-line default prompt is no preset's"
    dialog.select("Coder")
    assert dialog.chosen().name == "Coder" and not dialog.delete_button.isEnabled()
    assert "fenced code blocks" in dialog.prompt_view.toPlainText()
    assert "temperature 0.2" in dialog.sampling_label.text()
    dialog.for_new.setChecked(True)
    assert apply_preset(window, dialog.chosen(), dialog.for_conversation.isChecked(), dialog.for_new.isChecked())
    coder = book.find("Coder")
    assert c.session.prompt.own() == coder.system_prompt, "this conversation's own prompt, kept in its file"
    assert c.settings.sampling.temperature == 0.2 and c.settings.sampling.max_new_tokens == 1024
    assert c.settings.chat.system_prompt == coder.system_prompt, "and the default for new conversations"
    assert load_settings(window.qsettings).sampling.temperature == 0.2, "kept for the next start"
    assert "Preset 'Coder'" in window.messages.history[-1].text

    # What is in use now saves as a preset of one's own: listed, marked in use, kept in presets.json.
    again = PresetDialog(PresetBook(), c.session.prompt.own(), c.settings, True, window)
    qtbot.addWidget(again)
    assert again.chosen().name == "Coder" and IN_USE in again.list.currentItem().text()
    assert again.save_current("My coder")
    assert "saved" in again.status_label.text()
    assert presets_file().is_file() and PresetBook().find("My coder").matches(coder.system_prompt, c.settings)
    assert again.chosen().name == "My coder" and again.delete_button.isEnabled()
    assert not again.save_current("writer") and "built-in" in again.status_label.text()


def test_preset_dialog_says_when_the_presets_file_cannot_be_read(offline_window, qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("HALO_WEAVE_CONFIG", str(tmp_path / "config"))
    (tmp_path / "config").mkdir()
    presets_file().write_text("{broken", encoding="utf-8")
    window = offline_window
    dialog = PresetDialog(PresetBook(), "You are a helpful assistant.", window.controller.settings, False, window)
    qtbot.addWidget(dialog)
    dialog.show()
    assert "not valid JSON" in dialog.status_label.text() and dialog.status_label.isVisible()
    assert dialog.list.count() == 3, "the built-in presets are still offered"
    assert not dialog.for_conversation.isEnabled() and dialog.for_new.isChecked(), "no conversation open"
    assert presets_file().read_text(encoding="utf-8") == "{broken"

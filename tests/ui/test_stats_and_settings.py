"""Stats bar figures and connection light; settings dialog, persistence and bad values."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from PySide6.QtCore import QSettings, Qt, QTimer
from PySide6.QtWidgets import QDialog, QDoubleSpinBox, QSpinBox

from halo_weave.settings import Settings
from halo_weave.ui.settings_dialog import SettingsDialog
from halo_weave.ui.settings_io import load_settings, save_settings
from halo_weave.ui.stats_bar import NO_ATTENTION_TEXT, StatsBar


@pytest.fixture
def qsettings(tmp_path) -> QSettings:
    return QSettings(str(tmp_path / "halo-weave.ini"), QSettings.Format.IniFormat)


def row_label(dialog, name: str) -> str:
    """The label of the settings dialog's row that holds the editor of ``name`` (the
    editor itself, or the field around it with its explanation)."""
    from PySide6.QtWidgets import QFormLayout

    editor = dialog.editors[name]
    for form in dialog.findChildren(QFormLayout):
        for widget in (editor, editor.parentWidget()):
            label = form.labelForField(widget)
            if label is not None:
                return label.text()
    return ""


#: A settings file as an earlier version wrote it (Settings one flat record, each setting
#: a key of the [settings] group), with a few values changed from their defaults.
FLAT_INI = """\
[settings]
attention_format=aggregated
autostart_server=true
brightness_cap=10000
brightness_half_life=256
brightness_rule=vote
chat_template=auto
chunk_rank=peak
chunk_rank_k=4
date_weight=0.3
decay_per_step=1
embed_wait_seconds=2
embedding_max_tokens=256
highlight_fraction=0.2
hybrid_common_share=0.05
hybrid_prefix_stems=true
hybrid_search=false
hybrid_weight=0.3
initial_brightness=10000
max_context_tokens=700
max_new_tokens=512
min_chunk_tokens=64
min_similarity=0.3
neighbour_matches=4
new_token_brightness=cap
notes_tool=false
proxy_attention=true
proxy_pruning=false
prune_hysteresis=0.75
prune_keep_recent=0
prune_order=brightness
prune_when=after_exchange
query_feedback=0.5
query_feedback_top=3
query_max_results=30
query_split=false
recall_max_chunks=9
recall_note=true
recall_relative_floor=0.55
record_attention=false
render_markdown=true
rep_pen=1.1
resurrect_neighbours=1
resurrection_anchors=if_room
resurrection_brightness=at_prune
resurrection_budget_cap=0
resurrection_keep_share=0.5
sampler_seed=-1
saved_caches_mb=2048
score_current_turn=true
served_model=
server_context_tokens=0
server_model=
server_url=http://192.0.2.5:5001
session_gap_seconds=1800
system_prompt="Be brief, and kind."
temperature=0.3
top_k=40
top_p=0.9
user_similarity_boost=1
"""


# ---------------------------------------------------------------- stats bar
@pytest.fixture
def bar(qtbot) -> StatsBar:
    widget = StatsBar()
    qtbot.addWidget(widget)
    widget.show()
    return widget


def test_stats_bar_shows_figures(bar):
    bar.update_stats(1834, 2000, 12345, 23, 4321.4, 11.26)
    text = " ".join(label.text() for label in (bar.budget_label, bar.totals_label, bar.brightness_label,
                                               bar.speed_label))
    for expected in ("1,834 / 2,000", "12,345", "Pruned 23", "4,321", "11.3 tok/s"):
        assert expected in text
    assert bar.recalled_label.isHidden(), "nothing recalled: nothing said about it"


ORANGE = "#e6b450"


def test_what_a_message_recalled_is_counted_beside_the_limit_not_over_it(bar):
    # 700 of the conversation and 1,334 brought back for the message being answered.
    bar.update_stats(2034, 700, 9000, 37, 5000.0, None, recalled_tokens=1334, exchange_open=True)
    assert bar.budget_label.text() == "Live 700 / 700"
    assert not bar.recalled_label.isHidden() and bar.recalled_label.text() == "+ 1,334 recalled"
    assert ORANGE not in bar.budget_label.styleSheet()
    assert "2,034 tokens live" in bar.budget_label.toolTip()
    assert "1,334 of them recalled" in bar.budget_label.toolTip()
    # After the answer the prune kept some of them, within the limit.
    bar.update_stats(520, 700, 9100, 50, 5000.0, None, recalled_tokens=310, kept_tokens=180)
    assert (bar.budget_label.text(), bar.recalled_label.text()) == ("Live 210 / 700", "+ 310 recalled")
    assert ORANGE not in bar.budget_label.styleSheet()


def test_the_limit_shows_orange_only_when_the_rest_is_over_it_with_no_answer_to_prune_it(bar):
    # The answer being written: pruned when it ends, so no alarm, and the tooltip says so.
    bar.update_stats(900, 700, 900, 0, 5000.0, 9.0, exchange_open=True)
    assert bar.budget_label.text() == "Live 900 / 700" and ORANGE not in bar.budget_label.styleSheet()
    assert "pruned when the answer ends" in bar.budget_label.toolTip()
    # Between answers, over because the last exchange and pinned chunks cannot be pruned.
    bar.update_stats(1200, 700, 3000, 8, 5000.0, None, recalled_tokens=100, kept_tokens=1050)
    assert bar.budget_label.text() == "Live 1,100 / 700" and ORANGE in bar.budget_label.styleSheet()
    assert "pinned chunks and your last exchange hold 1,050 tokens" in bar.budget_label.toolTip()


def test_stats_bar_no_limit(bar):
    bar.update_stats(500, 0, 500, 0, 10000.0, None, 0)
    assert "no limit" in bar.budget_label.text()


def test_the_bar_does_not_jump_between_one_and_two_lines_as_the_speed_changes(bar, qtbot):
    bar.show_connection("connected", "Halo Weave server · 8192 ctx")
    bar.update_stats(1834, 2000, 12345, 23, 4321.4, 9.9, first_token_s=0.8)
    bar.resize(bar.one_line_width() + 300, bar.height())
    qtbot.waitUntil(lambda: not bar.is_two_lines(), timeout=1000)
    bar.resize(bar.one_line_width() + 2, bar.height())  # just wide enough
    qtbot.waitUntil(lambda: bar.width() == bar.one_line_width() + 2, timeout=1000)
    assert not bar.is_two_lines()
    bar.update_stats(1834, 2000, 12345, 23, 4321.4, 123.4, first_token_s=10.8)  # two digits more
    assert bar.is_two_lines(), "the longer figure does not fit on one line"
    bar.update_stats(1834, 2000, 12345, 23, 4321.4, 9.9, first_token_s=0.8)
    assert bar.is_two_lines(), "one digit less: the bar stays as it is until there is room to spare"
    assert not bar.speed_label.is_elided()


@pytest.mark.parametrize(
    ("state", "hue_check"),
    [
        ("ready", lambda c: c.green() > c.red() and c.green() > c.blue()),
        ("error", lambda c: c.red() > c.green() + 80),
        ("generating", lambda c: c.blue() > c.red()),
        ("loading", lambda c: c.red() > c.blue() + 80),
        ("offline", lambda c: abs(c.red() - c.blue()) < 20),
    ],
)
def test_connection_light_colour_and_detail(bar, state, hue_check):
    bar.set_connection(state, "SmolLM2-135M-Instruct")
    assert hue_check(bar.connection_light.color())
    assert bar.connection_label.text() == "SmolLM2-135M-Instruct"
    assert bar.connection_state() == state


def test_attention_warning(bar):
    assert bar.attention_label.isHidden()
    bar.set_attention_available(False)
    assert not bar.attention_label.isHidden()
    assert bar.attention_label.text() == NO_ATTENTION_TEXT
    assert "oldest paragraphs are pruned first" in bar.attention_label.toolTip()
    bar.set_attention_available(True)
    assert bar.attention_label.isHidden()


def test_brightness_says_when_nothing_measures_it_and_when_the_reader_does(bar):
    bar.update_stats(500, 2000, 500, 0, 10000.0, None, 0)
    assert bar.brightness_label.text() == "Mean ☀ 10,000"
    # A server without attention: a mean of 10,000 would claim everything is relevant.
    bar.set_attention_available(False)
    assert "10,000" not in bar.brightness_label.text() and "not measured" in bar.brightness_label.text()
    assert "no attention" in bar.brightness_label.toolTip()
    # The bundled reader measures it: the figure is back, said to be the reader's.
    words = "reader's attention (SmolLM2-135M) · pruning oldest-first"
    bar.set_brightness_source("reader", words, "… not the attention of llama3 …")
    bar.update_stats(500, 2000, 500, 0, 10000.0, None, 0, brightness_source="waiting")
    assert "10,000" not in bar.brightness_label.text() and "not read" in bar.brightness_label.toolTip()
    bar.update_stats(500, 2000, 500, 0, 7321.0, None, 0, brightness_source="reader")
    assert bar.brightness_label.text() == "Mean ☀ 7,321 (reader)"
    assert not bar.attention_label.isHidden() and bar.attention_label.text() == words
    assert "not the attention of llama3" in bar.attention_label.toolTip()


def test_a_long_attention_line_does_not_widen_the_window(bar):
    bar.set_brightness_source("reader", "reader")
    short = bar.minimumSizeHint().width()
    bar.set_brightness_source("reader", "reader's attention (SmolLM2-135M) · pruning oldest-first " * 4)
    assert bar.minimumSizeHint().width() == short
    assert bar.attention_label.toolTip().startswith("reader's attention (SmolLM2-135M)"), "the whole text stays readable"


def test_graveyard_toggle(bar, qtbot):
    with qtbot.wait_signal(bar.graveyard_toggled, timeout=1000) as blocker:
        qtbot.mouseClick(bar.graveyard_button, Qt.MouseButton.LeftButton)
    assert blocker.args == [True]
    with qtbot.assert_not_emitted(bar.graveyard_toggled):
        bar.set_graveyard_open(False)
    assert not bar.graveyard_button.isChecked()


# ---------------------------------------------------------------- settings io
def test_defaults_when_nothing_stored(qsettings):
    assert load_settings(qsettings) == Settings()


def test_round_trip_through_file(qsettings, tmp_path):
    custom = Settings().replace(
        temperature=1.25, top_p=0.5, top_k=7, rep_pen=1.3, max_new_tokens=321,
        max_context_tokens=0, min_chunk_tokens=32, resurrection_budget_cap=800,
        resurrection_brightness="mean", score_current_turn=False,
        system_prompt="Line one.\nLine two, with ünïcode.", server_url="http://10.0.0.5:5001",
        attention_format="per_layer", hybrid_search=False,
    )
    save_settings(custom, qsettings)
    reopened = QSettings(str(tmp_path / "halo-weave.ini"), QSettings.Format.IniFormat)
    assert load_settings(reopened) == custom


def test_an_earlier_versions_settings_file_loads_with_every_value(tmp_path):
    path = tmp_path / "settings.ini"
    path.write_text(FLAT_INI, encoding="utf-8")
    loaded = load_settings(QSettings(str(path), QSettings.Format.IniFormat))
    assert loaded == Settings.of(max_context_tokens=700, prune_order="brightness", temperature=0.3,
                                 hybrid_search=False, system_prompt="Be brief, and kind.",
                                 server_url="http://192.0.2.5:5001", recall_max_chunks=9)
    assert loaded.pruning.max_context_tokens == 700 and loaded.pruning.prune_order == "brightness"
    # Saved again, the file has the same keys: an older version reading it finds its own.
    again = tmp_path / "again.ini"
    save_settings(loaded, QSettings(str(again), QSettings.Format.IniFormat))
    keys = {line.split("=", 1)[0] for line in FLAT_INI.splitlines() if "=" in line}
    written = {line.split("=", 1)[0] for line in again.read_text(encoding="utf-8").splitlines() if "=" in line}
    assert written - keys == {"recall_keep_share", "server_api", "server_gpu_layers", "query_hop_terms",
                              "query_hop_weight", "speaker_weight"} and keys <= written, "its keys, and the ones added since"


def test_a_setting_saved_under_its_earlier_name_keeps_its_value(qsettings):
    qsettings.beginGroup("settings")
    qsettings.setValue("attention_keep_share", 0.25)
    qsettings.endGroup()
    assert load_settings(qsettings).recall.recall_keep_share == 0.25


def test_bad_stored_values_fall_back_to_defaults(qsettings):
    good = Settings().replace(top_k=13)
    save_settings(good, qsettings)
    qsettings.beginGroup("settings")
    qsettings.setValue("temperature", "very hot")
    qsettings.setValue("max_context_tokens", -5)
    qsettings.setValue("score_current_turn", "perhaps")
    qsettings.setValue("attention_format", "telepathy")
    qsettings.setValue("server_url", "ftp://nowhere")
    qsettings.setValue("min_chunk_tokens", "3.5")
    qsettings.setValue("not_a_setting", 1)
    qsettings.endGroup()
    qsettings.sync()
    loaded = load_settings(qsettings)
    defaults = Settings()
    assert loaded.sampling.top_k == 13  # good values survive
    for name in ("temperature", "max_context_tokens", "score_current_turn", "attention_format",
                 "server_url", "min_chunk_tokens"):
        assert loaded.value(name) == defaults.value(name), name


def test_inconsistent_budget_falls_back(qsettings):
    save_settings(Settings().replace(max_context_tokens=100, max_new_tokens=500), qsettings)
    loaded = load_settings(qsettings)
    assert loaded.pruning.max_context_tokens > loaded.sampling.max_new_tokens


# ---------------------------------------------------------------- dialog
@pytest.fixture
def dialog(qtbot) -> SettingsDialog:
    widget = SettingsDialog(Settings())
    qtbot.addWidget(widget)
    return widget


def test_dialog_shows_seed_defaults(dialog):
    e = dialog.editors
    assert e["temperature"].value() == pytest.approx(0.7)
    assert e["top_p"].value() == pytest.approx(0.9)
    assert e["max_context_tokens"].value() == 2000
    assert e["min_chunk_tokens"].value() == 64
    assert e["resurrection_brightness"].currentData() == "at_prune"
    assert e["attention_format"].currentData() == "aggregated"
    assert e["system_prompt"].toPlainText() == Settings().chat.system_prompt
    e["max_context_tokens"].setValue(0)
    assert e["max_context_tokens"].text() == "No pruning"


def test_dialog_edit_accept_save_reload(dialog, qsettings):
    e = dialog.editors
    e["temperature"].setValue(1.1)
    e["max_context_tokens"].setValue(4096)
    e["resurrection_brightness"].setCurrentIndex(e["resurrection_brightness"].findData("mean"))
    e["score_current_turn"].setChecked(False)
    e["hybrid_search"].setChecked(False)
    e["attention_format"].setCurrentIndex(e["attention_format"].findData("per_layer"))
    e["server_url"].setText("http://192.168.1.20:5001")
    e["system_prompt"].setPlainText("Be brief.\nBe kind.")
    assert e["resurrection_keep_share"].value() == pytest.approx(0.5)
    e["resurrection_keep_share"].setValue(1.0)  # recall never prunes context for its room
    QTimer.singleShot(0, dialog.accept)
    assert dialog.exec() == QDialog.DialogCode.Accepted
    result = dialog.result_settings()
    save_settings(result, qsettings)
    loaded = load_settings(qsettings)
    assert loaded == result
    assert (loaded.sampling.temperature, loaded.pruning.max_context_tokens,
            loaded.recall.resurrection_brightness) == (1.1, 4096, "mean")
    assert loaded.brightness.score_current_turn is False and loaded.search.hybrid_search is False
    assert loaded.server.attention_format == "per_layer" and loaded.server.server_url == "http://192.168.1.20:5001"
    assert loaded.chat.system_prompt == "Be brief.\nBe kind."
    assert loaded.recall.resurrection_keep_share == 1.0


#: The units a numeric field's explanation may name (or its box shows as a suffix).
UNITS = ("tokens", "MiB", "share", "factor", "no unit", "words", "seed")


def test_every_field_of_the_settings_dialog_says_what_it_does_and_its_unit(qtbot):
    dialog = SettingsDialog(Settings(), conversation_prompt="You answer in French.")
    qtbot.addWidget(dialog)
    dialog.show()
    for name, editor in dialog.editors.items():
        words = dialog.explanations.get(name)
        assert words is not None and words.text().strip(), f"{name} is not explained"
        page = dialog.tabs.widget(next(i for i in range(dialog.tabs.count())
                                       if dialog.tabs.widget(i).isAncestorOf(editor)))
        assert words.isVisibleTo(page) and page.isAncestorOf(words), f"{name}'s explanation is not beside it"
        if isinstance(editor, (QSpinBox, QDoubleSpinBox)):
            assert editor.suffix().strip() or any(unit in words.text() for unit in UNITS), \
                f"{name}: {words.text()!r} names no unit"
    # The budget is a target pruned back to after each answer, and its name and line say so.
    assert row_label(dialog, "max_context_tokens") == "Context target"
    target = dialog.explanations["max_context_tokens"].text()
    assert target.startswith("After each answer") and "75%" in target and "run over" in target


def test_dialog_refuses_invalid_input_with_a_message(dialog, qtbot):
    dialog.editors["server_url"].setText("localhost:5001")
    dialog.editors["max_context_tokens"].setValue(100)
    dialog.editors["max_new_tokens"].setValue(200)
    dialog.show()
    with qtbot.assert_not_emitted(dialog.accepted):
        dialog.accept()
    assert dialog.isVisible()
    message = dialog.error_label.text()
    assert "http://" in message and "longest answer" in message.lower()
    dialog.editors["server_url"].setText("http://localhost:5001")
    dialog.editors["max_context_tokens"].setValue(0)
    with qtbot.wait_signal(dialog.accepted, timeout=1000):
        dialog.accept()


def test_cancel_keeps_original(dialog):
    dialog.editors["temperature"].setValue(1.9)
    QTimer.singleShot(0, dialog.reject)
    dialog.exec()
    assert dialog.result_settings() == Settings()


def test_the_legend_names_the_settings_field_for_the_highlight(dialog, qtbot):
    """The legend's 'Settings → Context & memory → …' leads to a field that exists, and
    changing it changes the setting."""
    import re

    from PySide6.QtWidgets import QFormLayout, QLabel

    from halo_weave.ui.legend import LegendDialog

    legend = LegendDialog()
    qtbot.addWidget(legend)
    words = " ".join(label.text() for label in legend.findChildren(QLabel))
    named = re.search(r"Settings → Context & memory → ([^)]+)\)", words)
    assert named, words
    assert row_label(dialog, "highlight_fraction") == named.group(1)
    dialog.editors["highlight_fraction"].setValue(0.35)
    assert dialog.current_settings().chat.highlight_fraction == pytest.approx(0.35)

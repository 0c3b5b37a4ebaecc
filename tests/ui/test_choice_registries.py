"""Every multiple-choice setting is a registry of small objects (:mod:`halo_weave.rules`):
the Settings dialog offers exactly a registry's values, each with its own words, and the
app asks the chosen object what to do instead of comparing the setting with a string, so
a new value is one class in one file."""

from __future__ import annotations

import ast
import os
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest
from PySide6.QtCore import Qt

from halo_weave.brightness import resurrected
from halo_weave.errors import AttentionError, ConversationError
from halo_weave.rules import REGISTRIES, attention_format, new_token_brightness, prune_when, resurrection_anchors
from halo_weave.settings import CHOICES, Settings, scoring_words
from halo_weave.ui.settings_dialog import SettingsDialog
from halo_weave.ui.settings_io import field_problem

ROOT = Path(__file__).resolve().parents[2]

#: The settings once compared as strings; their values must not appear in a comparison.
REGISTRY_SETTINGS = ("prune_when", "new_token_brightness", "resurrection_brightness",
                     "attention_format", "resurrection_anchors")


def string_comparisons(source: str, values: set[str]) -> list[tuple[int, str]]:
    """(line, code) of every comparison with a string literal in ``values``
    (``x == "v"``, ``x != "v"``, ``x in ("v", …)``)."""
    def literals(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            for element in node.elts:
                yield from literals(element)

    return sorted((node.lineno, ast.unparse(node)) for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.Compare)
                  and any(set(literals(side)) & values for side in (node.left, *node.comparators)))


def test_the_comparison_check_sees_every_form():
    source = ('if s.prune_when == "for_room": pass\nok = fmt != "per_layer"\n'
              'x = rule in ("mean", "at_prune")\ny = prune_when(name).for_room\nz = "cap"\n')
    assert [line for line, _ in string_comparisons(source, {"for_room", "per_layer", "mean", "cap"})] == [1, 2, 3]


def test_no_module_compares_these_settings_with_a_string():
    values = {value for name in REGISTRY_SETTINGS for value in REGISTRIES[name]}
    assert {"for_room", "median", "at_prune", "if_room", "per_layer"} <= values
    found = [f"{path.relative_to(ROOT)}:{line}: {code}"
             for path in sorted((ROOT / "halo_weave").rglob("*.py"))
             for line, code in string_comparisons(path.read_text(), values)]
    assert found == []


def test_each_registry_names_its_entries_by_their_values():
    for name, registry in REGISTRIES.items():
        assert registry and all(key == rule.choice.value for key, rule in registry.items()), name
        assert CHOICES[name] == tuple(rule.choice for rule in registry.values())
        assert Settings().value(name) in registry


#: Chosen in the settings file only: the dialog does not show it.
FILE_ONLY = {"resurrection_anchors"}


@pytest.mark.parametrize("name", REGISTRY_SETTINGS)
def test_the_settings_offer_exactly_the_registrys_values(qtbot, name):
    registry = REGISTRIES[name]
    for value in registry:
        assert field_problem(name, value) is None
    assert "must be one of" in field_problem(name, "sometimes")
    dialog = SettingsDialog(Settings(), keyring=False)
    qtbot.addWidget(dialog)
    assert (name in dialog.editors) == (name not in FILE_ONLY)
    if name in FILE_ONLY:
        return
    box = dialog.editors[name]
    assert [box.itemData(i) for i in range(box.count())] == list(registry)
    assert [box.itemText(i) for i in range(box.count())] == [r.choice.label for r in registry.values()]
    assert [box.itemData(i, Qt.ItemDataRole.ToolTipRole) for i in range(box.count())] == [
        r.choice.explanation for r in registry.values()]
    assert box.currentData() == Settings().value(name)


def test_the_chosen_objects_decide_what_the_values_did():
    assert prune_when("for_room").for_room and not prune_when("after_exchange").for_room
    assert "only for room" in scoring_words(Settings.of(prune_when="for_room")).short
    assert "room" not in scoring_words(Settings()).short
    scored = np.array([10, 30, 20, 9000], np.int32)
    assert new_token_brightness("cap").start(scored, 10000) == 10000
    assert new_token_brightness("median").start(scored, 10000) == 25
    assert new_token_brightness("median").start(scored[:0], 10000) == 10000
    at_prune = np.array([5, 700, 40], np.int32)
    assert resurrected("at_prune", at_prune, 99).tolist() == [5, 700, 40]
    assert resurrected("mean", at_prune, 99).tolist() == [99, 99, 99]
    assert resurrected(10000, at_prune, 99).tolist() == [10000] * 3
    assert resurrection_anchors("always").with_match and not resurrection_anchors("if_room").with_match
    assert attention_format("per_layer").per_layer and not attention_format("aggregated").per_layer


def test_an_unknown_value_is_refused_by_name():
    with pytest.raises(ConversationError, match="'gift'"):
        resurrected("gift", np.zeros(2, np.int32), 1)
    with pytest.raises(AttentionError, match="'per_head'"):
        attention_format("per_head")
    for lookup in (prune_when, new_token_brightness, resurrection_anchors):
        with pytest.raises(ValueError, match="'sometimes'"):
            lookup("sometimes")

"""Every number that means something, in one place, with its default.

A :class:`Settings` is made of sections (:class:`Sampling`, :class:`Pruning`,
:class:`Brightness`, :class:`Search`, :class:`Recall`, :class:`Server`, :class:`Chat`),
each holding the numbers of one concern (:mod:`.sections`).  The core modules take a
Settings (or the few fields they need); the UI persists it with QSettings and the
benchmarks override fields on the command line, both by each setting's flat name
(``max_context_tokens``), which is unique across the sections.  The multiple-choice
settings' words are :mod:`.choices`; where the app keeps its files, :mod:`.places`.
"""

from ..rules import Choice
from ..rules.brightness_rules import MAX_BRIGHTNESS
from .choices import CHOICES, PRUNING_FIELDS, Scoring, choice, choice_values, choice_words, scoring_words
from .places import SETTINGS_FILE, cache_dir, config_dir, data_dir, log_dir, settings_file
from .sections import (
    DEFAULT_SYSTEM_PROMPT,
    Brightness,
    Chat,
    Pruning,
    Recall,
    Sampling,
    Search,
    Server,
    Settings,
    with_notes_tool,
    without_notes_tool,
)

__all__ = [
    "CHOICES", "DEFAULT_SYSTEM_PROMPT", "MAX_BRIGHTNESS", "PRUNING_FIELDS", "SETTINGS_FILE",
    "Brightness", "Chat", "Choice", "Pruning", "Recall", "Sampling", "Scoring", "Search", "Server", "Settings",
    "cache_dir", "choice", "choice_values", "choice_words", "config_dir", "data_dir", "log_dir",
    "scoring_words", "settings_file", "with_notes_tool", "without_notes_tool",
]

"""Settings persisted with QSettings, and the checks both the dialog and loading use.

Every setting is stored under the ``settings/`` group by its flat name
(:meth:`Settings.names`: the key is the same whichever section holds the setting).
Loading is forgiving: a value of the wrong type, out of range, or not one of the allowed
choices falls back to that field's default (the rest of the stored values still load),
so a hand-edited or older settings file never stops the app from starting; a setting
saved under an earlier name (``RENAMED_SETTINGS``) loads under today's.  A value
that was an earlier version's *default* (``LEGACY_DEFAULTS``) loads as today's default:
every field is saved, so otherwise a user who never touched it would keep the old one
(e.g. the system prompt from before the notes tool existed).
"""

from __future__ import annotations

from urllib.parse import urlparse

from PySide6.QtCore import QSettings

from ..settings import CHOICES as SETTING_CHOICES, Settings, choice_values
from ..tools.notebook import TOOL_PROMPT

ORGANIZATION = "HaloWeave"
APPLICATION = "Halo Weave"
GROUP = "settings"

#: Allowed values of the multiple-choice settings: those declared in halo_weave.settings
#: (the single source), and the chat templates.
CHOICES: dict[str, tuple[str, ...]] = {
    **{name: choice_values(name) for name in SETTING_CHOICES},
    "chat_template": ("auto", "chatml", "llama3", "mistral", "gemma", "alpaca", "plain"),
}

#: Choices an earlier version named otherwise: field -> {old value: today's value}.
RENAMED_CHOICES: dict[str, dict[str, str]] = {
    "resurrection_brightness": {"at_deletion": "at_prune"},
}

#: Settings an earlier version saved under another name: old key -> today's.  The old
#: key is read when today's is missing.
RENAMED_SETTINGS: dict[str, str] = {
    "attention_keep_share": "recall_keep_share",
}

#: Earlier versions' defaults, replaced by the current default when loaded.
LEGACY_DEFAULTS: dict[str, tuple] = {
    "system_prompt": ("You are a helpful assistant.",),
}

#: Inclusive numeric ranges: field -> (low, high).
RANGES: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 5.0),
    "top_p": (0.0, 1.0),
    "top_k": (0, 100_000),
    "rep_pen": (0.1, 10.0),
    "max_new_tokens": (1, 1_000_000),
    "sampler_seed": (-1, 2**31 - 1),
    "max_context_tokens": (0, 10_000_000),
    "server_context_tokens": (0, 10_000_000),
    "saved_caches_mb": (0, 1_000_000),
    "server_gpu_layers": (-1, 10_000),
    "min_chunk_tokens": (1, 100_000),
    "initial_brightness": (0, 1_000_000),
    "brightness_cap": (1, 1_000_000),
    "decay_per_step": (0, 1_000_000),
    "brightness_half_life": (1, 10_000_000),
    "chunk_rank_k": (1, 100_000),
    "prune_keep_recent": (0, 10_000_000),
    "highlight_fraction": (0.0, 1.0),
    "resurrection_budget_cap": (0, 10_000_000),
    "resurrection_keep_share": (0.0, 1.0),
    "recall_keep_share": (0.0, 1.0),
    "query_max_results": (1, 100_000),
    "user_similarity_boost": (0.0, 100.0),
    "min_similarity": (-1.0, 1.0),
    "hybrid_weight": (0.0, 1.0),
    "hybrid_common_share": (0.0, 1.0),
    "date_weight": (0.0, 10.0),
    "resurrect_neighbours": (0, 100),
    "neighbour_matches": (0, 100_000),
    "recall_relative_floor": (0.0, 1.0),
    "recall_max_chunks": (0, 100_000),
    "query_feedback": (0.0, 10.0),
    "query_feedback_top": (1, 1000),
    "query_hop_terms": (0, 100),
    "query_hop_weight": (0.0, 10.0),
    "speaker_weight": (0.0, 10.0),
    "session_gap_seconds": (0.0, 10_000_000.0),
    "embedding_max_tokens": (8, 100_000),
    "embed_wait_seconds": (0.0, 3600.0),
}


def default_qsettings() -> QSettings:
    """The user's settings store (organisation "HaloWeave", application "Halo Weave")."""
    return QSettings(ORGANIZATION, APPLICATION)


def url_problem(url: str) -> str | None:
    """Why ``url`` is not a usable server address, or None."""
    parsed = urlparse(url.strip())
    if parsed.scheme not in ("http", "https"):
        return "The server URL must start with http:// or https:// (e.g. http://127.0.0.1:5001)."
    if not parsed.hostname:
        return "The server URL needs a host name, e.g. http://127.0.0.1:5001."
    try:
        parsed.port  # noqa: B018 - raises on a bad port
    except ValueError:
        return "The server URL has an invalid port number."
    return None


def field_problem(name: str, value) -> str | None:
    """Why a single value is not acceptable for field ``name``, or None."""
    # The declared choices are read now, not copied at import: settings.CHOICES is the source.
    allowed = choice_values(name) if name in SETTING_CHOICES else CHOICES.get(name)
    if allowed is not None and value not in allowed:
        return f"{name} must be one of {', '.join(allowed)}."
    if name in RANGES:
        low, high = RANGES[name]
        if not low <= value <= high:
            return f"{name} must be between {low:g} and {high:g}."
    if name == "top_p" and value <= 0:
        return "Top-p must be greater than 0."
    if name == "server_url":
        return url_problem(value)
    return None


def settings_problems(settings: Settings) -> list[str]:
    """Every reason these settings cannot be used together, in words for the user."""
    problems = [p for name in Settings.names() if (p := field_problem(name, settings.value(name)))]
    limit = settings.pruning.max_context_tokens
    if limit > 0:
        if limit <= settings.sampling.max_new_tokens:
            problems.append(
                f"The context target ({limit:,} tokens) must be larger than the longest answer "
                f"({settings.sampling.max_new_tokens:,} tokens) so an answer fits; use 0 for no pruning."
            )
        if settings.pruning.min_chunk_tokens >= limit:
            problems.append(
                f"The smallest chunk ({settings.pruning.min_chunk_tokens:,} tokens) must be smaller than the "
                f"context target ({limit:,} tokens)."
            )
    return problems


def _convert(raw, default):
    """``raw`` (as QSettings returns it: often a string) as the type of ``default``."""
    if isinstance(default, bool):
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("true", "1", "yes", "on"):
            return True
        if text in ("false", "0", "no", "off"):
            return False
        raise ValueError(f"not a boolean: {raw!r}")
    if isinstance(default, int):
        if isinstance(raw, float) and not raw.is_integer():
            raise ValueError(f"not an integer: {raw!r}")
        return int(str(raw).strip()) if not isinstance(raw, (int, float)) else int(raw)
    if isinstance(default, float):
        value = float(raw)
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("not a finite number")
        return value
    if isinstance(default, str):
        if not isinstance(raw, str):
            raise ValueError(f"not text: {raw!r}")
        return raw
    raise ValueError(f"unsupported setting type {type(default).__name__}")


def load_settings(qsettings: QSettings | None = None) -> Settings:
    """Read settings; any missing or bad value falls back to its default."""
    qs = qsettings if qsettings is not None else default_qsettings()
    defaults = Settings()
    values = {}
    qs.beginGroup(GROUP)
    try:
        old_names = {new: old for old, new in RENAMED_SETTINGS.items()}
        for name in Settings.names():
            key = name if qs.contains(name) else old_names.get(name)
            if key is None or not qs.contains(key):
                continue
            default = defaults.value(name)
            try:
                value = _convert(qs.value(key), default)
            except (TypeError, ValueError):
                continue
            if value in LEGACY_DEFAULTS.get(name, ()):
                continue
            value = RENAMED_CHOICES.get(name, {}).get(value, value)
            if field_problem(name, value) is None:
                values[name] = value
    finally:
        qs.endGroup()
    settings = _notes_tool_from_prompt(defaults.replace(**values), qs)
    if settings_problems(settings):
        # Individually fine but inconsistent together: keep the budget fields safe.
        settings = settings.replace(
            max_context_tokens=defaults.pruning.max_context_tokens,
            max_new_tokens=defaults.sampling.max_new_tokens,
            min_chunk_tokens=defaults.pruning.min_chunk_tokens,
        )
    return settings


def _notes_tool_from_prompt(settings: Settings, qs: QSettings) -> Settings:
    """Settings saved before the notebook tool was a setting of its own held its
    instructions at the end of the system prompt: keep the tool on for them, and the
    prompt without the instructions (added back while the tool is on)."""
    qs.beginGroup(GROUP)
    try:
        asked = qs.contains("notes_tool")
    finally:
        qs.endGroup()
    prompt = settings.chat.system_prompt.rstrip()
    if asked or not prompt.endswith(TOOL_PROMPT.rstrip()):
        return settings
    return settings.replace(system_prompt=prompt[: -len(TOOL_PROMPT.rstrip())].rstrip(), notes_tool=True)


def save_settings(settings: Settings, qsettings: QSettings | None = None) -> None:
    """Write every field and flush to disk."""
    qs = qsettings if qsettings is not None else default_qsettings()
    qs.beginGroup(GROUP)
    try:
        for name in Settings.names():
            qs.setValue(name, settings.value(name))
    finally:
        qs.endGroup()
    qs.sync()

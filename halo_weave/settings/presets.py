"""Presets: a named system prompt with the sampling that suits it.

A few are built in (:data:`BUILT_IN`); the user's own are kept in ``presets.json`` beside
``settings.ini`` (:func:`presets_file`)::

    {"format": "halo-weave-presets", "version": 1,
     "presets": [{"name": "Pirate", "system_prompt": "You are a pirate.",
                  "sampling": {"temperature": 1.0, "top_p": 0.9}}]}

A sampling value left out of a preset is the app's default.  The file is read whole and
checked; one that cannot be read (not JSON, a wrong type, a value out of range) is never
overwritten: :attr:`PresetBook.problem` says why, its presets are not offered, and saving
a preset first moves it aside under a name of its own, so nothing in it is lost.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PresetError
from .places import config_dir
from .sections import Sampling, Settings

PRESETS_FILE = "presets.json"
FORMAT = "halo-weave-presets"
VERSION = 1
#: A presets file larger than this is refused unread (it would hold thousands of prompts).
MAX_FILE_BYTES = 4 << 20
MAX_NAME_CHARS = 80
MAX_PROMPT_CHARS = 100_000

#: The sampling a preset holds, with the values the settings accept (the settings dialog's
#: ranges, ``halo_weave.ui.settings_io.RANGES``; a test keeps the two equal).
SAMPLING_RANGES: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 5.0),
    "top_p": (0.0, 1.0),
    "top_k": (0, 100_000),
    "rep_pen": (0.1, 10.0),
    "max_new_tokens": (1, 1_000_000),
}
_WHOLE = ("top_k", "max_new_tokens")


def _defaults() -> dict[str, float | int]:
    base = Sampling()
    return {name: getattr(base, name) for name in SAMPLING_RANGES}


@dataclass(frozen=True)
class Preset:
    """A named system prompt and sampling (every field of :data:`SAMPLING_RANGES`)."""

    name: str
    system_prompt: str
    sampling: dict = field(default_factory=_defaults)
    built_in: bool = False

    @classmethod
    def of(cls, name: str, system_prompt: str, settings: Settings) -> "Preset":
        """The preset of ``system_prompt`` and the sampling in ``settings``."""
        return cls(name, system_prompt, {n: settings.value(n) for n in SAMPLING_RANGES})

    def settings(self, settings: Settings) -> Settings:
        """``settings`` with this preset's sampling."""
        return settings.replace(**self.sampling)

    def matches(self, system_prompt: str, settings: Settings) -> bool:
        """Whether ``system_prompt`` and the sampling in ``settings`` are this preset's."""
        return system_prompt.strip() == self.system_prompt.strip() and all(
            settings.value(n) == v for n, v in self.sampling.items())

    def summary(self) -> str:
        """The sampling in words, e.g. ``temperature 0.2 · top-p 0.95 · …``."""
        s = self.sampling
        top_k = "off" if s["top_k"] == 0 else f"{s['top_k']}"
        return (f"temperature {s['temperature']:g} · top-p {s['top_p']:g} · top-k {top_k} · "
                f"repetition penalty {s['rep_pen']:g} · answers up to {s['max_new_tokens']:,} tokens")


def _built_in(name: str, prompt: str, **sampling) -> Preset:
    return Preset(name, prompt, {**_defaults(), **sampling}, built_in=True)


#: The presets that come with the app.  Assistant is the app's default sampling; Coder
#: samples near-greedily (code has one right token more often than prose) with no
#: repetition penalty (code repeats names and brackets on purpose) and room for a whole
#: file; Writer samples wider, from the top-p nucleus alone.
BUILT_IN: tuple[Preset, ...] = (
    _built_in(
        "Assistant",
        "You are a helpful, honest assistant. Answer the question that was asked, clearly and "
        "directly, and keep it as short as the question allows; use a list or a table when it "
        "makes the answer easier to read. When you are not sure of something, say so instead of "
        "guessing. When a request is ambiguous, ask one short question before answering."),
    _built_in(
        "Coder",
        "You are an expert programmer and a careful reviewer. Write correct, idiomatic, readable "
        "code with the imports it needs, in fenced code blocks tagged with their language. Prefer "
        "the standard library and the simplest design that works; never invent functions or "
        "options a library does not have. Before the code, say in a sentence or two what it does "
        "and which assumptions you made; after it, name the edge cases it handles. When you are "
        "shown code with a bug, find the cause first and change only what fixes it.",
        temperature=0.2, top_p=0.95, rep_pen=1.0, max_new_tokens=1024),
    _built_in(
        "Writer",
        "You are a skilled fiction writer and editor. Write vivid, specific prose: concrete "
        "detail, varied sentences, natural dialogue; show what characters feel through what they "
        "do and say. Keep the voice, tense and point of view the user sets, and stay true to the "
        "characters, places and facts already established. When asked to edit a text, keep its "
        "author's voice and list the most important changes briefly after it.",
        temperature=0.9, top_p=0.95, top_k=0, rep_pen=1.1, max_new_tokens=768),
)


def presets_file() -> Path:
    """``presets.json`` in the config directory (beside ``settings.ini``)."""
    return config_dir() / PRESETS_FILE


def read_presets(path: Path) -> list[Preset]:
    """The user's presets in ``path`` (none when it does not exist); raises
    :class:`PresetError` saying what is wrong with a file that cannot be read."""
    path = Path(path)
    try:
        if not path.exists():
            return []
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise PresetError(f"{path.name} is {size >> 20} MB, larger than a presets file can be.")
        text = path.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise PresetError(f"{path.name} could not be read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError:
        raise PresetError(f"{path.name} is not UTF-8 text.") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PresetError(f"{path.name} is not valid JSON ({exc.msg}, line {exc.lineno}, "
                          f"column {exc.colno}).") from None
    except RecursionError:
        raise PresetError(f"{path.name} is nested too deeply.") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise PresetError(f'{path.name} is not a presets file (no "format": "{FORMAT}").')
    if not isinstance(doc.get("version"), int) or doc["version"] > VERSION:
        raise PresetError(f"{path.name} was written by a newer Halo Weave (version {doc.get('version')!r}).")
    entries = doc.get("presets")
    if not isinstance(entries, list):
        raise PresetError(f'{path.name}: "presets" must be a list.')
    presets: list[Preset] = []
    for n, entry in enumerate(entries, 1):
        preset = _checked(entry, f"{path.name}, preset {n}")
        if any(p.name.casefold() == preset.name.casefold() for p in presets):
            raise PresetError(f"{path.name}, preset {n}: the name {preset.name!r} is used twice.")
        presets.append(preset)
    return presets


def _checked(entry, where: str) -> Preset:
    if not isinstance(entry, dict):
        raise PresetError(f"{where}: expected an object.")
    name, prompt, sampling = entry.get("name"), entry.get("system_prompt"), entry.get("sampling", {})
    if not isinstance(name, str) or not name.strip():
        raise PresetError(f"{where}: it has no name.")
    where = f"{where} ({name.strip()[:MAX_NAME_CHARS]!r})"
    _check_name(name, where)
    if not isinstance(prompt, str):
        raise PresetError(f'{where}: "system_prompt" must be text.')
    if len(prompt) > MAX_PROMPT_CHARS:
        raise PresetError(f"{where}: the system prompt is longer than {MAX_PROMPT_CHARS:,} characters.")
    if not isinstance(sampling, dict):
        raise PresetError(f'{where}: "sampling" must be an object.')
    values = _defaults()
    for key, value in sampling.items():
        if key not in SAMPLING_RANGES:
            raise PresetError(f"{where}: {key!r} is not a sampling setting "
                              f"(one of {', '.join(SAMPLING_RANGES)}).")
        low, high = SAMPLING_RANGES[key]
        whole = key in _WHOLE
        if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)) or (
                not math.isfinite(value)) or not low <= value <= high:
            kind = "a whole number" if whole else "a number"
            raise PresetError(f"{where}: {key} must be {kind} from {low:g} to {high:g}, not {value!r}.")
        values[key] = int(value) if whole else float(value)
    return Preset(name.strip(), prompt, values)


def _check_name(name: str, where: str) -> None:
    if len(name.strip()) > MAX_NAME_CHARS:
        raise PresetError(f"{where}: a preset's name is at most {MAX_NAME_CHARS} characters.")
    if any(ord(c) < 32 for c in name):
        raise PresetError(f"{where}: a preset's name is one line of text.")


class PresetBook:
    """The built-in presets and the user's own, read from and saved to one file.

    Owns: the user's presets as last read (:attr:`own`) and why the file could not be read
    (:attr:`problem`, None when it could).  Every change is written at once, whole, to a
    temporary file renamed over the old one.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else presets_file()
        self.own: list[Preset] = []
        self.problem: str | None = None
        self.reload()

    def reload(self) -> None:
        """Read the file again (see :attr:`problem`)."""
        try:
            self.own, self.problem = read_presets(self.path), None
        except PresetError as exc:
            self.own = []
            self.problem = (f"Your presets could not be read: {exc} The file is left as it is "
                            "(saving a preset moves it aside first).")

    @property
    def presets(self) -> list[Preset]:
        """Every preset offered: the built-in ones, then the user's."""
        return [*BUILT_IN, *self.own]

    def find(self, name: str) -> Preset | None:
        """The preset called ``name`` (letter case ignored), or None."""
        key = name.strip().casefold()
        return next((p for p in self.presets if p.name.casefold() == key), None)

    def save(self, preset: Preset) -> str:
        """Keep ``preset`` among the user's (replacing one of the same name); returns what
        was done, in words.  Raises :class:`PresetError` for a built-in preset's name, a bad
        name, or a file that cannot be written."""
        name = preset.name.strip()
        if not name:
            raise PresetError("A preset needs a name.")
        _check_name(name, f"The name {name[:MAX_NAME_CHARS]!r}")
        if any(p.name.casefold() == name.casefold() for p in BUILT_IN):
            raise PresetError(f"{name!r} is a built-in preset's name: choose another.")
        if len(preset.system_prompt) > MAX_PROMPT_CHARS:
            raise PresetError(f"The system prompt is longer than {MAX_PROMPT_CHARS:,} characters.")
        kept = Preset(name, preset.system_prompt, dict(preset.sampling))
        moved = self._move_damaged_aside()
        replaced = any(p.name.casefold() == name.casefold() for p in self.own)
        own = [kept if p.name.casefold() == name.casefold() else p for p in self.own]
        self._write(own if replaced else [*own, kept])
        words = f"Preset {name!r} {'replaced' if replaced else 'saved'} in {self.path}."
        return f"{moved} {words}" if moved else words

    def delete(self, name: str) -> None:
        """Forget the user's preset ``name``; a built-in one cannot be deleted."""
        preset = self.find(name)
        if preset is None or preset.built_in:
            raise PresetError(f"{name!r} is {'built in' if preset else 'not a preset of yours'}: "
                              "it cannot be deleted.")
        if self.problem is not None:
            raise PresetError(self.problem)
        self._write([p for p in self.own if p is not preset])

    def _move_damaged_aside(self) -> str:
        if self.problem is None or not self.path.exists():
            return ""
        aside = self.path.with_name(f"presets.damaged-{time.strftime('%Y%m%d-%H%M%S')}.json")
        n = 1
        while aside.exists():
            n += 1
            aside = self.path.with_name(f"presets.damaged-{time.strftime('%Y%m%d-%H%M%S')}-{n}.json")
        try:
            os.replace(self.path, aside)
        except OSError as exc:
            raise PresetError(f"The unreadable {self.path.name} could not be moved aside: "
                              f"{exc.strerror or exc}. Nothing was saved.") from exc
        self.own, self.problem = [], None
        return f"The unreadable presets file was kept as {aside.name}."

    def _write(self, own: list[Preset]) -> None:
        doc = {"format": FORMAT, "version": VERSION,
               "presets": [{"name": p.name, "system_prompt": p.system_prompt, "sampling": p.sampling}
                           for p in own]}
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise PresetError(f"{self.path} could not be written: {exc.strerror or exc}") from exc
        self.own = own


__all__ = ["BUILT_IN", "PRESETS_FILE", "Preset", "PresetBook", "SAMPLING_RANGES",
           "presets_file", "read_presets"]

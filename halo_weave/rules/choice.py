"""One allowed value of a multiple-choice setting, in words for the user."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Choice:
    """One allowed value of a multiple-choice setting, in words for the user.

    ``label`` is the entry in the settings dialog, ``explanation`` its tooltip (what it
    does, plainly), ``short`` the few words the stats line and the legend use (it may
    name other fields in braces, e.g. ``{brightness_half_life}``), ``uses`` the numeric
    settings that only matter with this choice (the dialog enables them only then).
    """

    value: str
    label: str
    explanation: str
    short: str = ""
    uses: tuple[str, ...] = ()

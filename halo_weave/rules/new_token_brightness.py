"""Where a new turn's tokens start (``Settings.new_token_brightness``).

Each start is a small object with its words and ``start(scored, cap)``: the brightness
the tokens of a turn being opened get, from the live scored tokens' brightness
(``scored``, int32) and the starting brightness ``cap`` (``initial_brightness``).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from .choice import Choice


class NewTokenBrightness(Protocol):
    """What every start offers."""

    choice: Choice

    def start(self, scored: np.ndarray, cap: int) -> int:
        """The brightness a new turn's tokens start at."""


class AtCap:
    """At the starting brightness: nothing new is pruned before the model read it."""

    choice = Choice(
        "cap", "At the starting brightness (fail bright)",
        "New text starts as bright as possible, so it is never pruned before the model "
        "had a chance to read it.",
        "new text starts bright")

    def start(self, scored, cap):
        return cap


class AtMedian:
    """At the live scored tokens' median (the cap while nothing is scored)."""

    choice = Choice(
        "median", "At the live median",
        "New text starts at the median brightness of what is live: a fair chance, "
        "no head start.",
        "new text starts at the median")

    def start(self, scored, cap):
        return int(np.median(scored)) if scored.size else cap


#: Every start by its setting's value, in the order the dialog lists them.
NEW_TOKEN_BRIGHTNESS: dict[str, NewTokenBrightness] = {
    start.choice.value: start for start in (AtCap(), AtMedian())}


def new_token_brightness(name: str) -> NewTokenBrightness:
    """The start called ``name`` (a clear error for any other)."""
    try:
        return NEW_TOKEN_BRIGHTNESS[name]
    except KeyError:
        raise ValueError(f"unknown new_token_brightness {name!r}: one of {list(NEW_TOKEN_BRIGHTNESS)}") from None

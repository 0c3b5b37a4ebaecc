"""The brightness a paragraph that comes back starts with (``Settings.resurrection_brightness``).

Each rule is a small object with its words and ``values(at_prune, mean)``: the chunk's
token brightness from what it had when pruned (``at_prune``) and the mean live
brightness (``mean``).  A manual resurrection gives a number instead
(:func:`halo_weave.brightness.resurrected`).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from .choice import Choice


class ResurrectionBrightness(Protocol):
    """What every resurrection brightness offers."""

    choice: Choice

    def values(self, at_prune: np.ndarray, mean: int) -> np.ndarray:
        """The chunk's token brightness (int32) as it comes back."""


class AtPrune:
    """No gifts: the token values as they were when pruned, so the earned shape survives."""

    choice = Choice(
        "at_prune", "Brightness when pruned (no gifts)",
        "A paragraph that comes back keeps the brightness it had when it was pruned.")

    def values(self, at_prune, mean):
        return at_prune.astype(np.int32)


class AtMean:
    """Every token at the mean live brightness."""

    choice = Choice(
        "mean", "Mean live brightness",
        "A paragraph that comes back starts at the mean brightness of what is live.")

    def values(self, at_prune, mean):
        return np.full(len(at_prune), mean, np.int32)


#: Every resurrection brightness by its setting's value, in the order the dialog lists them.
RESURRECTION_BRIGHTNESS: dict[str, ResurrectionBrightness] = {
    rule.choice.value: rule for rule in (AtPrune(), AtMean())}


def resurrection_brightness(name: str) -> ResurrectionBrightness:
    """The rule called ``name`` (a clear error for any other)."""
    try:
        return RESURRECTION_BRIGHTNESS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown resurrection brightness rule {name!r}") from None

"""Brightness rules: how one generated token's attention changes the live tokens' brightness.

Each rule is a small object with its words (:class:`~.choice.Choice`) and one step,
``step(brightness, attention, threshold, settings, mask)``, applied in place per
generated token (by the conversation while an answer streams, by the reader afterwards:
:mod:`halo_weave.memory.proxy`).  ``threshold`` is the fair share of one cell
(:func:`halo_weave.brightness.vote_threshold`).  The kernels are pure numpy.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from ..errors import ConversationError
from .choice import Choice

#: The brightness cap of magnitude voting (pinned chunks sit there).
MAX_BRIGHTNESS = 10000
#: Largest score a mass rule keeps (far from int32's limit: sums never overflow).
MASS_CEILING = 1 << 30


def magnitude_vote(
    brightness: np.ndarray,
    attention: np.ndarray,
    threshold: float,
    *,
    cap: int = MAX_BRIGHTNESS,
    decay: int = 1,
    mask: np.ndarray | None = None,
) -> None:
    """Apply one step of magnitude voting to ``brightness`` (int32) in place.

    ``attention`` (float32) is aligned with ``brightness``; only rows where ``mask`` is
    true vote.  Above ``threshold``: ``+floor(a / threshold)``, capped at ``cap``;
    otherwise ``-decay`` with no floor.
    """
    # Branch-free and allocation-light (~5x faster than np.where at 30k tokens):
    # gain = above ? trunc(min(ratio, cap)) : -decay  ==  (trunc + decay) * above - decay.
    # Ratios can exceed int32 for near-zero thresholds; clip before casting.
    ratio = np.multiply(attention, np.float32(1.0 / threshold), dtype=np.float32)
    np.minimum(ratio, np.float32(cap), out=ratio)
    gain = ratio.astype(np.int32)  # truncation == floor for gains >= 0
    gain += np.int32(decay)
    np.multiply(gain, attention > threshold, out=gain)
    gain -= np.int32(decay)
    if mask is not None:
        np.multiply(gain, mask, out=gain)
    brightness += gain
    np.minimum(brightness, np.int32(cap), out=brightness)


def attention_mass(
    brightness: np.ndarray,
    attention: np.ndarray,
    threshold: float,
    *,
    unit: float,
    half_life: float = 0.0,
    mask: np.ndarray | None = None,
) -> None:
    """One step of (decayed) attention mass on ``brightness`` (int32) in place.

    Every scored token gains ``unit * a / threshold`` (rounded): ``unit`` per fair share
    of attention, with no cap, so a token the model keeps reading keeps rising instead of
    saturating.  With ``half_life`` > 0 (in generated tokens) every scored value first
    loses its share ``1 - 2**(-1/half_life)``, rounded up so it reaches 0: a token read
    long ago fades, one read now counts.  ``half_life`` 0 is the plain sum (H2O).
    """
    rows = slice(None) if mask is None else mask
    values = brightness[rows]
    gain = np.rint(np.multiply(attention[rows], np.float32(unit / threshold), dtype=np.float32))
    np.minimum(gain, np.float32(MASS_CEILING), out=gain)
    if half_life > 0:
        share = 1.0 - 2.0 ** (-1.0 / half_life)
        loss = np.ceil(values.astype(np.float32) * np.float32(share))
        np.maximum(loss, 0, out=loss)
        values = values - loss.astype(np.int32)
    values = values + gain.astype(np.int32)
    np.clip(values, 0, MASS_CEILING, out=values)
    brightness[rows] = values


class BrightnessRule(Protocol):
    """What every brightness rule offers (``settings``: the
    :class:`~halo_weave.settings.Brightness` section of the settings)."""

    choice: Choice

    def step(self, brightness: np.ndarray, attention: np.ndarray, threshold: float, settings,
             mask: np.ndarray | None = None) -> None:
        """One generated token's attention applied to ``brightness`` in place."""

    def ceiling(self, settings) -> int:
        """The highest brightness the rule gives."""


class Vote:
    """Magnitude voting, capped (:func:`magnitude_vote`)."""

    choice = Choice(
        "vote", "Magnitude votes (the seed's rule, capped)",
        "Every generated token adds to the words it reads more than their fair share "
        "(up to the cap of 10,000) and takes 1 from every other word. New text starts at "
        "the cap, so one truly read word keeps its paragraph bright. In the memory "
        "benchmark it continued conversations best.",
        "magnitude votes")

    def step(self, brightness, attention, threshold, settings, mask=None) -> None:
        magnitude_vote(brightness, attention, threshold, cap=settings.brightness_cap,
                       decay=settings.decay_per_step, mask=mask)

    def ceiling(self, settings) -> int:
        return settings.brightness_cap


class Mass:
    """Attention mass (:func:`attention_mass`): accumulated, or with a half-life."""

    def __init__(self, choice: Choice, decays: bool) -> None:
        self.choice = choice
        self.decays = decays

    def step(self, brightness, attention, threshold, settings, mask=None) -> None:
        # One fair share of attention is worth 1 while read every step: a token the
        # model keeps reading at its fair share settles at initial_brightness (decay).
        half_life = settings.brightness_half_life if self.decays else 0
        unit = settings.initial_brightness * (1.0 - 2.0 ** (-1.0 / half_life)) if half_life else 1.0
        attention_mass(brightness, attention, threshold, unit=unit, half_life=half_life, mask=mask)

    def ceiling(self, settings) -> int:
        return MASS_CEILING


#: Every brightness rule by its setting's value, in the order the dialog lists them.
BRIGHTNESS_RULES: dict[str, BrightnessRule] = {rule.choice.value: rule for rule in (
    Vote(),
    Mass(Choice(
        "decay", "Decayed attention mass (half-life)",
        "Every word collects the attention it gets; what it collected halves every "
        "half-life of generated tokens. What the model reads now counts, what it read "
        "long ago fades. No cap. It recalled more in the memory benchmark but continued "
        "conversations a little worse.",
        "decayed attention mass (half-life {brightness_half_life})",
        uses=("brightness_half_life",)), decays=True),
    Mass(Choice(
        "mass", "Accumulated attention mass (H2O)",
        "Every word adds up all the attention it ever got; nothing fades and there is "
        "no cap, so words read often early on stay bright for good.",
        "accumulated attention mass"), decays=False),
)}


def brightness_rule(name: str) -> BrightnessRule:
    """The rule called ``name`` (a clear error for any other)."""
    try:
        return BRIGHTNESS_RULES[name]
    except KeyError:
        raise ConversationError(f"unknown brightness rule {name!r}") from None

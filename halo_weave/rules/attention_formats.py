"""The shapes one token's attention travels in (``Settings.attention_format``, the
server's ``attention_format`` and a payload's ``format``).

Each format is a small object with its words, ``per_layer`` (whether the server sends
every layer's and head's row) and ``vector(values, shape)``: the payload's float32
values as one vector over the context, the mean over layers and heads
(:func:`halo_weave.brightness.decode_attention` checks the rest).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from ..errors import AttentionError
from .choice import Choice


class AttentionFormat(Protocol):
    """What every attention format offers."""

    choice: Choice
    #: True when the payload holds every layer's and head's row.
    per_layer: bool

    def vector(self, values: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """One float32 vector over the context (:class:`AttentionError` for a wrong shape)."""


class Aggregated:
    """One value per token: the server averaged its layers and heads."""

    choice = Choice(
        "aggregated", "Aggregated (one value per token; less traffic)",
        "The server averages its layers and heads and sends one value per token.")
    per_layer = False

    def vector(self, values, shape):
        if len(shape) != 1:
            raise AttentionError(f"aggregated attention needs 1 dimension, got {list(shape)}")
        return values


class PerLayer:
    """``[layers, heads, context]``: the app averages them."""

    choice = Choice(
        "per_layer", "Per layer (layers × heads × tokens)",
        "The server sends every layer's and head's attention; the app averages them.")
    per_layer = True

    def vector(self, values, shape):
        if len(shape) != 3:
            raise AttentionError(f"per_layer attention needs 3 dimensions, got {list(shape)}")
        layers, heads, ctx = shape
        # Sum over (layer, head) with a float32 matmul: far faster than .mean(axis=0)
        # on a strided view, and exact enough for voting.
        ones = np.full(layers * heads, 1.0 / (layers * heads), dtype=np.float32)
        return ones @ values.reshape(layers * heads, ctx)


#: Every attention format by its value, in the order the dialog lists them.
ATTENTION_FORMATS: dict[str, AttentionFormat] = {form.choice.value: form for form in (Aggregated(), PerLayer())}
#: The format a payload without ``format`` and a server without a setting use.
AGGREGATED = "aggregated"


def attention_format(name: str) -> AttentionFormat:
    """The format called ``name`` (:class:`AttentionError` for any other)."""
    try:
        return ATTENTION_FORMATS[name]
    except (KeyError, TypeError):
        raise AttentionError(f"unknown attention format {name!r}") from None

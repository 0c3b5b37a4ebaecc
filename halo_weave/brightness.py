"""Attention payloads in, brightness out.

Three concerns live here, all pure numpy:

* :func:`decode_attention` turns one wire payload (``per_layer`` ``[layers, heads, ctx]``
  or ``aggregated`` ``[ctx]``, base64 float32) into one float32 vector over the context,
  the mean over layers and heads.  It accepts the original fork's quirks (vectors padded
  with zeros to a multiple of 256) and rejects anything that could corrupt brightness
  (wrong size, NaN, infinities, negative probabilities) with :class:`AttentionError`.
* :func:`vote_threshold` is the fair share of one cell, which every brightness rule
  (:mod:`halo_weave.rules.brightness_rules`) measures attention against;
  :func:`chunk_scores` the chunks' scores by a rank (:mod:`halo_weave.rules.chunk_ranks`).
* :func:`resurrected` gives a chunk that comes back its brightness.
"""

from __future__ import annotations

import base64
import binascii

import numpy as np

from .errors import AttentionError, ConversationError
# The rules' kernels, importable from here too.
from .rules.brightness_rules import MASS_CEILING, attention_mass, magnitude_vote  # noqa: F401
from .rules.attention_formats import AGGREGATED, attention_format
from .rules.chunk_ranks import chunk_rank
from .rules.resurrection_brightness import resurrection_brightness

#: Largest payload we accept (float32 values): 64 layers x 64 heads x 128k context.
MAX_PAYLOAD_VALUES = 64 * 64 * 131072

#: Cells past the live length may carry at most this much attention before a padded
#: vector is treated as misaligned rather than padded.
PADDING_TOLERANCE = 1e-6

#: A row whose total is this far from 1 (or from layers x heads) is not a softmax.
SUM_TOLERANCE = 0.05


def decode_attention(payload: dict, context_length: int | None = None) -> np.ndarray:
    """Decode one ``attention`` payload into a float32 vector over the context.

    ``context_length`` is the number of live context cells the caller expects (system
    prompt + live tokens).  A longer vector whose extra cells are zero is cut to it (the
    original server pads to multiples of 256); a shorter one, or one with attention past
    the expected end, raises :class:`AttentionError`.

    >>> import base64, numpy as np
    >>> data = base64.b64encode(np.array([0.5, 0.5, 0.0], "<f4").tobytes()).decode()
    >>> decode_attention({"format": "aggregated", "shape": [3], "data": data}, 2).tolist()
    [0.5, 0.5]
    """
    if not isinstance(payload, dict):
        raise AttentionError(f"attention payload is {type(payload).__name__}, not an object")
    fmt = payload.get("format", AGGREGATED)
    encoding = payload.get("encoding", "base64")
    dtype = payload.get("dtype", "float32")
    if encoding != "base64" or dtype != "float32":
        raise AttentionError(f"unsupported attention encoding {encoding!r}/{dtype!r}")
    shape = _shape(payload.get("shape"))
    count = int(np.prod(shape))
    if count > MAX_PAYLOAD_VALUES:
        raise AttentionError(f"attention payload of {count} values is too large")

    raw = _b64(payload.get("data"))
    if len(raw) != count * 4:
        raise AttentionError(
            f"attention data has {len(raw)} bytes, shape {list(shape)} needs {count * 4}"
        )
    values = np.frombuffer(raw, dtype="<f4")

    vector = np.asarray(attention_format(fmt).vector(values, shape), dtype=np.float32)
    if not np.isfinite(vector).all():
        raise AttentionError("attention contains NaN or infinity")
    if vector.size and vector.min() < 0.0:
        raise AttentionError("attention contains negative values")

    if context_length is not None:
        vector = _fit_length(vector, context_length)
    total = float(vector.sum(dtype=np.float64))
    if vector.size and abs(total - 1.0) > SUM_TOLERANCE:
        raise AttentionError(f"attention sums to {total:.3f}, not 1: not a softmax row")
    return vector


def _shape(shape) -> tuple[int, ...]:
    if not isinstance(shape, (list, tuple)) or not shape:
        raise AttentionError(f"attention shape {shape!r} is not a list of sizes")
    dims = []
    for dim in shape:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0 or dim > 1 << 24:
            raise AttentionError(f"attention shape {shape!r} has an invalid size")
        dims.append(dim)
    return tuple(dims)


def _b64(data) -> bytes:
    if not isinstance(data, str):
        raise AttentionError("attention data is not a base64 string")
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise AttentionError(f"attention data is not valid base64: {exc}") from None


def _fit_length(vector: np.ndarray, context_length: int) -> np.ndarray:
    if vector.size < context_length:
        raise AttentionError(
            f"attention covers {vector.size} cells but the context has {context_length}"
        )
    if vector.size > context_length:
        tail = vector[context_length:]
        if float(tail.max()) > PADDING_TOLERANCE:
            raise AttentionError(
                f"attention covers {vector.size} cells with weight past the "
                f"context's {context_length}: misaligned, not padded"
            )
        vector = vector[:context_length]
    return vector


def vote_threshold(attention: np.ndarray) -> float:
    """The fair share of one cell once the sink is set aside: ``(1 - sink) / (n - 1)``.

    The sink is the largest value wherever it sits (not assumed to be index 0).
    """
    n = attention.size
    if n < 2:
        return float("inf")
    sink = float(attention.max())
    return max((1.0 - sink) / (n - 1), np.finfo(np.float32).tiny)


def chunk_scores(brightness: np.ndarray, starts: np.ndarray, rank: str = "peak", k: int = 4) -> np.ndarray:
    """One score per run of rows starting at ``starts``, by the chunk rank called ``rank``
    (:data:`halo_weave.rules.CHUNK_RANKS`: its peak, its top-``k`` mean, or its mean).

    >>> chunk_scores(np.array([1, 9, 3, 5, 5], np.int32), np.array([0, 3]), "topk", 2).tolist()
    [6, 5]
    >>> chunk_scores(np.array([1, 9, 3, 5, 4], np.int32), np.array([0, 3]), "mean").tolist()
    [4, 4]
    """
    if len(starts) == 0:
        return np.zeros(0, np.int32)
    return chunk_rank(rank).scores(brightness, starts, k)


def resurrected(rule: str | int, at_prune: np.ndarray, mean: int) -> np.ndarray:
    """A resurrected content chunk's brightness: by the rule called ``rule``
    (:data:`halo_weave.rules.RESURRECTION_BRIGHTNESS`: ``"at_prune"``, no gifts, the
    token-level values as they were when pruned, so the earned shape survives; ``"mean"``,
    the mean live brightness) or a number (manual resurrection uses 10000)."""
    if isinstance(rule, (int, np.integer)):
        return np.full(len(at_prune), int(rule), np.int32)
    try:
        chosen = resurrection_brightness(rule)
    except ValueError as exc:
        raise ConversationError(str(exc)) from None
    return chosen.values(at_prune, mean)

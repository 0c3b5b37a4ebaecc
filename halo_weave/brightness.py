"""Attention payloads in, brightness out.

Three concerns live here, all pure numpy:

* :func:`decode_attention` turns one wire payload (``per_layer`` ``[layers, heads, ctx]``
  or ``aggregated`` ``[ctx]``, base64 float32) into one float32 vector over the context,
  the mean over layers and heads.  It accepts the original fork's quirks (vectors padded
  with zeros to a multiple of 256) and rejects anything that could corrupt brightness
  (wrong size, NaN, infinities, negative probabilities) with :class:`AttentionError`.
* :func:`magnitude_vote` is magnitude voting, the app's original rule: per generated
  token, every scored token whose attention beats its fair share gains
  ``floor(a / threshold)`` (capped), every other scored token loses a flat ``decay``.
* :func:`resurrected` gives a chunk that comes back its brightness.
"""

from __future__ import annotations

import base64
import binascii

import numpy as np

from .errors import AttentionError, ConversationError
from .settings import MAX_BRIGHTNESS

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
    fmt = payload.get("format", "aggregated")
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

    if fmt == "per_layer":
        if len(shape) != 3:
            raise AttentionError(f"per_layer attention needs 3 dimensions, got {list(shape)}")
        layers, heads, ctx = shape
        # Sum over (layer, head) with a float32 matmul: far faster than .mean(axis=0)
        # on a strided view, and exact enough for voting.
        ones = np.full(layers * heads, 1.0 / (layers * heads), dtype=np.float32)
        vector = ones @ values.reshape(layers * heads, ctx)
    elif fmt == "aggregated":
        if len(shape) != 1:
            raise AttentionError(f"aggregated attention needs 1 dimension, got {list(shape)}")
        vector = values
    else:
        raise AttentionError(f"unknown attention format {fmt!r}")

    vector = np.asarray(vector, dtype=np.float32)
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


#: Brightness rules (``Settings.brightness_rule``): magnitude voting, an
#: exponentially decayed attention mass, and the accumulated mass (H2O's heavy hitters).
RULES = ("vote", "decay", "mass")
#: How a chunk is scored for pruning (``Settings.chunk_rank``): its brightest token, the
#: mean of its ``chunk_rank_k`` brightest tokens, or the mean of all its tokens.
CHUNK_RANKS = ("peak", "topk", "mean")
#: Where new tokens start (``Settings.new_token_brightness``): at the cap ("fail
#: bright", the original rule) or at the live median (a fair chance, not a head start).
NEW_TOKEN_RULES = ("cap", "median")
#: Largest score a mass rule keeps (far from int32's limit: sums never overflow).
MASS_CEILING = 1 << 30


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


def chunk_scores(brightness: np.ndarray, starts: np.ndarray, rank: str = "peak", k: int = 4) -> np.ndarray:
    """One score per run of rows starting at ``starts``: its peak, its top-``k`` mean, or
    its mean (attention per token).

    >>> chunk_scores(np.array([1, 9, 3, 5, 5], np.int32), np.array([0, 3]), "topk", 2).tolist()
    [6, 5]
    >>> chunk_scores(np.array([1, 9, 3, 5, 4], np.int32), np.array([0, 3]), "mean").tolist()
    [4, 4]
    """
    if rank == "peak" or len(starts) == 0:
        return np.maximum.reduceat(brightness, starts) if len(starts) else np.zeros(0, np.int32)
    if rank == "mean":
        counts = np.diff(np.append(starts, len(brightness)))
        sums = np.add.reduceat(brightness.astype(np.int64), starts)
        return (sums // counts).astype(np.int32)
    if rank != "topk":
        raise ValueError(f"unknown chunk rank {rank!r}")
    n = len(brightness)
    counts = np.diff(np.append(starts, n))
    chunk_of = np.repeat(np.arange(len(starts)), counts)
    order = np.lexsort((-brightness.astype(np.int64), chunk_of))  # by chunk, brightest first
    within = np.arange(n) - starts[chunk_of]  # rank inside the chunk (order keeps chunks in place)
    top = within < k
    sums = np.bincount(chunk_of[top], weights=brightness[order][top].astype(np.float64),
                       minlength=len(starts))
    return (sums // np.minimum(counts, k)).astype(np.int32)


def resurrected(rule: str | int, at_prune: np.ndarray, mean: int) -> np.ndarray:
    """A resurrected content chunk's brightness: ``"at_prune"`` (no gifts: token-level
    values as they were when pruned, so the earned shape survives), ``"mean"`` (the mean
    live brightness) or a number (manual resurrection uses 10000)."""
    count = len(at_prune)
    if isinstance(rule, (int, np.integer)):
        return np.full(count, int(rule), np.int32)
    if rule == "mean":
        return np.full(count, mean, np.int32)
    if rule == "at_prune":
        return at_prune.astype(np.int32)
    raise ConversationError(f"unknown resurrection brightness rule {rule!r}")

"""Next-token sampling: repetition penalty, temperature, top-k, top-p, seeded.

KoboldCPP semantics where they matter to a client: ``top_k`` 0 means the whole
vocabulary, ``rep_pen`` below 1 is treated as 1, and a ``sampler_seed`` of 0 or less
means "pick one" (the seed actually used is reported so a run can be repeated).
Temperature 0 is greedy.  NumPy only, so the llama.cpp engine never imports torch;
logits may be a NumPy array or anything ``np.asarray`` accepts.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass

import numpy as np

from .errors import RequestError

#: How many of the most recent tokens the repetition penalty looks at (KoboldCPP default).
DEFAULT_REP_PEN_RANGE = 320

#: Largest seed we hand to the generator (seeds are reported back in done events as JSON ints).
MAX_SEED = 2**31 - 1


@dataclass(frozen=True)
class SamplerSettings:
    """Sampling parameters of one generation request."""

    temperature: float = 0.7
    top_p: float = 0.9
    top_k: int = 40
    rep_pen: float = 1.1
    rep_pen_range: int = DEFAULT_REP_PEN_RANGE
    seed: int = -1


class Sampler:
    """Picks tokens from logits; deterministic for a given seed and history."""

    def __init__(self, config: SamplerSettings) -> None:
        self.config = config
        self.seed = config.seed if config.seed > 0 else secrets.randbelow(MAX_SEED) + 1
        self._generator = np.random.default_rng(self.seed)

    def pick(self, logits, history: list[int]) -> int:
        """The next token id given 1-D ``logits`` and the ids so far (prompt included)."""
        cfg = self.config
        logits = np.array(logits, dtype=np.float64, copy=True).reshape(-1)
        if cfg.rep_pen > 1.0 and history and cfg.rep_pen_range != 0:
            recent = history[-cfg.rep_pen_range :] if cfg.rep_pen_range > 0 else history
            ids = np.fromiter(set(recent), dtype=np.int64)
            scores = logits[ids]
            logits[ids] = np.where(scores > 0, scores / cfg.rep_pen, scores * cfg.rep_pen)
        if cfg.temperature <= 0:
            return int(np.argmax(logits))

        logits = logits / cfg.temperature
        if 0 < cfg.top_k < logits.size:
            ids = np.argpartition(-logits, cfg.top_k - 1)[: cfg.top_k]
        else:
            ids = np.arange(logits.size)
        ids = ids[np.argsort(-logits[ids], kind="stable")]
        values = logits[ids]
        probs = np.exp(values - values[0])
        probs /= probs.sum()
        if 0 < cfg.top_p < 1:
            # Keep the smallest prefix whose mass reaches top_p (always at least one token).
            keep = int(np.searchsorted(np.cumsum(probs), cfg.top_p)) + 1
            probs = probs[:keep] / probs[:keep].sum()
            ids = ids[:keep]
        return int(ids[self._generator.choice(len(ids), p=probs)])


def sampler_settings(temperature, top_p, top_k, rep_pen, rep_pen_range, seed) -> SamplerSettings:
    """Validated :class:`SamplerSettings` from request values, or :class:`RequestError`."""

    checks = {
        "temperature": (temperature, float),
        "top_p": (top_p, float),
        "top_k": (top_k, int),
        "rep_pen": (rep_pen, float),
        "rep_pen_range": (rep_pen_range, int),
        "sampler_seed": (seed, int),
    }
    for name, (value, kind) in checks.items():
        ok_types = (int, float) if kind is float else (int,)
        if isinstance(value, bool) or not isinstance(value, ok_types):
            raise RequestError(f"{name} must be a{'n integer' if kind is int else ' number'}")
        if kind is float and not math.isfinite(value):
            raise RequestError(f"{name} must be finite")
    if temperature < 0 or top_p < 0 or top_k < 0 or rep_pen < 0:
        raise RequestError("temperature, top_p, top_k and rep_pen must not be negative")
    return SamplerSettings(
        temperature=float(temperature),
        top_p=float(top_p),
        top_k=int(top_k),
        rep_pen=max(float(rep_pen), 1.0),
        rep_pen_range=int(rep_pen_range),
        seed=int(seed),
    )

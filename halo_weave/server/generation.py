"""One generation: the token loop, its records, and its abort switch.

Created by :meth:`halo_weave.server.engine_base.EngineBase.generate`, which holds the engine's
lock for it; the lock is released when the generation finishes, fails, is closed or is
garbage-collected, so an abandoned iterator never wedges the server.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from .sampling import Sampler, SamplerSettings

log = logging.getLogger("halo_weave.server")


@dataclass(frozen=True)
class GenerationRequest:
    """A validated generation request."""

    input_ids: list[int]
    max_length: int
    sampler: SamplerSettings
    stop_sequences: tuple[str, ...] = ()
    stop_ids: frozenset[int] = frozenset()
    attention: bool = True
    per_layer: bool = False
    request_id: str | None = None


@dataclass
class TokenRecord:
    """One generated token.

    ``text`` is ``""`` while the token's bytes end inside a UTF-8 character (the token
    completing it carries the character).  ``attention`` is ``None`` when not requested,
    else float32 ``[context]`` (aggregated) or ``[layers, heads, context]`` (per_layer),
    ``context = prompt_tokens + index``.
    """

    token_id: int
    text: str
    attention: np.ndarray | None
    index: int


@dataclass
class DoneRecord:
    """How a generation ended, with counts and timings (seconds).

    ``kv`` says how the prompt met the cache (a :meth:`SyncReport.as_dict
    <halo_weave.server.kv_surgery.SyncReport.as_dict>`): reused, dropped, inserted,
    restored and re-run token counts.
    """

    finish_reason: str  # "stop" (stop token or stop sequence), "length", "abort"
    prompt_tokens: int
    reused_prefix_tokens: int
    processed_prompt_tokens: int
    generated_tokens: int
    sampler_seed: int
    stop_sequence: str | None = None
    prefill_s: float = 0.0
    sync_s: float = 0.0  # of prefill_s: making the cache hold the prompt but its last token
    time_to_first_token_s: float = 0.0
    decode_s: float = 0.0
    tokens_per_s: float = 0.0
    total_s: float = 0.0
    #: Before ``total_s``: the wait for the model (a read-ahead stopping, a restore ending).
    waited_s: float = 0.0
    request_id: str | None = None
    kv: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)


class Generation:
    """Iterator of :class:`TokenRecord` followed by exactly one :class:`DoneRecord`.

    It runs on what it is given, not on the engine (which imports this module): ``kv``,
    the context cache (``sync(ids, should_stop=…)`` -> a report or None, ``step(ids,
    attention=…, per_layer=…)`` -> (logits, attention row)), and ``text``, the engine's
    token text (``stream()`` -> a piece stream with ``push(token) -> str``).
    """

    def __init__(self, kv, text, request: GenerationRequest, release: Callable, waited_s: float = 0.0) -> None:
        self.kv = kv
        self.waited_s = waited_s  # the generate's wait for the model, reported in the done record
        self.text = text
        self.request = request
        self._release = release
        self._abort = threading.Event()
        self._finished = False
        self._records = self._run()

    def __iter__(self) -> Iterator[TokenRecord | DoneRecord]:
        return self

    def __next__(self) -> TokenRecord | DoneRecord:
        if self._finished:
            raise StopIteration
        try:
            return next(self._records)
        except BaseException:
            self._finish()
            raise

    def abort(self) -> None:
        """Stop after the current token; the iterator still ends with a DoneRecord."""
        self._abort.set()

    @property
    def aborted(self) -> bool:
        return self._abort.is_set()

    def close(self) -> None:
        """Stop now and release the model (no DoneRecord)."""
        self._abort.set()
        try:
            self._records.close()
        finally:
            self._finish()

    def __del__(self) -> None:
        if not self._finished:
            self.close()

    def _finish(self) -> None:
        if not self._finished:
            self._finished = True
            self._release(self)

    def _run(self) -> Iterator[TokenRecord | DoneRecord]:
        started = time.perf_counter()
        req, kv = self.request, self.kv
        ids = req.input_ids
        sampler = Sampler(req.sampler)

        def done(reason: str, **extra) -> DoneRecord:
            return DoneRecord(
                finish_reason=reason,
                prompt_tokens=len(ids),
                reused_prefix_tokens=report.reused if report else 0,
                processed_prompt_tokens=(report.computed if report else 0) + int(ran_last),
                generated_tokens=generated,
                sampler_seed=sampler.seed,
                request_id=req.request_id,
                kv=report.as_dict() if report else {},
                waited_s=round(self.waited_s, 4),
                **extra,
            )

        # Everything but the last prompt token runs without attention output; the last
        # one runs alone with it, so the first generated token has attention as well.
        generated, ran_last = 0, False
        reserve = getattr(kv, "reserve", None)  # a cache that can grow to fit the request
        if reserve is not None:
            reserve(len(ids) + req.max_length, should_stop=self._abort.is_set)
        report = kv.sync(ids[:-1], should_stop=self._abort.is_set)
        synced = time.perf_counter()
        if report is None:
            yield done("abort")
            return
        logits, row = kv.step(ids[-1:], attention=req.attention, per_layer=req.per_layer)
        ran_last = True
        prefill_s = time.perf_counter() - started

        pieces = self.text.stream()
        history = list(ids)
        longest_stop = max((len(s) for s in req.stop_sequences), default=0)
        recent = ""
        finish, matched = "length", None
        first_at = last_at = None
        for index in range(req.max_length):
            if self._abort.is_set():
                finish = "abort"
                break
            token = sampler.pick(logits, history)
            if token in req.stop_ids:
                finish = "stop"
                break
            piece = pieces.push(token)
            yield TokenRecord(token, piece, row, index)
            generated += 1
            last_at = time.perf_counter()
            first_at = first_at or last_at
            history.append(token)
            if longest_stop:
                recent += piece
                matched = next((s for s in req.stop_sequences if s in recent), None)
                if matched is not None:
                    finish = "stop"
                    break
                recent = recent[-(longest_stop - 1) :] if longest_stop > 1 else ""
            if index == req.max_length - 1 or self._abort.is_set():
                finish = "length" if not self._abort.is_set() else "abort"
                break
            logits, row = kv.step([token], attention=req.attention, per_layer=req.per_layer)

        ended = time.perf_counter()
        ttft = (first_at or ended) - started
        decode_s = (last_at - first_at) if first_at and last_at else 0.0
        yield done(
            finish,
            stop_sequence=matched,
            prefill_s=round(prefill_s, 4),
            sync_s=round(synced - started, 4),
            time_to_first_token_s=round(ttft, 4),
            decode_s=round(decode_s, 4),
            tokens_per_s=round((generated - 1) / decode_s, 3) if decode_s > 0 else 0.0,
            total_s=round(ended - started, 4),
        )
        # The answer is out and the server is idle until the next request (which waits
        # for the lock meanwhile): pack the cache now, so the next one's new tokens and
        # answer attend over the live context, not the holes prunes left (llama.cpp).
        pack(kv)


def pack(kv) -> bool:
    """Pack a cache that can be packed (llama.cpp's ``compact``) while the model is idle;
    whether it was.  A failure is logged, never raised: the cache resets itself and the
    next request re-runs its prompt."""
    compact = getattr(kv, "compact", None)
    if compact is None:
        return False
    try:
        return bool(compact())
    except Exception:  # noqa: BLE001 - what was asked of the model is already done
        log.exception("compacting the KV cache failed")
        return False

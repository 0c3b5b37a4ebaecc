"""The answer being streamed: how far it got, how fast, and how it ended."""

from __future__ import annotations

import time

from ..core.stream_clock import StreamClock


class OpenAnswer:
    """The open answer's progress, started anew for each answer (``session.answer``).

    Owns: ``streamed`` (tokens of the open answer, all its rounds), ``clock`` (its live
    speed: started when the user asks, ticked per token), ``resumed`` (a Continue of the
    last answer), ``stop_ids`` (the token ids that end an answer and are dropped, from the
    connection's framing), whether attention came with its tokens and how many
    attention payloads failed, and the last answer's ``tokens_per_s`` and
    ``finish_reason``.
    """

    def __init__(self) -> None:
        self.clock = StreamClock()
        self.streamed = 0
        self.resumed = False
        self.stop_ids: set[int] = set()
        self.attention_seen = False
        self.attention_errors = 0
        self.tokens_per_s = 0.0
        self.finish_reason = ""
        self._started = 0.0

    def asked(self) -> None:
        """The user asked: nothing streamed yet and the clock runs (speed counts from here)."""
        self.streamed = 0
        self.clock.start()

    def start(self, *, resumed: bool = False) -> None:
        """A new answer opens (``resumed``: a Continue of the last one)."""
        self.resumed = resumed
        self.streamed = 0
        self._started = time.monotonic()
        self.attention_seen = False
        self.attention_errors = 0

    def added(self, tokens: int = 1) -> None:
        """``tokens`` joined the answer (a streamed token, or a tool step's)."""
        self.streamed += tokens

    def finish(self, reason: str, rate: float | None = None) -> None:
        """The answer ended with ``reason``; ``rate``: the server's tokens per second, if it said."""
        elapsed = max(time.monotonic() - self._started, 1e-6)
        self.clock.stop()
        self.tokens_per_s = float(rate) if rate else (self.clock.tokens_per_s or self.streamed / elapsed)
        self.finish_reason = reason

    @property
    def added_nothing(self) -> bool:
        """A Continue to which the model added nothing (its ``stop``: the answer had ended)."""
        return self.resumed and self.streamed == 0 and self.finish_reason == "stop"

    def forget_speed(self) -> None:
        """Another conversation opened: the speed figures were the previous one's."""
        self.tokens_per_s = 0.0
        self.clock = StreamClock()

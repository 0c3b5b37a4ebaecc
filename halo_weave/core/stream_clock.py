"""The speed of an answer while it streams: time to first token and tokens per second.

Qt-free; the turn starts the clock when the user sends (so the time to first token is
the wait the user sees: tokenizing, memory search, prefill), each streamed token ticks
it, and the end of the turn stops it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class StreamClock:
    """Timestamps of one answer (``time.monotonic`` seconds)."""

    started: float | None = None
    first: float | None = None
    last: float | None = None
    tokens: int = 0
    running: bool = False

    def start(self, now: float | None = None) -> None:
        """The user asked for an answer (send, continue, regenerate)."""
        self.started = time.monotonic() if now is None else now
        self.first = self.last = None
        self.tokens = 0
        self.running = True

    def token(self, now: float | None = None) -> None:
        """A token arrived."""
        now = time.monotonic() if now is None else now
        if self.first is None:
            self.first = now
        self.last = now
        self.tokens += 1

    def stop(self) -> None:
        """The answer ended; the figures stay readable."""
        self.running = False

    @property
    def first_token_s(self) -> float | None:
        """Seconds from the request to the first token (None before it)."""
        if self.started is None or self.first is None:
            return None
        return max(self.first - self.started, 0.0)

    @property
    def tokens_per_s(self) -> float | None:
        """Tokens after the first over the time since the first (None before two)."""
        if self.first is None or self.last is None or self.tokens < 2 or self.last <= self.first:
            return None
        return (self.tokens - 1) / (self.last - self.first)

"""What the first message after reopening waits for, as a timeline (the app part of :mod:`bench.resume`).

A :class:`Timeline` watches one reopening in the real window from the moment the
conversation opens: the server reading its context back (the warm-up: the saved cache
read, else a prefill), the memory loading (the embedder and the index), each read-ahead
while the message is typed, then, from Enter, every phase the window names under the chat
("searching memory…", "choosing what came back…", "reading N tokens…") until the first
token.  Each phase has a start and an end in milliseconds from the opening;
:func:`draw` writes them as text lines with a bar each, so a slow first answer shows where
its time went.
"""

from __future__ import annotations

import time

#: Width of the bars of :func:`draw`, in characters.
BAR_WIDTH = 48
#: What the window's phase line (``turn_phase``) is called here; "" after Enter: tokenizing.
AT_ENTER = "tokenizing the message"
#: The memory loading on the embedder thread (a message sent meanwhile waits: "loading memory…").
MEMORY = "memory: the index loaded"
#: From the message saved (and shown) until the answer's request starts.
SAVED = "message saved, the request being built"


class Timeline:
    """Phases of one reopening (see the module docstring).  Call :meth:`poll` from the
    event loop (the read-aheads and the memory are polled), :meth:`enter` at Enter and
    :meth:`first_token` when it arrives; :attr:`phases` is the result, in start order."""

    def __init__(self, controller, opened: float) -> None:
        self.controller = controller
        self.opened = opened
        self.phases: list[dict] = []
        self._open: dict[str, tuple[float, str]] = {}
        self._read_aheads = 0
        self._entered = False
        self._answered = False  # the first token came: the window's later phase lines are the answer's
        self._at_enter: str | None = None  # the window's phase running since Enter
        controller.signals.warm_up_changed.connect(self._warm_up)
        controller.signals.turn_phase.connect(self._turn_phase)
        self.begin(MEMORY)

    def now_ms(self) -> float:
        return round(1000 * (time.perf_counter() - self.opened), 1)

    def begin(self, name: str, note: str = "") -> None:
        if name not in self._open:
            self._open[name] = (self.now_ms(), note)

    def end(self, name: str, note: str | None = None) -> None:
        started = self._open.pop(name, None)
        if started is not None:
            self.phases.append({"phase": name, "start_ms": started[0], "end_ms": self.now_ms(),
                                "note": started[1] if note is None else note})

    def mark(self, name: str, note: str = "") -> None:
        at = self.now_ms()
        self.phases.append({"phase": name, "start_ms": at, "end_ms": at, "note": note})

    def poll(self) -> None:
        c = self.controller
        if c.session.recall.index is not None and not c.memory.loading:
            # The index (its vectors from the file); MiniLM itself loads at the first search.
            self.end(MEMORY)
        reading = c.ahead.reading_ahead and not c.ahead.warming_up
        name = f"read-ahead {self._read_aheads + 1}"
        if reading and not self._entered:
            self.begin(name)
        elif name in self._open:
            self._read_aheads += 1
            self.end(name)

    def _warm_up(self, tokens: int) -> None:
        if tokens > 0:
            self.begin("warm-up: the server reads the context", f"{tokens:,} tokens")
            return
        warm = self.controller.ahead.last_warm_up or {}
        how = (f"{warm.get('restored', 0):,} read back from the saved cache, {warm.get('ran', 0):,} run"
               if warm else "failed")
        if warm.get("reason"):
            how += f" ({warm['reason']})"
        if warm.get("seconds") is not None:
            how += f"; server {1000 * float(warm['seconds']):.0f} ms"
        self.end("warm-up: the server reads the context", how)

    def enter(self) -> None:
        self.poll()
        for name in [n for n in self._open if n.startswith("read-ahead")]:
            self.end(name, "still running at Enter")
        self._entered = True
        self.mark("Enter")

    def _turn_phase(self, _message: str, line: str) -> None:
        if not self._entered or self._answered:
            return
        if not line:  # an empty line: the send itself, the message saved, or the answer showing
            line = (AT_ENTER if self._at_enter is None else "" if self._at_enter.startswith("reading")
                    else SAVED)
        elif line.startswith("reading") and self.controller.ahead.warming_up:
            line += " (the warm-up, which the message waits for)"
        if line == self._at_enter:
            return
        if self._at_enter is not None:
            self.end(self._at_enter)
        self._at_enter = line or None
        if line:
            self.begin(line)

    def first_token(self) -> None:
        if self._at_enter is not None:
            self.end(self._at_enter)
            self._at_enter = None
        self._answered = True
        self.mark("first token")

    def annotate(self, prefix: str, note: str) -> None:
        """Add ``note`` to the last phase whose name starts with ``prefix`` (e.g. the
        server's own figures, known once the answer is done)."""
        for phase in reversed(self.phases):
            if phase["phase"].startswith(prefix):
                phase["note"] = "; ".join(n for n in (phase["note"], note) if n)
                return

    def close(self) -> None:
        """Stop watching; phases still open end now (marked so)."""
        for name in list(self._open):
            self.end(name, "still running")
        signals = self.controller.signals
        for signal, slot in ((signals.warm_up_changed, self._warm_up), (signals.turn_phase, self._turn_phase)):
            try:
                signal.disconnect(slot)
            except (RuntimeError, TypeError):
                pass
        self.phases.sort(key=lambda p: (p["start_ms"], p["end_ms"]))


def draw(phases: list[dict], title: str) -> list[str]:
    """Text lines of a timeline: start and end in ms from the opening, a bar on a common
    scale, the phase and its note."""
    if not phases:
        return [title, "  (nothing recorded)"]
    span = max(p["end_ms"] for p in phases) or 1.0
    lines = [title]
    for p in phases:
        start, end = p["start_ms"], p["end_ms"]
        first = int(BAR_WIDTH * start / span)
        last = max(first + 1, int(round(BAR_WIDTH * end / span)))
        bar = (" " * first + ("|" if start == end else "#" * (last - first))).ljust(BAR_WIDTH)
        when = f"{start:8.0f}" if start == end else f"{start:8.0f} - {end:6.0f}"
        note = f" ({p['note']})" if p.get("note") else ""
        lines.append(f"  {when:>17} ms  {bar}  {p['phase']}{note}")
    return lines

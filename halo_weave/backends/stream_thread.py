"""Reading a server's stream on a thread of its own, so that Stop never waits for it.

A server still reading a long prompt sends nothing, often not even its response headers
(seen with a real llama-server: the headers come with the first token, after 30-115 s of
prompt on two busy cores).  The thread waiting for them cannot be woken: there is no
response to close yet.  :func:`read_on_thread` lets the consumer stop waiting when
``give_up()`` says so; the reading thread ends by itself when the server answers (the
stream sees the abort and closes the connection, and the server stops).  Qt-free.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")

#: Seconds between checks of ``give_up`` while nothing arrives.
POLL_S = 0.1

_END = object()


def read_on_thread(source: Iterator[T], give_up: Callable[[], bool], *, name: str = "halo-weave-stream") -> Iterator[T]:
    """Yield ``source``'s items, read on a daemon thread; stop when ``give_up()`` is true
    while nothing arrives.  An exception of ``source`` is raised here."""
    items: queue.Queue = queue.Queue()

    def pump() -> None:
        try:
            for item in source:
                items.put((item, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            items.put((_END, exc))
            return
        items.put((_END, None))

    threading.Thread(target=pump, daemon=True, name=name).start()
    while True:
        try:
            item, error = items.get(timeout=POLL_S)
        except queue.Empty:
            if give_up():
                return
            continue
        if item is _END:
            if error is not None:
                raise error
            return
        yield item

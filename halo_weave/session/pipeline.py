"""A turn's steps in order, Qt-free: the one pipeline the window and the benchmarks drive.

The window (:mod:`halo_weave.ui.control.message`, :mod:`halo_weave.ui.control.turn`)
calls each step when its thread, timer or signal says so; a script calls :meth:`TurnPipeline.send`
and :meth:`TurnPipeline.answer`, which run the same steps in the same order, blocking::

    message = pipeline.read(text, answer_prefix)  tokenize (the window: on a thread)
    if pipeline.searches():                       an index, and chunks in the graveyard
        matches = index.search(text)              (the window: on the embedder's thread)
        pipeline.recall(message, index, matches)  bring back within the budget
        if pipeline.weighs(message):              keep the part most relevant to it
            pipeline.keep(message, pipeline.ranking(message)())   (ranking: embedder thread)
    else:
        pipeline.recall(message, index, [])       nothing to search: nothing comes back
    pipeline.save(message)                        DB-first (a long message: on a thread)
    pipeline.saved(message)                       queued for indexing, the model's window fitted
    pipeline.open_answer(message.prefix)          the assistant turn opens
    request = pipeline.request()                  the live context and the sampler settings
    for event in token_events(backend.stream(**request), backend):
        pipeline.receive(event)                   attention, append, save every 16
    pipeline.finish(reason, rate)                 save, queue indexing, prune

The rules themselves are :class:`~halo_weave.session.ChatSession`'s and its parts'; this
module owns their order.  What the window adds around them (tool rounds, Stop, waiting
for indexing to land, read-ahead) is the window's.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ..conversation import Chunk, Turn
from ..events import TokenEvent, token_events

log = logging.getLogger("halo_weave.session")


@dataclass
class Message:
    """One user message on its way through a turn: what each step made of it."""

    text: str
    ids: list[int]
    texts: list[str]
    #: The tokens the answer starts with (a prefill), as (id, text) pairs.
    prefix: list[tuple[int, str]] = field(default_factory=list)
    created_at: float | None = None
    #: What the message brought back from memory and kept, the most relevant first.
    recalled: list[Chunk] = field(default_factory=list)
    #: The saved user turn (None until :meth:`TurnPipeline.save`).
    turn: Turn | None = None
    #: Chunks pruned so that prompt and answer fit the model's window, once saved.
    fitted: list[Chunk] = field(default_factory=list)
    #: Seconds each blocking step took when :meth:`TurnPipeline.send` ran them
    #: ("read", "search", "recall", "weigh", "save").
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass
class Answered:
    """What :meth:`TurnPipeline.answer` streamed: the request, the backend's stream (its
    tokens and ``done`` event, where it has them), the turn's end, and when each part
    happened (``time.perf_counter``)."""

    request: dict
    stream: Any
    end: Any
    requested_at: float
    sent_at: float
    first_token_at: float | None
    ended_at: float
    finished_at: float

    @property
    def tokens(self) -> list[TokenEvent]:
        """The events the stream kept (empty for a stream that keeps none)."""
        return list(getattr(self.stream, "tokens", []))


class TurnPipeline:
    """The steps of a turn, in order, over one :class:`~halo_weave.session.ChatSession`
    (``session.pipeline``).  Owns no state: a message's state travels in its :class:`Message`."""

    def __init__(self, session) -> None:
        self._session = session

    # ------------------------------------------------------------------ the message
    def read(self, text: str, answer_prefix: str = "") -> Message:
        """Tokenize the message and the answer's given start with the server's tokenizer
        (blocking: the window runs it on a thread)."""
        server = self._session.server
        pieces = server.tokenize(text)
        return Message(text, [int(i) for i, _ in pieces], [t for _, t in pieces],
                       [(int(i), t) for i, t in server.tokenize(answer_prefix)])

    def searches(self) -> bool:
        """Whether a search for the message could bring anything back (else :meth:`recall`
        with no matches)."""
        return self._session.recall.can_recall()

    def recall(self, message: Message, index, matches) -> list[Chunk]:
        """Bring back what the search on ``index`` found for ``message`` (its ``matches``;
        none: nothing comes back), within the budget; the chunks, best match first."""
        message.recalled = self._session.recall.recall_for(index, matches, len(message.ids))
        return message.recalled

    def weighs(self, message: Message) -> bool:
        """Whether the message keeps only the part of its recall most relevant to it."""
        return self._session.recall.keeps_part(message.recalled)

    def ranking(self, message: Message) -> Callable[[], list[int]]:
        """The blocking call that ranks the message's recall (for the embedder's thread)."""
        return self._session.recall.ranking(message.recalled, message.text)

    def keep(self, message: Message, order: list[int]) -> list[Chunk]:
        """Keep the most relevant of the recall by ``order`` (:meth:`ranking`'s answer);
        the rest goes back to the graveyard.  The chunks kept."""
        message.recalled = self._session.recall.keep_ranked(order)
        return message.recalled

    def save(self, message: Message) -> Turn:
        """Save the user turn with what it recalled (DB-first; safe on a worker thread).
        Raises when the save fails, the conversation as it was before."""
        session = self._session
        message.turn = session.save_user_message(message.ids, message.texts, message.created_at,
                                                 recalled=message.recalled)
        return message.turn

    def saved(self, message: Message) -> list[Chunk]:
        """The message is saved: queue it for indexing, then make prompt and answer fit
        the model's window; the chunks that pruned (on the thread that owns the queue)."""
        session = self._session
        session.index_user_message(message.turn)
        message.fitted = session.fit_model_window()
        return message.fitted

    # ------------------------------------------------------------------ the answer
    def open_answer(self, prefix: Iterable[tuple[int, str]] = (), *, role: str = "assistant",
                    created_at: float | None = None) -> None:
        """Open the answer's turn, ``prefix`` (a prefill) at its start."""
        self._session.begin_answer(prefix, role=role, created_at=created_at)

    def request(self) -> dict:
        """The next round's request: the live context (with its recall note) and the sampler."""
        return self._session.generation_request()

    def receive(self, event: TokenEvent) -> bool:
        """One streamed token: brightness moves, then it joins; False when dropped."""
        return self._session.receive(event)

    def finish(self, reason: str, rate: float | None = None, *, prune: bool = True):
        """Close the answer: save it, queue indexing, prune (``prune=False``: not yet)."""
        return self._session.finish_turn(reason, rate, prune=prune)

    # ------------------------------------------------------------------ blocking, for scripts
    def send(self, text: str, search: Callable[[str], list] | None = None, *, answer_prefix: str = "") -> Message:
        """From Enter to the saved message in one blocking call, every step as the window
        runs it; ``search(text)``: the index's matches (None: the message searches nothing)."""
        clock = _Clock()
        message = self.read(text, answer_prefix)
        clock.lap(message, "read")
        index = self._session.recall.index
        if search is None or not self.searches():
            self.recall(message, index, [])
        else:
            matches = search(text)
            clock.lap(message, "search")
            self.recall(message, index, matches)
            clock.lap(message, "recall")
            if self.weighs(message):
                self._weigh(message)
                clock.lap(message, "weigh")
        self.save(message)
        self.saved(message)
        clock.lap(message, "save")
        return message

    def _weigh(self, message: Message) -> None:
        try:
            order = self.ranking(message)()
        except Exception as err:  # noqa: BLE001 - the message keeps all it recalled
            log.warning("what came back was not ranked: %s", err)
            return
        self.keep(message, order)

    def answer(self, backend=None, *, prefix: Iterable[tuple[int, str]] = (), role: str = "assistant",
               created_at: float | None = None, prune: bool = True, **stream_args) -> Answered:
        """Stream the answer to the conversation as it stands, blocking: open it, request,
        receive every token, finish (``prune=False``: the exchange goes on).  ``backend``:
        the session's by default; ``stream_args`` go to its ``stream`` beside the request.
        No tool rounds: a ``<tool>`` call stays text."""
        backend = backend if backend is not None else self._session.backend
        self.open_answer(prefix, role=role, created_at=created_at)
        request = self.request()
        requested = time.perf_counter()
        stream = backend.stream(**request, **stream_args)
        sent = time.perf_counter()
        first = None
        for event in token_events(stream, backend):
            first = first or time.perf_counter()
            self.receive(event)
        ended = time.perf_counter()
        done = getattr(stream, "done", None)  # a stream without one ended by itself
        reason, rate = (done.finish_reason, done.tokens_per_s) if done is not None else ("stop", None)
        end = self.finish(reason, rate, prune=prune)
        return Answered(request, stream, end, requested, sent, first, ended, time.perf_counter())


class _Clock:
    """Seconds between the steps of :meth:`TurnPipeline.send`."""

    def __init__(self) -> None:
        self._last = time.perf_counter()

    def lap(self, message: Message, step: str) -> None:
        now = time.perf_counter()
        message.seconds[step] = now - self._last
        self._last = now

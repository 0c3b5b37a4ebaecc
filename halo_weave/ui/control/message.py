"""The user's message, from Enter until it is saved: tokenize, search, resurrect, save.

The steps are :class:`~halo_weave.session.TurnPipeline`'s (``session.pipeline``), the
same the benchmarks run; :class:`MessageSend` decides only *when*, on which thread (see
:mod:`halo_weave.app` for the whole turn).
Stop gives a message back to the input box until it is saved; a long message (more than
:data:`SAVE_ON_THREAD_TOKENS`) is saved on a thread and can no longer be given back.
QtCore only.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import QObject, QTimer, Signal

from .calls import Calls
from .gate import Gate
from .link import ServerLink
from .memory import Memory
from .signals import ControlSignals

log = logging.getLogger("halo_weave.app")

#: A step that may take longer than this shows progress (milliseconds).
PROGRESS_AFTER_MS = 1000

#: A user turn with more tokens than this is saved on a thread (a 1M-token paste took
#: 14 s to save on the UI thread, with the window frozen).
SAVE_ON_THREAD_TOKENS = 20_000


class MessageSend(QObject):
    """Sends the user's message: from the box to the conversation's file.

    Owns: the message being sent until it is saved (:attr:`sending`) and the number of
    the last one (a step of a message Stop gave back is dropped), whether a long message
    is being saved on a thread, and the rest of the send waiting for indexing to land
    (with its timer).

    Signals: ``started()`` when a message starts on its way; ``saved(prefix)`` once it is
    saved and shown, with the tokens its answer starts with.
    """

    started = Signal()
    saved = Signal(object)

    def __init__(self, session, signals: ControlSignals, gate: Gate, calls: Calls, memory: Memory,
                 link: ServerLink, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._session, self._signals, self._gate, self._calls = session, signals, gate, calls
        self._memory, self._link = memory, link
        self._unsent = ""  # the message being sent, until it is saved
        self._turn_seq = 0  # numbers each message sent: a step of one Stop gave back is dropped
        self._saving_turn = False  # a long message is being saved on a thread
        self._pending_send = None  # the rest of send(), waiting for indexing to land
        self._wait_timer = QTimer(self)
        self._wait_timer.setSingleShot(True)
        self._wait_timer.timeout.connect(self._run_pending_send)
        memory.idle.connect(self._on_embed_idle)

    @property
    def sending(self) -> bool:
        """A message is on its way and not saved yet (Stop applies)."""
        return bool(self._unsent)

    def take_back(self) -> bool:
        """Stop: a message not saved yet goes back to the box at once (the tokenize or
        search still under way finds its turn gone when it ends); False when there is
        none, or it is being saved already."""
        if not self._unsent or self._saving_turn:
            return False
        self._turn_seq += 1
        self._wait_timer.stop()
        self._pending_send = None
        self._session.answer.clock.stop()
        self._gate.set_busy(False)
        unsent, self._unsent = self._unsent, ""
        self._signals.message_returned.emit(unsent)
        self._signals.turn_finished.emit("aborted")
        return True

    def send(self, text: str, answer_prefix: str = "") -> bool:
        """Start a turn with the user's message; False when it cannot start now.

        ``answer_prefix`` is put at the start of the answer before the model goes on
        (a prefill; a tool call in it runs first), e.g. for scripted demos and tests.
        """
        text = text.strip()
        reason = self._gate.input_block_reason()
        if not text or reason:
            if reason:
                self._signals.info.emit(reason)
            return False
        self._unsent = text  # first: Stop applies from here (the window asks when busy changes)
        self._turn_seq += 1
        seq = self._turn_seq
        self.started.emit()
        self._gate.set_busy(True, "Reading your message…")
        self._session.answer.asked()
        self._signals.turn_phase.emit(text, "")
        finish = self._progress_after_a_second(f"Reading your message ({len(text):,} characters)")
        self._calls.run(
            self._session.pipeline.read, text, answer_prefix,
            on_ok=lambda message: (finish(), self._after_tokenize(message, seq=seq)),
            on_fail=lambda exc: (finish(), None if self._stale(seq) else
                                 self.failed_early(exc, "Tokenizing your message")),
        )
        return True

    def _progress_after_a_second(self, what: str):
        """Show indeterminate progress for ``what`` if it is still going after a second;
        returns the function that ends it."""
        state = {"shown": False, "done": False}

        def show() -> None:
            if not state["done"]:
                state["shown"] = True
                self._signals.progress.emit(what, 0, 0)

        def finish() -> None:
            state["done"] = True
            if state["shown"]:
                self._signals.progress.emit(what, 1, 1)

        QTimer.singleShot(PROGRESS_AFTER_MS, show)
        return finish

    def _after_tokenize(self, message, seq: int | None = None) -> None:
        if self._stale(seq):
            return
        text = message.text
        self._pending_send = lambda: self._resurrect_then_add(message, seq)
        if (self._memory.loading or self._memory.index is not None) and self._memory.pending > 0:
            # Let the previous exchange's embeddings land, but not for long.
            what = "loading memory" if self._memory.loading else "finishing memory indexing"
            self._gate.set_busy(True, what.capitalize() + "…")
            self._signals.turn_phase.emit(text, what + "…")
            self._wait_timer.start(int(self._session.settings.search.embed_wait_seconds * 1000))
        else:
            self._run_pending_send()

    def _on_embed_idle(self) -> None:
        if self._wait_timer.isActive():
            self._wait_timer.stop()
            self._run_pending_send()

    def _run_pending_send(self) -> None:
        action, self._pending_send = self._pending_send, None
        if action is not None:
            action()

    def _resurrect_then_add(self, message, seq: int | None = None) -> None:
        if self._stale(seq):
            return
        index = self._memory.index  # loaded on first use
        pipeline = self._session.pipeline
        if not pipeline.searches():
            pipeline.recall(message, index, [])  # nothing to search: nothing recalled
            self._add_user_turn(message)
            return
        self._gate.set_busy(True, "Searching memory…")
        self._signals.turn_phase.emit(message.text, "searching memory…")
        # The query embedding is the slow part: it runs on the embedder thread, ahead of
        # queued indexing; planning and resurrecting touch the conversation, so they run here.
        self._memory.search(message.text, lambda matches, exc: self._resurrect(index, matches, message, seq))

    def _resurrect(self, index, matches, message, seq: int | None = None) -> None:
        if self._stale(seq):
            return
        pipeline = self._session.pipeline
        recalled = pipeline.recall(message, index, matches)
        if recalled:
            self._signals.graveyard_changed.emit()
        if not pipeline.weighs(message):
            self._add_user_turn(message)
            return
        # What came back is ranked by its relevance to the message, and the least relevant
        # goes back (halo_weave.memory.relevance); the embedding runs on the embedder's thread.
        self._gate.set_busy(True, "Choosing what came back…")
        self._signals.turn_phase.emit(message.text, "choosing what came back…")

        def ranked(order) -> None:
            if self._stale(seq):
                return
            if len(pipeline.keep(message, order)) < len(recalled):
                self._signals.graveyard_changed.emit()
            self._add_user_turn(message)

        def not_ranked(exc) -> None:
            if self._stale(seq):
                return
            # Not worth an error: the message keeps all it recalled.
            log.warning("what came back was not ranked: %s", exc)
            self._add_user_turn(message)

        self._memory.run(pipeline.ranking(message), on_ok=ranked, on_fail=not_ranked)

    def _add_user_turn(self, message) -> None:
        """Save the message (and what its search recalled), then answer it."""
        pipeline = self._session.pipeline
        tokens = len(message.ids)
        if tokens > SAVE_ON_THREAD_TOKENS:
            self._saving_turn = True  # past the point where Stop can give it back
            self._gate.set_busy(True, f"Saving your message ({tokens:,} tokens)…")
            finish = self._progress_after_a_second(f"Saving your message ({tokens:,} tokens)")
            self._calls.run(
                pipeline.save, message,
                on_ok=lambda turn: (finish(), self._user_turn_saved(message)),
                on_fail=lambda exc: (finish(), self._user_turn_not_saved(exc)),
            )
            return
        try:
            pipeline.save(message)  # DB-first: persisted before it is shown
        except BaseException as exc:  # noqa: BLE001 - MemoryError too: the message goes back
            self._user_turn_not_saved(exc)
            return
        self._user_turn_saved(message)

    def _user_turn_not_saved(self, exc) -> None:
        self._saving_turn = False
        # Not on disk, so not shown and not answered: the message goes back to the input
        # box; the session has put the conversation back to what the file holds.
        signals = self._signals
        for changed in (signals.conversation_changed, signals.graveyard_changed, signals.stats_changed):
            changed.emit()
        self.failed_early(exc, "Saving your message")

    def _user_turn_saved(self, message) -> None:
        self._unsent, self._saving_turn = "", False
        if self._session.pipeline.saved(message):
            self._signals.graveyard_changed.emit()
        # Saved: the message (and any resurrection) shows now, before the server reads it.
        self._signals.tokens_streamed.emit()
        self._signals.turn_phase.emit("", "")
        self.saved.emit(message.prefix)

    def _stale(self, seq: int | None) -> bool:
        """Whether a step of the message ``seq`` comes after Stop gave that message back."""
        return seq is not None and seq != self._turn_seq

    def failed_early(self, exc, context: str) -> None:
        """The turn ends before its answer started: the message goes back to the box."""
        self._gate.set_busy(False)
        unsent, self._unsent = self._unsent, ""
        if unsent:
            self._signals.message_returned.emit(unsent)  # before the error, which says it was kept
        if not self._link.connection.explains_failure():  # else the server's stop is the message
            self._signals.error.emit(exc, context)
        self._signals.turn_finished.emit("error")

    def shutdown(self) -> None:
        """Quitting: a send waiting for indexing is dropped."""
        self._wait_timer.stop()

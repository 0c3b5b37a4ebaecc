"""A turn as the controller runs it: the user's message, the streamed answer, tool rounds.

A mixin of :class:`~halo_weave.app.TurnController`; every rule is a method of
:class:`~halo_weave.session.ChatSession`, this decides only *when*, on which thread:

* the message: tokenize once on a thread → let pending embeddings land (≤
  ``embed_wait_seconds``) → search on the embedder thread → the session resurrects within
  the budget, saves and queues the user turn before it is shown, makes room in the
  model's window;
* the answer, one *round* per streamed request (the answer, and each continuation after
  a tool call): a :class:`~halo_weave.ui.workers.GenerationWorker` reads the stream and
  each typed token event reaches :meth:`ChatSession.receive
  <halo_weave.session.ChatSession.receive>` on the UI thread (attention, recording,
  append, a save every 16); the view hears ``tokens_streamed``; Stop aborts;
* a round ending on a ``<tool>…</tool>`` call: the notebook runs it on a thread
  (:meth:`halo_weave.tools.notebook.ToolRunner.process_answer`), the session appends the
  result and saves changed notes (``notes_changed``), the next round starts while the
  runner says so (at most ``notebook.MAX_ROUNDS`` calls);
* the end: :meth:`ChatSession.finish_turn <halo_weave.session.ChatSession.finish_turn>`
  (save, queue indexing, prune), then the signals.

Each round with "Record attention" on becomes one capture folder (``docs/capture-format.md``).
"""

from __future__ import annotations

import logging

from PySide6.QtCore import QTimer

from ..errors import BackendTimeout, BackendUnavailable, GenerationAborted, StreamInterrupted
from ..session.read_ahead import unread
from ..tools import notebook
from .workers import GenerationWorker

log = logging.getLogger("halo_weave.app")

#: Folder under the data dir where attention captures go.
CAPTURES_FOLDER = "captures"

#: A step that may take longer than this shows progress (milliseconds).
PROGRESS_AFTER_MS = 1000

#: A user turn with more tokens than this is saved on a thread (a 1M-token paste took
#: 14 s to save on the UI thread, with the window frozen).
SAVE_ON_THREAD_TOKENS = 20_000


class TurnFlow:
    """From the send button to the end of the answer."""

    @property
    def generating(self) -> bool:
        """True while an answer streams (Stop applies)."""
        return self._gen is not None

    @property
    def stoppable(self) -> bool:
        """True while Stop applies: from Enter to the end of the answer."""
        return self._gen is not None or bool(self._unsent) or self._after_warm_up is not None

    @property
    def capture_dir(self):
        """Where "Record attention" writes its capture folders."""
        return self.data_dir / CAPTURES_FOLDER

    def _start_generation(self, continuation: bool = False) -> None:
        """Open the answer (or continue it after a tool call) and stream from the server."""
        session = self.session
        if not continuation:
            prefix, self._answer_prefix = self._answer_prefix, ()
            session.begin_answer(prefix)
            if prefix:
                self.tokens_streamed.emit()
                if session.rounds.has_tool_call():
                    self._run_tools("stop", None)  # the given start of the answer holds a tool call
                    return
        request = session.generation_request()
        ids = request["input_ids"]
        self.turn_phase.emit("", f"reading {unread(self._server_has, ids):,} tokens…")
        self._server_has = ids
        session.rounds.start_capture(self.capture_dir, request, self.path)
        worker = GenerationWorker(session.backend, request, parent=self)
        worker.token.connect(self._on_token)
        worker.completed.connect(self._on_stream_completed)
        worker.failed.connect(self._on_stream_failed)
        self._gen = worker
        self._set_busy(True, "The model is answering — Esc stops")
        # The view appends new rows and rebuilds by itself when rows came back or left.
        self.tokens_streamed.emit()
        worker.start()
        if self._stop_pending:  # Esc pressed while the message was being prepared
            self.stop()

    def _on_token(self, event) -> None:
        if self.session.receive(event):
            if self.session.answer.streamed == 1:
                self.turn_phase.emit("", "")  # the answer itself shows now
            self.tokens_streamed.emit()

    def stop(self) -> None:
        """Stop the turn in whatever phase it is: an answer being generated ends (what
        arrived so far is kept); a message still being read or searched for goes back to
        the input box; a saved message waiting for the server to read the conversation
        stays, unanswered."""
        if self._gen is not None:
            self._set_busy(True, "Stopping…")
            self._gen.stop()
        elif self._after_warm_up is not None:
            self._after_warm_up = None
            self._stopped_before_answer()
        elif self._unsent and not self._saving_turn:
            # Not saved yet: it goes back at once; the tokenize or search still under way
            # finds its turn gone when it ends (see _stale).
            self._turn_seq += 1
            self._wait_timer.stop()
            self._pending_send = None
            self._give_back_message()
        elif self.busy:
            self._stop_pending = True  # a long message being saved: it stops once saved

    def _stopped_before_answer(self) -> None:
        """The turn ends without an answer (Stop before the answer started)."""
        self._stop_pending = False
        self.session.answer.clock.stop()
        self._set_busy(False)
        self.stats_changed.emit()
        self.turn_finished.emit("aborted")

    def _give_back_message(self) -> None:
        """Stop before the message was saved: the turn ends, the message goes back to the box."""
        self._stop_pending = False
        self.session.answer.clock.stop()
        self._set_busy(False)
        unsent, self._unsent = self._unsent, ""
        if unsent:
            self.message_returned.emit(unsent)
        self.turn_finished.emit("aborted")

    def _stale(self, seq: int | None) -> bool:
        """Whether a step of the message ``seq`` comes after Stop gave that message back."""
        return seq is not None and seq != self._turn_seq

    def _on_stream_completed(self, done) -> None:
        self.last_done = done  # the server's account of the last answer (kv, timings): scripts, tests
        reason = getattr(done, "finish_reason", "stop") or "stop"
        if reason == "abort" or (self._gen is not None and self._gen.stopping):
            reason = "aborted"
        self._finish_capture(reason)
        rate = getattr(done, "tokens_per_s", None)
        if reason != "aborted" and self.session.rounds.has_tool_call():
            self._run_tools(reason, rate)
            return
        self._finish_turn(reason, rate)

    def _on_stream_failed(self, exc) -> None:
        if isinstance(exc, GenerationAborted) or (self._gen is not None and self._gen.stopping):
            self._finish_capture("aborted")
            self._finish_turn("aborted", None)
            return
        self._finish_capture("error")
        self._finish_turn("error", None)
        if self.connection.explains_failure():
            return  # the bundled server stopped: its own message says so, and it restarts
        self.error.emit(exc, "Generating the answer")
        if isinstance(exc, (BackendUnavailable, StreamInterrupted, BackendTimeout)):
            self.connection.lost()

    def _finish_turn(self, reason: str, rate) -> None:
        worker, self._gen = self._gen, None
        if worker is not None:
            worker.wait(5000)
            worker.deleteLater()
        self._server_has = self.session.server.warm_up_ids()  # the prompt and the answer (before a prune)
        end = self.session.finish_turn(reason, rate, prune=not self._proxy_prunes_after_read())
        if end.turn is None:
            self._set_busy(False)
            return
        if end.nothing_added:
            self.info.emit("The model had nothing to add: the answer had ended by itself. "
                           "↻ Regenerate gives another answer.")
        self._read_exchange()  # proxy attention, on a thread (a no-op where the server sends attention)
        if end.attention_changed:
            self._announce_attention(True)
        if end.pruned:
            self.graveyard_changed.emit()
        self._set_busy(False)
        if self._system_dirty:
            self._system_dirty = False
            self._sync_system_prompt()
        (self.conversation_changed if end.pruned else self.tokens_streamed).emit()
        self.stats_changed.emit()
        self.turn_finished.emit(reason)
        if self.client is not None and self.client.saves_cache:  # llama-server: its slot, for a reopening
            self._call(self.session.server.save_cache,
                       on_fail=lambda exc: log.info("saving the server's cache failed: %s", exc))

    def _turn_failed_early(self, exc, context: str) -> None:
        self._set_busy(False)
        unsent, self._unsent = self._unsent, ""
        if unsent:
            self.message_returned.emit(unsent)  # before the error, which says it was kept
        if not self.connection.explains_failure():  # else the server's stop is the message
            self.error.emit(exc, context)
        self.turn_finished.emit("error")

    def _finish_capture(self, reason: str) -> None:
        path = self.session.rounds.finish_capture(reason)
        if path is not None:
            self.capture_saved.emit(str(path))

    # ------------------------------------------------------------------ the user's message
    def send(self, text: str, answer_prefix: str = "") -> bool:
        """Start a turn with the user's message; False when it cannot start now.

        ``answer_prefix`` is put at the start of the answer before the model goes on
        (a prefill; a tool call in it runs first), e.g. for scripted demos and tests.
        """
        text = text.strip()
        reason = self.input_block_reason()
        if not text or reason:
            if reason:
                self.info.emit(reason)
            return False
        self._unsent = text  # first: Stop applies from here (the window asks when busy changes)
        self._turn_seq += 1
        seq = self._turn_seq
        self._stop_pending = False
        self._set_busy(True, "Reading your message…")
        self.session.answer.asked()
        self.turn_phase.emit(text, "")
        session = self.session

        def tokenize():
            return session.tokenize(text), session.tokenize(answer_prefix)

        finish = self._progress_after_a_second(f"Reading your message ({len(text):,} characters)")
        self._call(
            tokenize,
            on_ok=lambda pieces: (finish(), self._after_tokenize(text, *pieces, seq=seq)),
            on_fail=lambda exc: (finish(), None if self._stale(seq) else
                                 self._turn_failed_early(exc, "Tokenizing your message")),
        )
        return True

    def _progress_after_a_second(self, what: str):
        """Show indeterminate progress for ``what`` if it is still going after a second;
        returns the function that ends it."""
        state = {"shown": False, "done": False}

        def show() -> None:
            if not state["done"]:
                state["shown"] = True
                self.progress.emit(what, 0, 0)

        def finish() -> None:
            state["done"] = True
            if state["shown"]:
                self.progress.emit(what, 1, 1)

        QTimer.singleShot(PROGRESS_AFTER_MS, show)
        return finish

    def _after_tokenize(self, text: str, pieces, prefix=(), seq: int | None = None) -> None:
        if self._stale(seq):
            return
        ids = [int(i) for i, _ in pieces]
        texts = [t for _, t in pieces]
        self._answer_prefix = list(prefix)
        self._pending_send = lambda: self._resurrect_then_add(text, ids, texts, seq)
        if (self._memory_loading or self.index is not None) and self._indexer.pending > 0:
            # Let the previous exchange's embeddings land, but not for long.
            what = "loading memory" if self._memory_loading else "finishing memory indexing"
            self._set_busy(True, what.capitalize() + "…")
            self.turn_phase.emit(text, what + "…")
            self._wait_timer.start(int(self.settings.embed_wait_seconds * 1000))
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

    def _resurrect_then_add(self, text: str, ids: list[int], texts: list[str], seq: int | None = None) -> None:
        if self._stale(seq):
            return
        index = self.index  # loaded on first use
        if not self.session.recall.can_resurrect():
            self.session.recall.skip()
            self._add_user_turn(ids, texts)
            return
        self._set_busy(True, "Searching memory…")
        self.turn_phase.emit(text, "searching memory…")
        # The query embedding is the slow part: it runs on the embedder thread, ahead of
        # queued indexing; planning and resurrecting touch the conversation, so they run here.
        self._indexer.search(text, lambda matches, exc: self._resurrect(index, matches, ids, texts, seq))

    def _resurrect(self, index, matches, ids, texts, seq: int | None = None) -> None:
        if self._stale(seq):
            return
        recalled = self.session.recall.resurrect_for(index, matches, len(ids))
        if recalled:
            self.graveyard_changed.emit()
        self._add_user_turn(ids, texts, recalled)

    def _add_user_turn(self, ids: list[int], texts: list[str], recalled=()) -> None:
        """Save the message (and what its search ``recalled``), then answer it."""
        session = self.session
        if len(ids) > SAVE_ON_THREAD_TOKENS:
            self._saving_turn = True  # past the point where Stop can give it back
            self._set_busy(True, f"Saving your message ({len(ids):,} tokens)…")
            finish = self._progress_after_a_second(f"Saving your message ({len(ids):,} tokens)")
            self._call(
                session.save_user_message, ids, texts, None, recalled,
                on_ok=lambda turn: (finish(), self._user_turn_saved(turn)),
                on_fail=lambda exc: (finish(), self._user_turn_not_saved(exc)),
            )
            return
        try:
            turn = session.save_user_message(ids, texts, recalled=recalled)  # DB-first: persisted before it is shown
        except BaseException as exc:  # noqa: BLE001 - MemoryError too: the message goes back
            self._user_turn_not_saved(exc)
            return
        self._user_turn_saved(turn)

    def _user_turn_not_saved(self, exc) -> None:
        self._saving_turn = False
        # Not on disk, so not shown and not answered: the message goes back to the input
        # box; the session has put the conversation back to what the file holds.
        for changed in (self.conversation_changed, self.graveyard_changed, self.stats_changed):
            changed.emit()
        self._turn_failed_early(exc, "Saving your message")

    def _user_turn_saved(self, turn) -> None:
        self._unsent, self._saving_turn = "", False
        self.session.index_user_message(turn)
        if self.session.fit_model_window():
            self.graveyard_changed.emit()
        # Saved: the message (and any resurrection) shows now, before the server reads it.
        self.tokens_streamed.emit()
        self.turn_phase.emit("", "")
        if self._stop_pending:
            self._stopped_before_answer()
            return
        self.when_warm(self._start_generation)

    # ------------------------------------------------------------------ tool rounds
    def _run_tools(self, reason: str, rate) -> None:
        """Run the answer's tool calls on a thread, append the results, maybe go on."""
        worker, self._gen = self._gen, None
        if worker is not None:
            worker.wait(5000)
            worker.deleteLater()
        self._set_busy(True, "Running the model's notebook tool…")
        session, store = self.session, self.store
        text = session.rounds.answer_text()
        if self._tool_runner is None:
            self._tool_runner = notebook.ToolRunner()
        runner = self._tool_runner
        try:
            notes = store.load_tool_data(notebook.NOTES_NAME)
        except Exception as exc:  # noqa: BLE001
            self.error.emit(exc, "Reading the notes")
            self._finish_turn(reason, rate)
            return

        def job():
            step = runner.process_answer(text, notes, hit_stop=reason == "stop")
            return step, session.tokenize(step.prefix_text), session.tokenize(step.result_text)

        def ok(outcome) -> None:
            step = outcome[0]
            if session.rounds.apply_tool_step(*outcome):
                self.notes_changed.emit()
            self.tokens_streamed.emit()
            if step.continue_generation and self.client is not None:
                self._start_generation(continuation=True)
            else:
                self._finish_turn(reason, rate)

        def fail(exc) -> None:
            self.error.emit(exc, "Running a tool call")
            self._finish_turn(reason, rate)

        self._call(job, on_ok=ok, on_fail=fail)

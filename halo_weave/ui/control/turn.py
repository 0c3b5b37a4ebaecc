"""A turn's answer as the controller runs it: the streamed answer, tool rounds, Stop.

The steps are :class:`~halo_weave.session.TurnPipeline`'s (``session.pipeline``), the
same the benchmarks run; :class:`TurnFlow` decides only *when*, on which thread:

* the message (:class:`~.message.MessageSend`): tokenize once on a thread → let pending
  embeddings land (≤ ``embed_wait_seconds``) → search on the embedder thread → the
  session resurrects within the budget, saves and queues the user turn before it is
  shown, makes room in the model's window; then this answers it;
* the answer, one *round* per streamed request (the answer, and each continuation after
  a tool call): a :class:`~.workers.GenerationWorker` reads the stream and
  each typed token event reaches :meth:`TurnPipeline.receive
  <halo_weave.session.TurnPipeline.receive>` on the UI thread (attention, recording,
  append, a save every 16); the view hears ``tokens_streamed``; Stop aborts;
* a round ending on a ``<tool>…</tool>`` call: the notebook runs it on a thread
  (:meth:`halo_weave.tools.notebook.ToolRunner.process_answer`), the session appends the
  result and saves changed notes (``notes_changed``), the next round starts while the
  runner says so (at most ``notebook.MAX_ROUNDS`` calls);
* the end: :meth:`TurnPipeline.finish <halo_weave.session.TurnPipeline.finish>`
  (save, queue indexing, prune), then the signals.

Each round with "Record attention" on becomes one capture folder (``docs/capture-format.md``).
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QObject

from ...errors import BackendTimeout, BackendUnavailable, GenerationAborted, StreamInterrupted
from ...tools import notebook
from .calls import Calls
from .files import ConversationFiles
from .gate import Gate
from .link import ServerLink
from .message import MessageSend
from .prompt import PromptUpkeep
from .proxy import ProxyReading
from .ahead import ReadAhead
from .signals import ControlSignals
from .workers import GenerationWorker

log = logging.getLogger("halo_weave.app")

#: Folder under the data dir where attention captures go.
CAPTURES_FOLDER = "captures"


class TurnFlow(QObject):
    """From the saved message to the end of the answer; Stop in every phase.

    Owns: the stream in flight (its :class:`~.workers.GenerationWorker`), whether Stop
    was pressed before the answer started, the notebook's tool runner, where captures
    go (:attr:`capture_dir`), and :attr:`last_done` (the server's account of the last
    answer).  The message before
    its answer is :class:`~.message.MessageSend`'s; this answers it once it is saved.
    """

    def __init__(self, data_dir: Path, session, signals: ControlSignals, gate: Gate, calls: Calls,
                 prompt: PromptUpkeep, ahead: ReadAhead, proxy: ProxyReading, link: ServerLink,
                 files: ConversationFiles, message: MessageSend, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._data_dir = Path(data_dir)
        self._session, self._signals, self._gate, self._calls = session, signals, gate, calls
        self._prompt, self._ahead, self._proxy, self._link, self._files = prompt, ahead, proxy, link, files
        self._message = message
        message.started.connect(self._message_sent)
        message.saved.connect(self._message_saved)
        self._gen: GenerationWorker | None = None
        self._stop_pending = False  # Esc before the answer started
        self._tool_runner = None
        #: The server's account of the last answer (kv, timings): scripts, tests.
        self.last_done = None

    @property
    def generating(self) -> bool:
        """True while an answer streams (Stop applies)."""
        return self._gen is not None

    @property
    def stoppable(self) -> bool:
        """True while Stop applies: from Enter to the end of the answer."""
        return self._gen is not None or self._message.sending or self._ahead.waiting_for_warm_up

    @property
    def capture_dir(self):
        """Where "Record attention" writes its capture folders."""
        return self._data_dir / CAPTURES_FOLDER

    def _message_sent(self) -> None:
        self._stop_pending = False  # a Stop of an earlier turn does not stop this one

    def _message_saved(self, prefix: list) -> None:
        """The message is saved and shown: answer it, starting with ``prefix``'s tokens."""
        if self._stop_pending:
            self._stopped_before_answer()
            return
        self._ahead.when_warm(lambda: self._start_generation(prefix=prefix))

    def _start_generation(self, continuation: bool = False, prefix=()) -> None:
        """Open the answer (or continue it after a tool call) and stream from the server."""
        session = self._session
        if not continuation:
            session.pipeline.open_answer(prefix)
            if prefix:
                self._signals.tokens_streamed.emit()
                if session.rounds.has_tool_call():
                    self._run_tools("stop", None)  # the given start of the answer holds a tool call
                    return
        request = session.pipeline.request()
        ids = request["input_ids"]
        self._signals.turn_phase.emit("", f"reading {self._ahead.unread(ids):,} tokens…")
        self._ahead.server_given(ids)
        session.rounds.start_capture(self.capture_dir, request, self._files.path)
        worker = GenerationWorker(session.backend, request, parent=self)
        worker.token.connect(self._on_token)
        worker.completed.connect(self._on_stream_completed)
        worker.failed.connect(self._on_stream_failed)
        self._gen = worker
        self._gate.set_busy(True, "The model is answering — Esc stops")
        # The view appends new rows and rebuilds by itself when rows came back or left.
        self._signals.tokens_streamed.emit()
        worker.start()
        if self._stop_pending:  # Esc pressed while the message was being prepared
            self.stop()

    def _on_token(self, event) -> None:
        if self._session.pipeline.receive(event):
            if self._session.answer.streamed == 1:
                self._signals.turn_phase.emit("", "")  # the answer itself shows now
            self._signals.tokens_streamed.emit()

    def stop(self) -> None:
        """Stop the turn in whatever phase it is: an answer being generated ends (what
        arrived so far is kept); a message still being read or searched for goes back to
        the input box; a saved message waiting for the server to read the conversation
        stays, unanswered."""
        if self._gen is not None:
            self._gate.set_busy(True, "Stopping…")
            self._gen.stop()
        elif self._ahead.drop_waiting():
            self._stopped_before_answer()
        elif self._message.take_back():
            pass  # not saved yet: it went back to the box
        elif self._gate.busy:
            self._stop_pending = True  # a long message being saved: it stops once saved

    def _stopped_before_answer(self) -> None:
        """The turn ends without an answer (Stop before the answer started)."""
        self._stop_pending = False
        self._session.answer.clock.stop()
        self._gate.set_busy(False)
        self._signals.stats_changed.emit()
        self._signals.turn_finished.emit("aborted")

    def _on_stream_completed(self, done) -> None:
        self.last_done = done  # the server's account of the last answer (kv, timings): scripts, tests
        reason = getattr(done, "finish_reason", "stop") or "stop"
        if reason == "abort" or (self._gen is not None and self._gen.stopping):
            reason = "aborted"
        self.finish_capture(reason)
        rate = getattr(done, "tokens_per_s", None)
        if reason != "aborted" and self._session.rounds.has_tool_call():
            self._run_tools(reason, rate)
            return
        self._finish_turn(reason, rate)

    def _on_stream_failed(self, exc) -> None:
        if isinstance(exc, GenerationAborted) or (self._gen is not None and self._gen.stopping):
            self.finish_capture("aborted")
            self._finish_turn("aborted", None)
            return
        self.finish_capture("error")
        self._finish_turn("error", None)
        if self._link.connection.explains_failure():
            return  # the bundled server stopped: its own message says so, and it restarts
        self._signals.error.emit(exc, "Generating the answer")
        if isinstance(exc, (BackendUnavailable, StreamInterrupted, BackendTimeout)):
            self._link.connection.lost()

    def _finish_turn(self, reason: str, rate) -> None:
        worker, self._gen = self._gen, None
        if worker is not None:
            worker.wait(5000)
            worker.deleteLater()
        self._ahead.server_given(self._session.server.warm_up_ids())  # the prompt and the answer (before a prune)
        end = self._session.pipeline.finish(reason, rate, prune=not self._proxy.prunes_after_read())
        if end.turn is None:
            self._gate.set_busy(False)
            return
        if end.nothing_added:
            self._signals.info.emit("The model had nothing to add: the answer had ended by itself. "
                                    "↻ Regenerate gives another answer.")
        self._proxy.read_exchange()  # proxy attention, on a thread (a no-op where the server sends attention)
        if end.attention_changed:
            self._link.announce_attention(True)
        if end.pruned:
            self._signals.graveyard_changed.emit()
        self._gate.set_busy(False)
        self._prompt.sync_after_turn()
        (self._signals.conversation_changed if end.pruned else self._signals.tokens_streamed).emit()
        self._signals.stats_changed.emit()
        self._signals.turn_finished.emit(reason)
        if self._session.backend is not None and self._session.backend.saves_cache:  # llama-server: its slot, for a reopening
            self._calls.run(self._session.server.save_cache,
                            on_fail=lambda exc: log.info("saving the server's cache failed: %s", exc))

    def finish_capture(self, reason: str) -> None:
        """End the attention recording of the round (``reason``: how it ended)."""
        path = self._session.rounds.finish_capture(reason)
        if path is not None:
            self._signals.capture_saved.emit(str(path))

    def shutdown(self) -> None:
        """Quitting: the answer streaming stops (what arrived is kept by the session), its
        recording ends."""
        if self._gen is not None:
            self._gen.stop()
            self._gen.wait(5000)
        self.finish_capture("closed")

    def close_tools(self) -> None:
        """Quitting: end the notebook tool's runner."""
        if self._tool_runner is not None:
            self._tool_runner.close()

    # ------------------------------------------------------------------ the last exchange again
    def answer_again(self) -> None:
        """Stream a new answer to the question the conversation now ends with."""
        self._stop_pending = False
        if not self._session.answer.clock.running:
            self._session.answer.clock.start()
        if self._session.fit_model_window():
            self._signals.graveyard_changed.emit()
        self._start_generation()

    def go_on(self) -> None:
        """Stream more of the reopened last answer (Continue)."""
        self._stop_pending = False
        self._session.answer.clock.start()
        self._start_generation(continuation=True)

    # ------------------------------------------------------------------ tool rounds
    def _run_tools(self, reason: str, rate) -> None:
        """Run the answer's tool calls on a thread, append the results, maybe go on."""
        worker, self._gen = self._gen, None
        if worker is not None:
            worker.wait(5000)
            worker.deleteLater()
        self._gate.set_busy(True, "Running the model's notebook tool…")
        session, store = self._session, self._session.store
        text = session.rounds.answer_text()
        if self._tool_runner is None:
            self._tool_runner = notebook.ToolRunner()
        runner = self._tool_runner
        try:
            notes = store.load_tool_data(notebook.NOTES_NAME)
        except Exception as exc:  # noqa: BLE001
            self._signals.error.emit(exc, "Reading the notes")
            self._finish_turn(reason, rate)
            return

        def job():
            step = runner.process_answer(text, notes, hit_stop=reason == "stop")
            return step, session.server.tokenize(step.prefix_text), session.server.tokenize(step.result_text)

        def ok(outcome) -> None:
            step = outcome[0]
            if session.rounds.apply_tool_step(*outcome):
                self._signals.notes_changed.emit()
            self._signals.tokens_streamed.emit()
            if step.continue_generation and self._session.backend is not None:
                self._start_generation(continuation=True)
            else:
                self._finish_turn(reason, rate)

        def fail(exc) -> None:
            self._signals.error.emit(exc, "Running a tool call")
            self._finish_turn(reason, rate)

        self._calls.run(job, on_ok=ok, on_fail=fail)

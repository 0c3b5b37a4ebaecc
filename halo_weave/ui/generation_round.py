"""Generation rounds of the turn controller: stream an answer, Stop, the recorder's folder.

A mixin of :class:`~halo_weave.app.TurnController`.  One *round* is one streamed request:
the answer itself, and each continuation after a tool call.  The stream is read on a
:class:`~halo_weave.ui.workers.GenerationWorker`; each typed token event reaches
:meth:`ChatSession.receive <halo_weave.session.ChatSession.receive>` on the UI thread
(attention, recording, append, a save every 16) and the view hears ``tokens_streamed``.
Each round with "Record attention" on becomes one capture folder (``docs/capture-format.md``).
"""

from __future__ import annotations

from ..errors import GenerationAborted, StreamInterrupted, BackendTimeout, BackendUnavailable
from .workers import GenerationWorker

#: Folder under the data dir where attention captures go.
CAPTURES_FOLDER = "captures"


class GenerationRounds:
    """Streaming, Stop, and the attention recorder's folder."""

    @property
    def generating(self) -> bool:
        """True while an answer streams (Stop applies)."""
        return self._gen is not None

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
                if session.answer_has_tool_call():
                    self._run_tools("stop", None)  # the given start of the answer holds a tool call
                    return
        request = session.generation_request()
        session.start_capture(self.capture_dir, request, self.path)
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
            self.tokens_streamed.emit()

    def stop(self) -> None:
        """Abort the answer being generated; what arrived so far is kept."""
        if self._gen is not None:
            self._set_busy(True, "Stopping…")
            self._gen.stop()
        elif self.busy:
            self._stop_pending = True

    def _on_stream_completed(self, done) -> None:
        reason = getattr(done, "finish_reason", "stop") or "stop"
        if reason == "abort" or (self._gen is not None and self._gen.stopping):
            reason = "aborted"
        self._finish_capture(reason)
        rate = getattr(done, "tokens_per_s", None)
        if reason != "aborted" and self.session.answer_has_tool_call():
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
        self.error.emit(exc, "Generating the answer")
        if isinstance(exc, (BackendUnavailable, StreamInterrupted, BackendTimeout)):
            self.connection.lost()

    def _finish_capture(self, reason: str) -> None:
        path = self.session.finish_capture(reason)
        if path is not None:
            self.capture_saved.emit(str(path))

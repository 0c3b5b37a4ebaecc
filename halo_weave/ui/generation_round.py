"""Generation rounds of the turn controller: stream an answer, score, record, stop.

A mixin of :class:`~halo_weave.app.TurnController`.  One *round* is one streamed request:
the answer itself, and each continuation after a tool call.  Per token, on the UI
thread: apply the attention (it covers the context as it was), record the event when
"Record attention" is on, append the token, persist every :data:`STREAM_SAVE_EVERY`.
Each round with recording on becomes one capture folder (``docs/capture-format.md``).
"""

from __future__ import annotations

import time
import uuid

from ..tools import notebook
from ..errors import AttentionError
from ..storage.capture import AttentionRecorder, chunk_snapshot, generation_meta
from .workers import GenerationWorker

#: Where an answer ends with ChatML (other templates bring their own); the tool tag is added per request.
STOP_SEQUENCES = ("<|im_end|>", "<|im_start|>")

#: Streamed tokens written to the database per batch (no per-token commit).
STREAM_SAVE_EVERY = 16

#: Folder under the data dir where attention captures go.
CAPTURES_FOLDER = "captures"


class GenerationRounds:
    """Streaming, per-token brightness, Stop, and the attention recorder."""

    _recorder: AttentionRecorder | None = None
    _record_seconds = 0.0
    _round = 0

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
        conv = self.conv
        if not continuation:
            conv.begin_turn("assistant")
            self._stream_count = 0
            self._stream_started = time.monotonic()
            self._attention_seen = False
            self._attention_errors = 0
            self._round = 0
            prefix, self._answer_prefix = self._answer_prefix, ()
            if prefix and self._append_prefix(prefix):
                return  # the given start of the answer holds a tool call: run it first
        self._round += 1
        input_ids = conv.live_input_ids()
        s = self.settings
        params = dict(
            max_length=s.max_new_tokens,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,
            rep_pen=s.rep_pen,
            sampler_seed=s.sampler_seed,
            stop_sequence=[*(getattr(self.template, "stops", ()) or STOP_SEQUENCES), notebook.STOP_SEQUENCE],
            output_attentions=True,
            attention_format=s.attention_format,
            request_id=uuid.uuid4().hex,
        )
        self._start_capture(params)
        worker = GenerationWorker(self.client, input_ids, params, parent=self)
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

    def _append_prefix(self, pieces) -> bool:
        """Put the given start of the answer in place; True when a tool round took over."""
        conv = self.conv
        for token_id, piece in pieces:
            conv.append_token(int(token_id), piece)
        self._stream_count += len(pieces)
        self.tokens_streamed.emit()
        if not self._answer_has_tool_call():
            return False
        self._run_tools("stop", None)
        return True

    def _on_token(self, token_id: int, text: str, attention) -> None:
        conv = self.conv
        if conv is None or conv.open_turn is None:
            return
        if token_id in self._stop_ids:
            return
        if attention is not None:
            self._attention_seen = True
            try:
                # The vector covers the context as it was when this token was produced,
                # so brightness moves before the token joins the table.
                conv.apply_attention(attention)
            except AttentionError as exc:
                self._attention_errors += 1
                if self._attention_errors == 1:
                    self.error.emit(exc, "Brightness update")
        if self._recorder is not None and self._recorder.recording:
            self._record(token_id, text, attention)
        conv.append_token(token_id, text)
        self._stream_count += 1
        if self._stream_count % STREAM_SAVE_EVERY == 0:
            self._guard(lambda: self.store.save_stream_progress(conv), "Saving the answer")
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
        if reason != "aborted" and self._answer_has_tool_call():
            self._run_tools(reason, rate)
            return
        self._finish_turn(reason, rate)

    def _on_stream_failed(self, exc) -> None:
        names = {c.__name__ for c in type(exc).__mro__}
        if "GenerationAborted" in names or (self._gen is not None and self._gen.stopping):
            self._finish_capture("aborted")
            self._finish_turn("aborted", None)
            return
        self._finish_capture("error")
        self._finish_turn("error", None)
        self.error.emit(exc, "Generating the answer")
        if names & {"BackendUnavailable", "StreamInterrupted", "BackendTimeout"}:
            self.connection.lost()

    # ------------------------------------------------------------------ attention capture
    def _start_capture(self, params: dict) -> None:
        if not self.settings.record_attention:
            return
        if self._recorder is None or self._recorder.capture_dir != self.capture_dir:
            self._recorder = AttentionRecorder(self.capture_dir)
        sampler = {k: params[k] for k in ("temperature", "top_p", "top_k", "rep_pen", "sampler_seed")}
        meta = dict(model=str(getattr(self.model_info, "name", "")), conversation_file=str(self.path or ""),
                    round=self._round, sampler=sampler)
        self._record_seconds = 0.0
        self._guard(lambda: self._recorder.start(generation_meta(self.conv, **meta)),
                    "Starting the attention recording")

    def _record(self, token_id: int, text: str, attention) -> None:
        # Views of the live columns: record() writes them out before it returns.
        table = self.conv.table
        started = time.perf_counter()
        try:
            self._recorder.record(token_id, text, table.position, attention, table.brightness,
                                  chunk_ids=table.chunk_id)
        except Exception as exc:  # noqa: BLE001 - a full disk stops the recording, not the answer
            self._finish_capture("recording failed")
            self.error.emit(exc, "Recording attention")
        self._record_seconds += time.perf_counter() - started

    def _finish_capture(self, reason: str) -> None:
        recorder = self._recorder
        if recorder is None or not recorder.recording:
            return
        per_token = self._record_seconds / recorder.tokens * 1000 if recorder.tokens else 0.0
        stats = {"finish_reason": reason, "record_ms_per_token": round(per_token, 4),
                 "chunks": chunk_snapshot(self.conv)}
        try:
            path = recorder.finish(stats)
        except Exception as exc:  # noqa: BLE001
            self.error.emit(exc, "Finishing the attention recording")
            return
        self.capture_saved.emit(str(path))

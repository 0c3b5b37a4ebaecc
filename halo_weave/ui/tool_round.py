"""Tool rounds of the turn controller: the model's jq notebook (seed 001 §12).

A mixin of :class:`~halo_weave.app.TurnController`.  When a round ends on a
``<tool>…</tool>`` call, :meth:`ToolRounds._run_tools` hands the answer so far to
:meth:`halo_weave.notebook.ToolRunner.process_answer` on a thread, appends the compact
result as tool-result tokens, saves changed notes (``notes_changed`` fires) and starts
the next round while the runner says so (at most ``notebook.MAX_ROUNDS`` calls).
"""

from __future__ import annotations

from ..tools import notebook


class ToolRounds:
    """Runs the notebook calls an answer makes, between generation rounds."""

    _tool_runner: notebook.ToolRunner | None = None

    def _answer_text(self) -> str:
        conv = self.conv
        return "".join(conv.chunk_text(c.id) for c in conv.content_chunks(conv.open_turn.turn_id))

    def _answer_has_tool_call(self) -> bool:
        conv = self.conv
        return conv is not None and conv.open_turn is not None and notebook.OPEN_TAG in self._answer_text()

    def _run_tools(self, reason: str, rate) -> None:
        """Run the answer's tool calls on a thread, append the results, maybe go on."""
        worker, self._gen = self._gen, None
        if worker is not None:
            worker.wait(5000)
            worker.deleteLater()
        self._set_busy(True, "Running the model's notebook tool…")
        text, client, store = self._answer_text(), self.client, self.store
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
            prefix = client.tokenize(step.prefix_text, add_special_tokens=False) if step.prefix_text else []
            result = client.tokenize(step.result_text, add_special_tokens=False) if step.result_text else []
            return step, prefix, result

        def ok(outcome) -> None:
            step, prefix, result = outcome
            conv = self.conv
            for token_id, piece in prefix:
                conv.append_token(int(token_id), piece)
            for token_id, piece in result:
                conv.append_token(int(token_id), piece, tool_result=True)
            self._stream_count += len(prefix) + len(result)
            if step.new_notes is not None:
                if self._guard(lambda: store.save_tool_data(notebook.NOTES_NAME, step.new_notes), "Saving notes"):
                    self.notes_changed.emit()
            self._guard(lambda: store.save_stream_progress(conv), "Saving the answer")
            self.tokens_streamed.emit()
            if step.continue_generation and self.client is not None:
                self._start_generation(continuation=True)
            else:
                self._finish_turn(reason, rate)

        def fail(exc) -> None:
            self.error.emit(exc, "Running a tool call")
            self._finish_turn(reason, rate)

        self._call(job, on_ok=ok, on_fail=fail)

"""Tool rounds of the turn controller: the model's jq notebook (seed 001 §12).

A mixin of :class:`~halo_weave.app.TurnController`.  When a round ends on a
``<tool>…</tool>`` call, :meth:`ToolRounds._run_tools` hands the answer so far to
:meth:`halo_weave.tools.notebook.ToolRunner.process_answer` on a thread; the session
appends the compact result as tool-result tokens and saves changed notes
(``notes_changed`` fires); the next round starts while the runner says so (at most
``notebook.MAX_ROUNDS`` calls).
"""

from __future__ import annotations

from ..tools import notebook


class ToolRounds:
    """Runs the notebook calls an answer makes, between generation rounds."""

    _tool_runner: notebook.ToolRunner | None = None

    def _run_tools(self, reason: str, rate) -> None:
        """Run the answer's tool calls on a thread, append the results, maybe go on."""
        worker, self._gen = self._gen, None
        if worker is not None:
            worker.wait(5000)
            worker.deleteLater()
        self._set_busy(True, "Running the model's notebook tool…")
        session, store = self.session, self.store
        text = session.answer_text()
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
            if session.apply_tool_step(*outcome):
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

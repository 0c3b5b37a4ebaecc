"""What an answer's rounds carry besides streamed tokens: tool steps (the model writes a
``<tool>`` call, the result joins the answer, the next round goes on) and the attention
recording ("Record attention": one capture folder per round)."""

from __future__ import annotations

from typing import Any

from ..storage.capture import RoundCapture
from ..tools import notebook


class Rounds:
    """The open answer's rounds (``session.rounds``).

    Owns: ``number`` (the open answer's round, counted from 1 by each request; 0 before
    the first) and ``capture`` (the attention recording, one folder per round).
    """

    def __init__(self, session) -> None:
        self._session = session
        self.number = 0
        self.capture = RoundCapture()

    def reset(self) -> None:
        """A new answer: no round yet."""
        self.number = 0

    def next(self) -> int:
        """A request starts the next round; its number."""
        self.number += 1
        return self.number

    def answer_text(self) -> str:
        """The open answer's text so far (all rounds)."""
        conv = self._session.conv
        return "".join(conv.chunk_text(c.id) for c in conv.content_chunks(conv.open_turn.turn_id))

    def has_tool_call(self) -> bool:
        """Whether the open answer holds a tool call (with the notebook tool on)."""
        session = self._session
        conv = session.conv
        return (session.settings.chat.notes_tool and conv is not None and conv.open_turn is not None
                and notebook.OPEN_TAG in self.answer_text())

    def apply_tool_step(self, step, prefix, result) -> bool:
        """Append a tool step's tokens, save changed notes and the answer; True if notes changed."""
        session = self._session
        conv, store = session.conv, session.store
        for token_id, text in prefix:
            conv.append_token(int(token_id), text)
        for token_id, text in result:
            conv.append_token(int(token_id), text, tool_result=True)
        session.answer.added(len(prefix) + len(result))
        notes_saved = step.new_notes is not None and session.save(
            lambda: store.save_tool_data(notebook.NOTES_NAME, step.new_notes), "Saving notes")
        session.save(lambda: store.save_stream_progress(conv), "Saving the answer")
        return notes_saved

    def start_capture(self, capture_dir, params: dict, path: Any = None) -> None:
        """Record this round's attention when "Record attention" is on."""
        session = self._session
        if not session.settings.server.record_attention:
            return
        sampler = {k: params[k] for k in ("temperature", "top_p", "top_k", "rep_pen", "sampler_seed")}
        meta = dict(model=str(getattr(session.model_info, "name", "")), conversation_file=str(path or ""), round=self.number, sampler=sampler)
        try:
            self.capture.start(capture_dir, session.conv, meta)
        except Exception as exc:  # noqa: BLE001 - the answer goes on unrecorded
            session.report(exc, "Starting the attention recording")

    def record(self, token_id: int, text: str, attention) -> None:
        """One streamed token into the recording, if one runs; a failure (a full disk)
        ends the recording, not the answer."""
        if not self.capture.recording:
            return
        try:
            self.capture.record(self._session.conv, token_id, text, attention)
        except Exception as exc:  # noqa: BLE001 - a full disk stops the recording, not the answer
            self.finish_capture("recording failed")
            self._session.report(exc, "Recording attention")

    def finish_capture(self, reason: str):
        """End the recording (if any); the capture folder, or None."""
        if not self.capture.recording:
            return None
        try:
            return self.capture.finish(self._session.conv, reason)
        except Exception as exc:  # noqa: BLE001 - the answer is saved regardless
            self._session.report(exc, "Finishing the attention recording")
            return None

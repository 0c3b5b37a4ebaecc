"""What an answer's rounds carry besides streamed tokens: tool steps (the model writes a
``<tool>`` call, the result joins the answer, the next round goes on) and the attention
recording ("Record attention": one capture folder per round).

Every function takes the :class:`~halo_weave.session.ChatSession` (``session``), whose
methods of the same names call them.
"""

from __future__ import annotations

from typing import Any

from ..tools import notebook


def answer_text(session) -> str:
    """The open answer's text so far (all rounds)."""
    conv = session.conv
    return "".join(conv.chunk_text(c.id) for c in conv.content_chunks(conv.open_turn.turn_id))


def answer_has_tool_call(session) -> bool:
    conv = session.conv
    return (session.settings.notes_tool and conv is not None and conv.open_turn is not None
            and notebook.OPEN_TAG in answer_text(session))


def apply_tool_step(session, step, prefix, result) -> bool:
    """Append a tool step's tokens, save changed notes and the answer; True if notes changed."""
    conv, store = session.conv, session.store
    for token_id, text in prefix:
        conv.append_token(int(token_id), text)
    for token_id, text in result:
        conv.append_token(int(token_id), text, tool_result=True)
    session.streamed += len(prefix) + len(result)
    notes_saved = step.new_notes is not None and session.save(
        lambda: store.save_tool_data(notebook.NOTES_NAME, step.new_notes), "Saving notes")
    session.save(lambda: store.save_stream_progress(conv), "Saving the answer")
    return notes_saved


def start_capture(session, capture_dir, params: dict, path: Any = None) -> None:
    """Record this round's attention when "Record attention" is on."""
    if not session.settings.record_attention:
        return
    sampler = {k: params[k] for k in ("temperature", "top_p", "top_k", "rep_pen", "sampler_seed")}
    meta = dict(model=str(getattr(session.model_info, "name", "")), conversation_file=str(path or ""),
                round=session.round, sampler=sampler)
    try:
        session.capture.start(capture_dir, session.conv, meta)
    except Exception as exc:  # noqa: BLE001 - the answer goes on unrecorded
        session.report(exc, "Starting the attention recording")


def finish_capture(session, reason: str):
    """End the recording (if any); the capture folder, or None."""
    if not session.capture.recording:
        return None
    try:
        return session.capture.finish(session.conv, reason)
    except Exception as exc:  # noqa: BLE001 - the answer is saved regardless
        session.report(exc, "Finishing the attention recording")
        return None

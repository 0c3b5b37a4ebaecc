"""The live context as chat messages, for a server that applies its own chat template.

A chat-completions server (:mod:`halo_weave.backends.chat_completions`) takes a list of
``{"role", "content"}`` messages instead of a prompt.  They are read from the live
context, never kept beside it, so pruning and recall shape them exactly as they shape
the text prompt:

* the system prompt is the system message (none when it is blank);
* each turn's live paragraphs (chunks), in position order, joined, are that turn's
  message; the template's framing is left out (the server frames);
* a pruned paragraph is not in its message; a recalled one is back in its message at
  its place; a turn with nothing live sends no message, and the order never changes;
* two messages of one role in a row (a turn between them was pruned whole, or a
  paragraph came back without its question) are joined, a blank line between: many
  models' templates (Mistral's, Gemma's) refuse two in a row;
* the recall note (:mod:`halo_weave.memory.recall_note`) opens the content of the
  paragraph it stands before in the text prompt: the start of the question;
* an attached document's paragraphs are a user message (chat templates have no role for
  them; the text prompt frames them as a user turn too).
"""

from __future__ import annotations

#: Put between two messages of one role that are joined.
JOIN = "\n\n"
#: The message role of a turn role that chat-completions servers do not know.
MESSAGE_ROLES = {"document": "user"}


def live_messages(conv, note=None) -> list[dict[str, str]]:
    """``conv``'s live context as chat messages, ``note`` (a
    :class:`~halo_weave.memory.recall_note.RecallNote`, or None) in its place."""
    messages: list[dict[str, str]] = []
    system = conv.system.text
    if system.strip():
        messages.append({"role": "system", "content": system})
    note_at = _note_position(conv, note)
    turn = None
    for chunk in conv.live_chunks():
        if chunk.framing:
            continue
        text = "".join(conv.chunk_tokens(chunk.id).texts)
        role = MESSAGE_ROLES.get(chunk.role, chunk.role)
        if note_at is not None and chunk.start == note_at:
            text = "".join(note.texts) + text
        if chunk.turn_id == turn:
            messages[-1]["content"] += text
        elif messages and messages[-1]["role"] == role and role != "system":
            messages[-1]["content"] += ("" if messages[-1]["content"].endswith(JOIN) else JOIN) + text
        else:
            messages.append({"role": role, "content": text})
        turn = chunk.turn_id
    return [m for m in messages if m["content"].strip()]


def _note_position(conv, note) -> int | None:
    """The position of the token the note stands before (None: no note, or it is past the end)."""
    if note is None or not len(note):
        return None
    row = note.offset - len(conv.system.ids)
    if not 0 <= row < len(conv.table):
        return None
    return int(conv.table.position[row])

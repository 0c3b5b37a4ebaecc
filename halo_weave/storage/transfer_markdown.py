"""A conversation as a Markdown file, to read, share or print (File → Export Markdown…).

What it holds, decided once:

* a ``# title`` heading (the list's title), the export time, and the system prompt as a
  quote;
* every message of the branch shown, in order, under a ``## n · Role · time`` heading
  (n counts the messages from 1, as the graveyard and the context menu do);
* **pruned paragraphs included and marked**: each is a quote opened by *pruned — not in
  the model's context when exported*, so the file is the whole conversation and a reader
  still sees what the model no longer read;
* not: other branches, other versions of an answer, brightness.  The JSON export keeps
  all of it and is the one to import again.

Qt-free; it reads the conversation as :class:`~halo_weave.conversation.Conversation`
holds it (a pruned paragraph's text is read from the file).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from ..conversation import Conversation

#: The mark opening a pruned paragraph.
PRUNED_MARK = "*pruned — not in the model's context when exported*"
ROLE_NAMES = {"user": "User", "assistant": "Assistant", "system": "System"}
#: Characters a file name keeps of a title.
FILE_NAME_CHARS = 80


def file_name_for(title: str, suffix: str) -> str:
    """A file name made of a conversation's title ("Packing for Kyoto.md"): characters
    that file systems refuse dropped, spaces kept, at most :data:`FILE_NAME_CHARS`."""
    name = re.sub(r'[\\/:*?"<>|\x00-\x1f]+', " ", title.replace("…", " "))
    name = " ".join(name.split()).strip(" .")[:FILE_NAME_CHARS].strip(" .")
    return f"{name or 'conversation'}{suffix}"


def _quoted(text: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in text.strip("\n").split("\n"))


def conversation_markdown(conv: Conversation, title: str, system_prompt: str = "",
                          now: float | None = None) -> str:
    """The Markdown text of ``conv`` (see the module docstring)."""
    stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(time.time() if now is None else now))
    parts = [f"# {title.strip() or 'Conversation'}", f"*Exported from Halo Weave on {stamp}.*"]
    if system_prompt.strip():
        parts.append("**System prompt**\n\n" + _quoted(system_prompt))
    names = {**ROLE_NAMES, **dict(getattr(conv, "role_names", {}) or {})}
    for number, turn_id in enumerate(conv.turns, 1):
        turn = conv.turns[turn_id]
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(turn.created_at)) if turn.created_at else ""
        heading = f"## {number} · {names.get(turn.role, turn.role.title())}" + (f" · {when}" if when else "")
        body: list[str] = []
        for chunk in conv.content_chunks(turn_id):
            text = conv.chunk_text(chunk.id)
            if chunk.live:
                body.append(text)
            elif text.strip():
                # A quote of its own, apart from the text around it.
                body.append(f"\n\n{PRUNED_MARK}\n\n{_quoted(text)}\n\n")
        message = re.sub(r"\n{3,}", "\n\n", "".join(body)).strip("\n")
        parts.append(f"{heading}\n\n{message}" if message else heading)
    return "\n\n".join(parts) + "\n"


def export_markdown(conv: Conversation, title: str, path: Path, system_prompt: str = "") -> None:
    """Write ``conv`` as Markdown to ``path`` (UTF-8), whole or not at all: a temporary
    file beside it is renamed into place."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(conversation_markdown(conv, title, system_prompt), encoding="utf-8")
    partial.replace(path)

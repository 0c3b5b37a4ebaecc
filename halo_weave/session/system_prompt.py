"""The open conversation's system prompt, framed by the chat template in use.

Each conversation has a system prompt of its own, kept in its file (meta ``prompt``: the
user's words, without the notebook's instructions, which follow it while the notebook
tool is on).  A new or imported conversation starts with the settings' default; a file
written before prompts were per conversation has the one it was last framed with.
"""

from __future__ import annotations

from ..core.chat_template import system_text
from ..core.framing import Framing
from ..settings import with_notes_tool, without_notes_tool

#: The conversation file's meta key for its own system prompt.
PROMPT_KEY = "prompt"


class SystemPrompt:
    """The open conversation's system prompt (``session.prompt``).

    The words are kept in the conversation's file (meta :data:`PROMPT_KEY`) and, framed,
    in the conversation's system turn; this owns which chat template framed that turn
    (so a change of template frames it again).
    """

    def __init__(self, session) -> None:
        self._session = session
        self._framed_with: tuple[object, str] | None = None  # (conversation, template name)

    def own(self) -> str:
        """The open conversation's own system prompt (see the module docstring)."""
        session = self._session
        saved = None
        if session.store is not None:
            try:
                saved = session.store.get_meta(PROMPT_KEY)
            except Exception:  # noqa: BLE001 - an unreadable meta row: what the conversation holds
                saved = None
        if isinstance(saved, str):
            return saved
        conv = session.conv
        if conv is not None and conv.system.text:
            return without_notes_tool(conv.system.text)
        return session.settings.chat.system_prompt

    def effective(self) -> str:
        """The open conversation's system prompt as the model reads it."""
        return with_notes_tool(self.own(), self._session.settings.chat.notes_tool)

    def set_own(self, prompt: str) -> None:
        """Keep ``prompt`` as the open conversation's own (framed by the next :meth:`apply`)."""
        session = self._session
        session.save(lambda: session.store.set_meta(PROMPT_KEY, prompt), "Saving the system prompt")

    def framed_text(self) -> str | None:
        """The framed system text (as the model reads it), or None when the conversation has
        it already."""
        conv, prompt, chosen = self._session.conv, self.effective(), self._session.server.template
        framed = self._framed_with
        same_template = framed is None or framed[0] is not conv or framed[1] == chosen.name
        if conv.system.text == prompt and same_template and (len(conv.system.ids) > 0 or not prompt.strip()):
            return None
        return system_text(prompt, chosen)

    def pieces(self, prompt: str) -> list[tuple[int, str]]:
        """The system turn's ``(id, piece)`` pairs (blocking): the framing's tokens around
        ``prompt`` tokenized as text, so markup in the prompt stays text; none when blank."""
        if not prompt.strip():
            return []
        session = self._session
        return (session.framing or Framing.none()).wrap("system", session.server.tokenize(prompt))

    def apply(self, prompt: str, pieces: list[tuple[int, str]]) -> None:
        """Adopt ``prompt`` tokenized (:meth:`pieces`) as the system turn and save it."""
        session = self._session
        conv = session.conv
        conv.set_system_prompt(prompt, [i for i, _ in pieces], [t for _, t in pieces])
        self._framed_with = (conv, session.server.template.name)
        own = without_notes_tool(prompt)
        session.save(lambda: session.store.save_system_prompt(conv, own), "Saving the system prompt")

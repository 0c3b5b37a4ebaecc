"""The chat template a session frames with, and the system prompt framed by it.

Each conversation has a system prompt of its own, kept in its file (meta ``prompt``: the
user's words, without the notebook's instructions, which follow it while the notebook
tool is on).  A new or imported conversation starts with the settings' default; a file
written before prompts were per conversation has the one it was last framed with.

Every function takes the :class:`~halo_weave.session.ChatSession` (``session``), whose
members of the same names call them.
"""

from __future__ import annotations

from ..core.chat_template import TemplateStrings, detect_template, system_text
from ..core.framing import Framing
from ..settings import with_notes_tool, without_notes_tool

#: The conversation file's meta key for its own system prompt.
PROMPT_KEY = "prompt"


def template(session) -> TemplateStrings:
    """The chat template in use: the one the connection framed with (the server's own or
    the conversation's choice), else what the model info and the choice give."""
    connected = session.backend.template if session.backend is not None else None
    return connected or detect_template(
        getattr(session.model_info, "chat_template", None), template_choice(session))


def template_choice(session) -> str:
    """The conversation's saved template choice, else the settings' (``"auto"``)."""
    return session.saved_choice("chat_template") or session.settings.chat_template


def conversation_prompt(session) -> str:
    """The open conversation's own system prompt (see the module docstring)."""
    saved = None
    if session.store is not None:
        try:
            saved = session.store.get_meta(PROMPT_KEY)
        except Exception:  # noqa: BLE001 - an unreadable meta row: what the conversation holds
            saved = None
    if isinstance(saved, str):
        return saved
    conv = session.conv
    if conv is not None and conv.system_prompt:
        return without_notes_tool(conv.system_prompt)
    return session.settings.system_prompt


def effective_prompt(session) -> str:
    """The open conversation's system prompt as the model reads it."""
    return with_notes_tool(conversation_prompt(session), session.settings.notes_tool)


def set_conversation_prompt(session, prompt: str) -> None:
    """Keep ``prompt`` as the open conversation's own (framed by the next
    :func:`set_system_prompt`)."""
    session.save(lambda: session.store.set_meta(PROMPT_KEY, prompt), "Saving the system prompt")


def system_prompt_text(session) -> str | None:
    """The framed system text (as the model reads it), or None when the conversation has
    it already."""
    conv, prompt, chosen = session.conv, effective_prompt(session), template(session)
    same_template = getattr(conv, "system_template", chosen.name) == chosen.name
    if conv.system_prompt == prompt and same_template and (len(conv.system_ids) > 0 or not prompt.strip()):
        return None
    return system_text(prompt, chosen)


def system_prompt_pieces(session, prompt: str) -> list[tuple[int, str]]:
    """The system turn's ``(id, piece)`` pairs (blocking): the framing's tokens around
    ``prompt`` tokenized as text, so markup in the prompt stays text; none when blank."""
    if not prompt.strip():
        return []
    return (session.framing or Framing.none()).wrap("system", session.tokenize(prompt))


def set_system_prompt(session, prompt: str, pieces: list[tuple[int, str]]) -> None:
    """Adopt ``prompt`` tokenized (:func:`system_prompt_pieces`) and save it."""
    conv = session.conv
    conv.set_system_prompt(prompt, [i for i, _ in pieces], [t for _, t in pieces])
    conv.system_template = template(session).name
    own = without_notes_tool(prompt)
    session.save(lambda: session.store.save_system_prompt(conv, own), "Saving the system prompt")

"""How an OpenAI-compatible server is spoken to (``Settings.server_api``): through
``/v1/completions`` (a prompt the app frames) or ``/v1/chat/completions`` (messages the
server frames), or as the server offers (:mod:`halo_weave.backends.probe` says how that
is told)."""

from __future__ import annotations

from dataclasses import dataclass

from .choice import Choice


@dataclass(frozen=True)
class ServerApi:
    """One way of speaking to an OpenAI-compatible server, with its words."""

    choice: Choice


#: Every way by its value, in the order the dialog lists them.
SERVER_APIS: dict[str, ServerApi] = {api.choice.value: api for api in (
    ServerApi(Choice("auto", "As the server offers (completions where it has them)",
                     "Completions where the server has /v1/completions, chat completions where it has only those.")),
    ServerApi(Choice("completions", "Completions (/v1/completions): the app frames the prompt",
                     "The app frames the prompt with the chat template and sends it as text.")),
    ServerApi(Choice("chat", "Chat completions (/v1/chat/completions): the server frames it",
                     "The context goes as messages and the server applies its model's own template "
                     "(OpenAI, OpenRouter, Groq, Mistral: only these).")),
)}

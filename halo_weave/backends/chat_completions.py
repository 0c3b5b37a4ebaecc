"""An OpenAI-compatible chat-completions server (OpenAI, OpenRouter, Groq, Mistral's API,
LM Studio's and Ollama's chat endpoints, vLLM's chat route, llama-cpp-python), in text mode.

The server applies its model's own chat template, so the context goes as a list of
messages (:func:`halo_weave.session.messages.live_messages`: the system prompt, then each
turn's live paragraphs in order), not as a framed prompt.  Everything else is the
completions kind's (:class:`~halo_weave.backends.openai_compat.OpenAICompat`): the
model list ``GET /v1/models`` and the model each request names, the context read from
Ollama's and LM Studio's own APIs, the token counter where the server has one (else the
bundled tokenizer's estimate, said to be one), top-k and the repetition penalty under
local servers' names (dropped when a strict server refuses them), the API key in
``Authorization: Bearer``, and Stop closing the stream.

``POST /v1/chat/completions`` with ``"stream": true`` streams ``data: {"choices":
[{"delta": {"content"}, "finish_reason"}]}`` lines ending with ``data: [DONE]``.  The
token table is still framed with a template (the one chosen in Settings, ChatML by
default): its framing is what the heatmap shows and the bundled reader reads, and
counts include it, but it is never sent.  Qt-free.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterator

from ..errors import ProtocolError
from .base import Capabilities
from .model_template import TemplateInUse
from .openai_compat import OpenAICompat, finish_reason, first_choices
from .text_mode import TextStream

#: Where the chat completions are asked for, below the server's root.
CHAT_PATH = "/v1/chat/completions"


class ChatCompletions(OpenAICompat):
    """``/v1/chat/completions`` + ``/v1/models``: the live context sent as messages."""

    kind = "openai-chat"
    takes_messages = True

    @property
    def label(self) -> str:
        return f"{super().label} (chat)"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            attention=False, token_ids=False, exact_tokens=self.counts_exactly,
            prefix_cache="server-side only, if the server caches prompts",
            abort="yes (closing the stream; the server stops when it notices)",
            template="the server's own (it frames the messages); the app's framing is not sent")

    def use_template(self, used: TemplateInUse, choice: str | None) -> None:
        """Frame the token table with ``used``; its words say the server frames what it is sent."""
        own = replace(used.template, source="the heatmap's only: the server frames the messages with its model's own")
        super().use_template(TemplateInUse(own, used.problem), choice)

    def stream(self, *, messages: list[dict] | None = None, **request) -> TextStream:
        """A text stream of the answer to ``messages`` (the prompt text beside them is what
        the counts and the bundled reader go by)."""
        if not messages:
            raise ValueError("a chat-completions server needs the context as messages")
        stream = super().stream(**request)
        stream.params["messages"] = [{"role": m["role"], "content": m["content"]} for m in messages]
        return stream

    def request_body(self, stream: TextStream) -> dict:
        body = super().request_body(stream)
        del body["prompt"]
        return {**body, "messages": stream.params["messages"]}

    def answer_chunks(self, stream: TextStream, body: dict) -> Iterator[tuple[str, str | None]]:
        for data, choice in first_choices(stream, CHAT_PATH, body):
            delta = choice.get("delta")
            if delta is None:
                delta = {}
            if not isinstance(delta, dict):
                raise ProtocolError(f"a chat chunk whose delta is not an object: {data!r:.120}")
            text = delta.get("content") or ""  # the first chunk may carry only the role
            if not isinstance(text, str):
                raise ProtocolError(f"a chat chunk whose content is not text: {data!r:.120}")
            yield text, finish_reason(choice)

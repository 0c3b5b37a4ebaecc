"""Stock KoboldCPP, in text mode.

(Ours and the patched fork speak the attention API, PROTOCOL.md, and are served by
:class:`~halo_weave.kobold_client.KoboldClient` itself.)

*Stock KoboldCPP* (≥ 1.76, recorded in ``shared/data/koboldcpp-1.76``) has no tokenizer
with pieces and silently ignores ``input_ids``, so it runs in text mode
(:class:`StockKobold`).  Its quirks, handled here: several tokens of text per event;
``finish_reason`` is the *string* ``"null"`` until the last event; abort answers string
booleans (``{"success": "true"}``) and the aborted stream ends with ``"length"``;
``/api/extra/tokencount`` is the only counter: it adds a BOS unless told ``"special": false``
(or the text starts with one), as the server does to a prompt, so a prompt is counted
with it and any other text without; the prompt is cut to the request's
``max_context_length`` (a small default), so the true context is always sent.  A server
started with ``--password`` wants the key on every POST, the counter's included.
"""

from __future__ import annotations

import threading
from typing import Iterator

from ..errors import BackendError, ProtocolError
from ..events import ModelInfo
from .base import ASSUMED_CONTEXT, Capabilities, as_bool, reason_or_none
from .text_mode import TextModeBackend, TextStream

#: Seconds an aborted KoboldCPP stream may take to end by itself before it is closed.
ABORT_GRACE_S = 10.0

STOCK_CAPABILITIES = Capabilities(
    attention=False, token_ids=False, exact_tokens=True,
    prefix_cache="server-side only (KoboldCPP re-tokenizes the text prompt)",
    abort="yes (/api/extra/abort with the genkey; ends as 'length')",
    template="chosen in Settings (the server does not publish one)")


class StockKobold(TextModeBackend):
    """Stock KoboldCPP ≥ 1.76 in text mode."""

    kind = "koboldcpp"
    capabilities = STOCK_CAPABILITIES
    ends_stream_on_abort = True  # as recorded: the aborted stream ends with "length"

    def __init__(self, base_url: str, *, version: str | None = None, **kwargs) -> None:
        super().__init__(base_url, **kwargs)
        self.version = version

    @property
    def label(self) -> str:
        return f"KoboldCPP {self.version}" if self.version else "KoboldCPP"

    def server_count(self, text: str, *, prompt: bool = False) -> int | None:
        """The server's count of ``text``; ``prompt``: as a whole prompt (the BOS it adds counted)."""
        data = self.http.post_json("/api/extra/tokencount", {"prompt": text, "special": prompt})
        value = (data or {}).get("value")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def model_info(self) -> ModelInfo:
        if self._info is not None:
            return self._info
        model = self.http.get_json("/api/v1/model") or {}
        if self.version is None:
            version = self.http.get_json("/api/extra/version") or {}
            self.version = str(version["version"]) if version.get("version") else None
        context = 0
        for path in ("/api/extra/true_max_context_length", "/api/v1/config/max_context_length"):
            value = (self.http.get_json(path) or {}).get("value")
            if isinstance(value, int) and value > 0:
                context = value
                break
        known = context > 0
        server_context = context or ASSUMED_CONTEXT
        self.calibrate()
        info = ModelInfo(
            name=str(model.get("result") or "koboldcpp"), num_layers=0, num_heads=0, num_kv_heads=0,
            hidden_size=0, max_context=self.table_context(server_context), bos_token_id=None,
            eos_token_id=None, chat_template=None, supports_attention=False, raw=model,
        )
        info.kind, info.version = self.kind, self.version
        info.server_max_context = server_context
        info.context_known = known
        info.template_origin = "KoboldCPP"
        return self._keep_info(info)

    def open_stream(self, stream: TextStream) -> Iterator[tuple[str, str | None]]:
        p = stream.params
        try:
            stream.server_prompt_tokens = self.server_count(stream.prompt, prompt=True)
        except BackendError:
            stream.server_prompt_tokens = None
        body = {
            "prompt": stream.prompt, "max_length": p["max_length"],
            "max_context_length": self.server_context or ASSUMED_CONTEXT,
            "temperature": p["temperature"], "top_p": p["top_p"], "top_k": p["top_k"],
            "rep_pen": p["rep_pen"], "sampler_seed": p["sampler_seed"],
            "stop_sequence": p["stop_sequence"], "trim_stop": True, "genkey": stream.request_id,
        }
        for data in stream.sse("/api/extra/generate/stream", body):
            text = data.get("token", "")
            if not isinstance(text, str):
                raise_protocol(f"a text event without text: {data!r:.120}")
            yield text, reason_or_none(data.get("finish_reason"))

    def abort_stream(self, stream: TextStream) -> None:
        # The server ends the stream itself (with "length"); the stream maps it to "abort".
        try:
            stopped = self.abort(stream.request_id)
        except BackendError:
            stopped = False
        if not stopped or not stream.tokens:
            # Not stopped, or still reading the prompt: a real 1.76 reads it all (tens of
            # seconds) before it ends an aborted stream; closing ends it now.
            stream.close_response()
        else:
            # Should the stream not end by itself (another version), Stop still stops.
            timer = threading.Timer(ABORT_GRACE_S, stream.close_response)
            timer.daemon = True
            timer.start()

    def abort(self, request_id: str | None = None) -> bool:
        data = self.http.post_json("/api/extra/abort", {"genkey": request_id} if request_id else {})
        return as_bool((data or {}).get("success"))


def raise_protocol(message: str):
    raise ProtocolError(message)



"""llama.cpp's ``llama-server``, native API: exact token ids, so prefix caching works.

Endpoints used (llama.cpp ``tools/server/README.md``): ``GET /props`` (context size
``default_generation_settings.n_ctx``, the model's ``chat_template``, ``build_info``),
``POST /tokenize {"content", "parse_special", "with_pieces": true}`` → ``{"tokens": [{"id", "piece"}]}``
(a piece that is not valid UTF-8 comes as a list of bytes), ``POST /detokenize
{"tokens"}`` → ``{"content"}``, ``POST /completion`` with the prompt as a token-id list,
``"stream": true``, ``"cache_prompt": true`` and ``"return_tokens": true``: SSE
``data: {"content", "tokens", "stop": false}`` … ending with ``"stop": true``,
``stop_type`` (``eos``/``word``/``limit``), ``tokens_evaluated`` (the prompt's tokens) and
``timings.cache_n`` (those reused from the slot's cache; ``tokens_cached`` is not that, it
counts what the slot holds after the answer, generated tokens included, as seen on a real
llama-server).
Aborting closes the connection: the server stops a slot whose client went away.
No attention.  Qt-free.

*Reopening a conversation* (:meth:`LlamaServer.restore`): llama-server keeps no cache per
conversation, but one started with ``--slot-save-path DIR`` saves a slot's cache to a file
and reads it back (``POST /slots/0?action=save|restore {"filename"}``, answering
``n_saved`` / ``n_restored``; without the option it answers 501).  The app saves slot 0
after each answer under a name made from the conversation's key and the model, restores it
when the conversation is opened again, and then sends the live context as a one-token
completion: the server reuses the restored tokens that match the prompt id by id (its
longest common prefix) and runs only the rest.  Without saved slots that completion is
the whole prefill, made while the user reads instead of after Enter.
"""

from __future__ import annotations

import codecs
import hashlib
import logging
import time
import uuid
from typing import Iterator, Sequence

from ..errors import BackendError, GenerationAborted, ProtocolError, StreamInterrupted
from ..events import ModelInfo
from .base import ASSUMED_CONTEXT, Capabilities, Http, error_message
from .text_mode import TextStream

CAPABILITIES = Capabilities(
    attention=False, token_ids=True, exact_tokens=True,
    prefix_cache="yes (token-id prompt, cache_prompt)",
    abort="yes (closing the stream frees the slot)",
    template="the model's own (from /props), else chosen in Settings")

STOP_TYPES = {"eos": "stop", "word": "stop", "limit": "length"}

#: The slot the app's caches are saved from and restored into.
SLOT = 0
#: Seconds a slot save, restore or warm-up prefill may take (a long context on a slow CPU).
SLOT_TIMEOUT_S = 900.0

log = logging.getLogger("halo_weave.backends")


class LlamaServer:
    """``llama-server`` with token ids; the interface of :class:`KoboldClient`."""

    kind = "llama-server"
    capabilities = CAPABILITIES

    #: Warms its cache for a reopened conversation (:meth:`restore`); takes no draft prompt.
    restores = True
    read_ahead = False
    takes_messages = False
    #: Keeps no cache per conversation itself: slot 0 is saved after each answer (:meth:`save_cache`).
    saves_cache = True

    def __init__(self, base_url: str, *, api_key: str | None = None, props: dict | None = None) -> None:
        self.http = Http(base_url, api_key=api_key)
        self.base_url = self.http.base_url
        self._props = props
        self.version: str | None = None
        self._info: ModelInfo | None = None
        #: The conversation the app's requests are for (its slot file's name comes from it).
        self.conversation: str | None = None
        #: Whether the server saves slots to files (None: not asked yet; False: it answered 501).
        self.saves_slots: bool | None = None
        self._slot_holds: str | None = None  # the conversation slot 0 was last warmed or saved for
        #: One model per server: nothing to pick.
        self.models: list[str] = []
        self.model_id: str | None = None
        #: The chat template the connection frames with (:meth:`use_template`).
        self.template = None
        self.template_in_use = None
        self.template_choice: str | None = None

    def close(self) -> None:
        self.http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def label(self) -> str:
        return f"llama-server {self.version}" if self.version else "llama-server"

    @property
    def missing_model(self) -> str | None:
        return None  # one model per server

    def use_template(self, used, choice: str | None) -> None:
        """Frame with ``used`` (a ``TemplateInUse``), resolved from ``choice``."""
        self.template, self.template_in_use, self.template_choice = used.template, used, choice

    def model_info(self) -> ModelInfo:
        if self._info is not None:
            return self._info
        props = self._props or self.http.request("GET", "/props")
        settings = props.get("default_generation_settings") or {}
        n_ctx = settings.get("n_ctx", props.get("n_ctx"))
        known = isinstance(n_ctx, int) and n_ctx > 0
        build = props.get("build_info")
        self.version = str(build) if build else None
        template = props.get("chat_template")
        name = props.get("model_alias") or props.get("model_path") or "llama-server model"
        info = ModelInfo(
            name=str(name).replace("\\", "/").rsplit("/", 1)[-1], num_layers=0, num_heads=0, num_kv_heads=0,
            hidden_size=0, max_context=n_ctx if known else ASSUMED_CONTEXT, bos_token_id=None,
            eos_token_id=None, chat_template=template if isinstance(template, str) and template else None,
            supports_attention=False, raw=props)
        info.kind, info.version = self.kind, self.version
        info.server_max_context, info.context_known = info.max_context, known
        info.template_origin = "llama-server /props"
        info.eos_token = props.get("eos_token") if isinstance(props.get("eos_token"), str) else ""
        self._info = info
        return info

    def table_context(self, server_context: int) -> int:
        return server_context  # the table holds the server's own tokens

    def assume_context(self, server_context: int) -> int:
        return server_context  # the server cuts nothing by a request's size

    def measured_prompt(self, local_tokens: int | None, server_tokens: int | None) -> None:
        """Nothing to refine: the table holds the server's own tokens."""

    # -- tokens: the server's own

    def tokenize(self, text: str, add_special_tokens: bool = False, *,
                 parse_special: bool = False) -> list[tuple[int, str]]:
        if not text:
            return []
        # llama-server parses control-token strings unless told not to: always say which.
        data = self.http.request("POST", "/tokenize", {"content": text, "add_special": add_special_tokens,
                                                       "parse_special": parse_special, "with_pieces": True})
        tokens = data.get("tokens")
        if not isinstance(tokens, list):
            raise ProtocolError("/tokenize answered without a token list")
        ids, chunks = [], []
        for item in tokens:
            if isinstance(item, int) and not isinstance(item, bool):  # an older server: ids only
                ids.append(item)
                chunks.append(None)
                continue
            if not isinstance(item, dict) or not isinstance(item.get("id"), int):
                raise ProtocolError(f"/tokenize answered a malformed token {item!r:.80}")
            piece = item.get("piece", "")
            ids.append(item["id"])
            chunks.append(bytes(piece) if isinstance(piece, list) else str(piece).encode("utf-8"))
        if any(c is None for c in chunks):
            chunks = [self.detokenize([i]).encode("utf-8") for i in ids]
        return list(zip(ids, _pieces(chunks)))

    def detokenize(self, ids) -> str:
        data = self.http.request("POST", "/detokenize", {"tokens": [int(i) for i in ids]})
        text = data.get("content")
        if not isinstance(text, str):
            raise ProtocolError("/detokenize answered without content")
        return text

    def count_tokens(self, text: str) -> tuple[int, bool]:
        return len(self.tokenize(text)), True

    # -- streaming

    def stream(self, *, input_ids=None, prompt=None, max_length: int = 200, temperature: float = 0.7,
               top_p: float = 0.9, top_k: int = 40, rep_pen: float = 1.1, sampler_seed: int = -1,
               stop_sequence: Sequence[str] = (), request_id: str | None = None,
               raise_on_abort: bool = False, **_ignored) -> "LlamaStream":
        if (input_ids is None) == (prompt is None):
            raise ValueError("pass exactly one of input_ids and prompt")
        body = {
            "prompt": [int(i) for i in input_ids] if input_ids is not None else prompt,
            "n_predict": max_length, "temperature": temperature, "top_p": top_p, "top_k": top_k,
            "repeat_penalty": rep_pen, "seed": sampler_seed, "stop": list(stop_sequence),
            "stream": True, "cache_prompt": True, "return_tokens": True,
        }
        return LlamaStream(self, body, request_id=request_id or f"hw-{uuid.uuid4().hex[:12]}",
                           prompt_tokens=len(input_ids) if input_ids is not None else None,
                           raise_on_abort=raise_on_abort)

    def abort(self, request_id: str | None = None) -> bool:
        return False  # a stream is aborted through itself (closing its connection)

    def prepare(self, input_ids, max_length: int = 0, request_id: str | None = None, timeout: float = 60.0,
                queries=None) -> dict:
        raise BackendError(f"llama-server at {self.base_url} takes no prompt ahead (read_ahead is False): "
                           "a reopened conversation is warmed by restore()")

    # -- the slot's cache across reopenings (see the module docstring)

    def slot_file(self, key: str) -> str:
        """The file name slot 0 is saved under for conversation ``key`` (and this model)."""
        model = str((self._props or {}).get("model_path") or (self._info.name if self._info else ""))
        return "halo-weave-" + hashlib.sha256(f"{key}|{model}".encode()).hexdigest()[:32] + ".bin"

    def _slot_action(self, action: str, key: str) -> tuple[dict | None, str]:
        """``POST /slots/0?action=…`` for conversation ``key``'s file: the answer, or None and why."""
        if self.saves_slots is False:
            return None, "the server saves no slots (start it with --slot-save-path)"
        response = self.http.request("POST", f"/slots/{SLOT}?action={action}", {"filename": self.slot_file(key)},
                                     raw=True, timeout=SLOT_TIMEOUT_S)
        if response.status_code == 501:
            self.saves_slots = False
            return None, "the server saves no slots (start it with --slot-save-path)"
        if response.status_code != 200:
            return None, f"{action} answered {response.status_code}: {error_message(response)}"
        self.saves_slots = True
        try:
            data = response.json()
        except ValueError:
            return None, f"{action} answered with something that is not JSON"
        return (data, "") if isinstance(data, dict) else (None, f"{action} answered with no object")

    def save_cache(self) -> int:
        """Save slot 0 for the conversation it holds (after an answer); the tokens saved."""
        key = self._slot_holds
        if key is None or key != self.conversation:
            return 0
        answer, reason = self._slot_action("save", key)
        if answer is None:
            log.info("llama-server slot not saved: %s", reason)
            return 0
        saved = answer.get("n_saved")
        return saved if isinstance(saved, int) else 0

    def restore(self, input_ids, max_length: int = 0, conversation: str | None = None,
                request_id: str | None = None) -> dict:
        """Warm slot 0 for ``conversation`` (default :attr:`conversation`), reopened, whose live context is
        ``input_ids``: its saved slot read back where the server saves slots (a different
        conversation's slot saved first), then the context sent as a one-token completion,
        which runs what the restored tokens do not already hold.  Returns ``restored``,
        ``ran`` (tokens the server evaluated), ``seconds`` and ``reason``."""
        key = conversation or self.conversation
        if not key:
            raise ValueError("restore needs the conversation's key (LlamaServer.conversation)")
        started = time.perf_counter()
        if self._slot_holds is not None and self._slot_holds != key and self.saves_slots is not False:
            self._slot_action("save", self._slot_holds)
        answer, reason = self._slot_action("restore", key)
        restored = answer.get("n_restored", 0) if answer is not None else 0
        ids = [int(i) for i in input_ids]
        body = {"prompt": ids, "n_predict": 1, "cache_prompt": True, "id_slot": SLOT, "temperature": 0.0}
        final = self.http.request("POST", "/completion", body, timeout=SLOT_TIMEOUT_S)
        self._slot_holds = key
        timings = final.get("timings") or {}
        ran = timings.get("prompt_n")
        return {"restored": restored if isinstance(restored, int) else 0,
                "ran": ran if isinstance(ran, int) else len(ids), "prompt_tokens": len(ids),
                "seconds": round(time.perf_counter() - started, 4), "reason": reason}

    def abort_stream(self, stream: TextStream) -> None:
        stream.close_response()


class LlamaStream(TextStream):
    """The ``/completion`` stream: one event per token id, several when the server merges."""

    def __init__(self, backend: LlamaServer, body: dict, **kwargs) -> None:
        super().__init__(backend, "", {}, **kwargs)
        self.body = body

    def _events(self):
        self._start_clock()
        reason = None
        final: dict = {}
        held: list[int] = []  # token ids that came without text (see below)
        try:
            for data in self.sse("/completion", self.body):
                if "error" in data:
                    error = data["error"]
                    message = error.get("message") if isinstance(error, dict) else error
                    raise self._partial(StreamInterrupted, f"the server reported an error: {message}")
                content = data.get("content", "")
                ids = data.get("tokens")
                if not isinstance(content, str):
                    raise ProtocolError(f"an event without text content: {data!r:.120}")
                if ids is None:
                    ids = [i for i, _ in self.backend.tokenize(content)] if content else []
                if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
                    raise ProtocolError(f"an event with malformed token ids: {data!r:.120}")
                if not content:
                    # No text yet: the first bytes of a split character, or the end-of-generation
                    # token (a real llama-server streams it as {"content": "", "tokens": [2]}).
                    # Held until text or the end says which.
                    held.extend(ids)
                else:
                    for token_id in held:
                        yield self._add(token_id, "")
                    held.clear()
                for n, token_id in enumerate(ids if content else ()):
                    yield self._add(token_id, content if n == len(ids) - 1 else "")
                if not ids and content:  # text without an id: keep the text
                    yield self._add(-1, content)
                if data.get("stop") is True:
                    final = data
                    reason = STOP_TYPES.get(str(data.get("stop_type")), "stop")
                    if data.get("stop_type") == "eos" and held:
                        # The end token is not part of the answer: the chat framing closes the
                        # turn (an end token other than the template's would stay in the table).
                        held.pop()
                    break
                if self._abort_requested:
                    break
        except Exception as exc:  # noqa: BLE001 - translated below
            if not self._abort_requested:
                if isinstance(exc, BackendError) and hasattr(exc, "partial_text"):
                    raise
                raise self._translate(exc) from exc
        finally:
            self.close_response()
        for token_id in held:
            yield self._add(token_id, "")
        if self._abort_requested:
            reason = "abort"
        if reason is None:
            raise self._partial(StreamInterrupted, "the stream ended before the server said it was done")
        self._finish(reason, final)
        if self.done is not None:
            timings = final.get("timings") or {}
            evaluated = final.get("tokens_evaluated")
            cached = timings.get("cache_n")
            self.done.prompt_tokens = evaluated if isinstance(evaluated, int) else self._prompt_tokens
            self.done.reused_prefix_tokens = cached if isinstance(cached, int) else None
        if self.raise_on_abort and reason == "abort":
            raise self._partial(GenerationAborted, "the generation was aborted")


def _pieces(chunks: list[bytes]) -> list[str]:
    """Per-token text following the app's rule: split characters go to the completing token."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    return [decoder.decode(c, final=False) for c in chunks]

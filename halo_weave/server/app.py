"""HTTP routes (Starlette + sse-starlette) over an :class:`EngineBase`.

Concurrency: one generation at a time.  A generate request that finds the model busy
waits up to :data:`BUSY_WAIT_S` (so "abort, then resend" and a client that just
disconnected never see a spurious error), then gets **503** with a message.  Tokenize,
detokenize and model info never wait for a generation.

Errors are JSON ``{"error": msg, "detail": {"msg": msg, "type": kind}}`` (both
KoboldCPP shapes): 400 bad input, 404 unknown path, 405 wrong method, 413 body too
large, 503 busy.  Once a stream has started, a failure is sent as an
``{"type": "error", "message": ...}`` event and the stream is closed, never left hanging.
A client that disconnects mid-stream stops the generation after the current token.

``POST /api/v1/tokenize`` (``{"text", "add_special_tokens": false, "parse_special": false,
"with_pieces": true}``, ``content`` / ``add_special`` as aliases) answers ``{"tokens":
[{"token_id", "text"}], "token_ids", "token_count"}``.  Text is text: ``<|im_end|>`` in it
is the characters it is (and detokenizes back to them) unless ``"parse_special": true``
(llama-server's name), which chat framing sends to have its marker strings read as
control tokens.  A text ``prompt`` to generate is the client's framed chat, its markers
parsed as KoboldCPP parses them, and so is the text of ``POST /api/extra/tokencount``
(``{"prompt", "special": true}`` → ``{"value": n, "ids": [...]}``, KoboldCPP's counter,
the model's BOS in front unless ``"special": false`` or the text starts with it).

``POST /api/extra/prepare`` (``{"input_ids": [...]}``, our extension, declared by
``supports_prepare`` in ``/api/v1/model``) reads ahead: the cache takes a draft prompt
while the user types, so the generate that follows runs only what is new; it answers 503
when a generation keeps the model, and a generate stops a running one
(:meth:`EngineBase.prepare`).  With ``"queries": [...]`` (declared by ``supports_weighing``;
the llama.cpp engine) it reads them after the prompt and answers the ``attention`` they
pay each prompt position: the app keeps the part of a message's recall the message
attends to (:mod:`halo_weave.memory.attended`).

``POST /api/extra/restore`` (``{"conversation": key, "input_ids": [...]}``, our extension,
declared by ``supports_restore`` in ``/api/v1/model``, with ``restores_from_disk`` when the
engine keeps saved caches) warms the cache for a conversation being reopened: from the
cache saved for it while the server was idle, checked against the model and the token ids,
else by a prefill (:meth:`EngineBase.restore`).  A generate arriving meanwhile waits for it.
Generate and prepare requests may name their ``conversation`` too: its cache is what the
server saves once idle (:mod:`halo_weave.server.kv_files`).

``create_app(engine, attention=False)`` (``--no-attention``) serves like stock KoboldCPP:
``/api/v1/model`` declares no attention support, ``output_attentions`` is ignored and
``/api/extra/generate/stream`` sends KoboldCPP's text chunks (no token ids, no attention).

No CORS headers are sent: the desktop app needs none, and without them a web page
cannot read this local model's output.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time

from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .. import __version__
from . import limits, schema
from .engine_base import ATTENTION_FORMATS, EngineBase
from .engine_choice import engine_note
from .errors import EngineBusy, RequestError
from .guard import RequestGuard
from .generation import DoneRecord

log = logging.getLogger("halo_weave.server")

#: How long a generate request waits for a running generation before a 503.
BUSY_WAIT_S = 2.0
BUSY_POLL_S = 0.02

#: Largest request body accepted (KoboldCPP's default ``--maxrequestsize``).
MAX_BODY_BYTES = 32 * 1024 * 1024

#: Largest ``/abort`` body (it carries at most a request id): read and parsed at once.
MAX_ABORT_BODY_BYTES = 64 * 1024

#: Bodies larger than this are parsed on a worker thread, not on the event loop.
PARSE_ON_LOOP_BYTES = 64 * 1024

#: KoboldAI API version reported to clients that probe ``/api/v1/info/version``.
KOBOLD_API_VERSION = "1.2.5"
#: The KoboldCPP release whose wire format we follow.
KOBOLDCPP_VERSION = "1.101.1"

_END = object()


def tokenize_answer(ids: list[int], pieces: list[str] | None, slice_items: int = 8192) -> bytes:
    """The tokenize answer's JSON, encoded in slices without a dict per token.

    One ``json.dumps`` of a million token dicts holds the GIL for most of a second, and
    the dicts make the garbage collector walk millions of objects: either stalls the
    event loop (and /abort) even from a worker thread.
    """
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
    tokens, id_parts = [], []
    for start in range(0, len(ids), slice_items):
        part = ids[start : start + slice_items]
        id_parts.append(dumps(part)[1:-1].encode())
        if pieces is None:
            text = ",".join(map('{{"id":{}}}'.format, part))
        else:
            texts = map(dumps, pieces[start : start + slice_items])
            text = ",".join(map('{{"token_id":{},"text":{}}}'.format, part, texts))
        tokens.append(text.encode("utf-8"))
    # Bytes joined at the end: one big str would be copied (and widened) at every step.
    return b"".join([b'{"tokens":[', b",".join(tokens), b'],"token_ids":[', b",".join(id_parts),
                     b'],"token_count":', str(len(ids)).encode(), b"}"])


def error_response(status: int, message: str, kind: str = "bad_input") -> JSONResponse:
    return JSONResponse({"error": message, "detail": {"msg": message, "type": kind}}, status)


def model_info(engine: EngineBase, attention: bool = True) -> dict:
    """``/api/v1/model``: KoboldCPP's fields plus the chat template and attention facts."""
    name = f"halo-weave/{engine.name}"
    info = {
        "result": name,
        "model_name": name,
        "vocab_size": engine.vocab_size,
        "num_layers": engine.num_layers,
        "num_attention_heads": engine.num_heads,
        "max_context_length": engine.context_size,
        **engine.describe(),
        "rope_freq_scale": 1.0,
        "chat_template": engine.chat_template(),
        "chat_template_tokens": engine.template_tokens(),
        "stop_token_ids": sorted(engine.stop_ids),
        "server": "halo-weave",
        "engine": engine.kind,
        "device": engine.device,
        "kv_mode": engine.kv.mode,
        "kv_tail_first": engine.kv.tail_first,
        "kv_restore": engine.kv.store.restore,
        "version": __version__,
    }
    note = engine_note(engine.kind, engine.model_note)
    if note:
        info["engine_note"] = note
    if attention:
        info.update({
            "supports_attention": True,
            "supports_prepare": True,
            "supports_restore": True,
            "supports_weighing": engine.weighs,
            "restores_from_disk": engine.keeps_states,
            "attention_formats": list(ATTENTION_FORMATS),
            "default_attention_format": engine.default_attention_format,
            "attention_aggregation": "mean over all layers and heads, live context length",
        })
    return info


def create_app(engine: EngineBase, *, attention: bool = True, api_key: str | None = None) -> Starlette:
    """The Starlette application serving ``engine`` (``attention=False``: stock KoboldCPP).

    Every request passes :class:`~halo_weave.server.guard.RequestGuard` (the key when
    ``api_key`` is set, no foreign Origin, JSON bodies only).
    """

    async def get_model(request: Request) -> JSONResponse:
        return JSONResponse(model_info(engine, attention))

    async def api_version(request: Request) -> JSONResponse:
        return JSONResponse({"result": KOBOLD_API_VERSION})

    async def extra_version(request: Request) -> JSONResponse:
        return JSONResponse({
            "result": "KoboldCpp", "version": KOBOLDCPP_VERSION, "protected": False,
            "txt2img": False, "vision": False, "transcribe": False, "multiplayer": False,
            "websearch": False, "tts": False, "embeddings": False,
            "halo_weave": __version__, "attention": attention,
        })

    async def max_context(request: Request) -> JSONResponse:
        return JSONResponse({"value": engine.context_size})

    async def max_length(request: Request) -> JSONResponse:
        return JSONResponse({"value": schema.DEFAULT_MAX_LENGTH})

    async def tokenize(request: Request) -> JSONResponse:
        text, add_special, parse_special, with_pieces = schema.tokenize_args(await _json(request))

        def answer() -> bytes:  # on a worker: a million tokens take a second to encode
            ids, pieces = engine.token_columns(text, add_special, parse_special)
            return tokenize_answer(ids, pieces if with_pieces else None)

        return Response(await run_in_threadpool(answer), media_type="application/json")

    async def tokencount(request: Request) -> JSONResponse:
        prompt, special = schema.tokencount_args(await _json(request))
        ids = await run_in_threadpool(lambda: engine.count_prompt(prompt, add_bos=special))
        return JSONResponse({"value": len(ids), "ids": ids})

    async def detokenize(request: Request) -> JSONResponse:
        body = await _json(request)
        # A million ids take a while to check and join: not on the event loop.
        text = await run_in_threadpool(lambda: engine.detokenize(schema.detokenize_ids(body, engine)))
        return JSONResponse({"text": text})

    async def abort(request: Request) -> JSONResponse:
        try:
            body = await _json(request, MAX_ABORT_BODY_BYTES)
        except RequestError:
            body = {}
        target = body.get("request_id", body.get("genkey"))
        stopped = engine.abort(str(target) if target else None)
        flag = "true" if stopped else "false"  # strings, as KoboldCPP answers
        return JSONResponse({"success": flag, "done": flag})

    async def prepare(request: Request) -> JSONResponse:
        # Read-ahead (our extension, see EngineBase.prepare): the cache takes the draft
        # prompt now; busy (beyond a generation's last moments) answers 503.
        body = await _json(request)
        ids = body.get("input_ids")
        if not isinstance(ids, list):
            raise RequestError("input_ids must be a list of token ids")
        request_id = body.get("request_id")
        request_id = str(request_id) if isinstance(request_id, (str, int)) and not isinstance(request_id, bool) else None
        conversation = schema.conversation_key(body)
        queries = body.get("queries")
        if queries is not None and not isinstance(queries, list):
            raise RequestError("queries must be a list of token ids")
        try:
            max_length = body.get("max_length", 0)
            result = await _on_own_thread(lambda: engine.prepare(ids, max_length=max_length, request_id=request_id,
                                                                 conversation=conversation, queries=queries))
        except EngineBusy as exc:
            return error_response(503, f"Server is busy: {exc}", "service_unavailable")
        return JSONResponse(result)

    async def restore(request: Request) -> JSONResponse:
        # A conversation reopened: its saved cache, else a prefill (EngineBase.restore).
        body = await _json(request)
        ids = body.get("input_ids")
        if not isinstance(ids, list):
            raise RequestError("input_ids must be a list of token ids")
        conversation = schema.conversation_key(body, required=True)
        request_id = body.get("request_id")
        request_id = str(request_id) if isinstance(request_id, (str, int)) and not isinstance(request_id, bool) else None
        max_length = body.get("max_length", 0)
        try:
            result = await _on_own_thread(lambda: engine.restore(ids, conversation, max_length=max_length,
                                                                 request_id=request_id))
        except EngineBusy as exc:
            return error_response(503, f"Server is busy: {exc}", "service_unavailable")
        log.info("restore: %d prompt tokens, %d from the saved cache, %d run, %.2f s%s", result["prompt_tokens"],
                 result["restored"], result["ran"], result["seconds"],
                 f" ({result['reason']})" if result["reason"] else "")
        return JSONResponse(result)

    async def generate_stream(request: Request):
        body = await _json(request)
        kwargs = await run_in_threadpool(schema.generate_kwargs, body, engine)
        token_events = schema.wants_token_events(body)
        if not attention:
            # Stock KoboldCPP knows neither attention nor per-token events.
            kwargs["output_attentions"], token_events = False, False
        deadline = time.monotonic() + BUSY_WAIT_S
        while True:
            try:
                # On a worker: checking stop strings tokenizes them (never on the event loop).
                generation = await run_in_threadpool(lambda: engine.generate(**kwargs))
                break
            except EngineBusy as exc:
                if time.monotonic() >= deadline:
                    return error_response(503, f"Server is busy: {exc}", "service_unavailable")
                await asyncio.sleep(BUSY_POLL_S)
        log.info(
            "generate: %d prompt tokens, max_length %d, attention %s",
            len(kwargs["input_ids"]), kwargs["max_length"], kwargs["output_attentions"],
        )
        events = _stream_events(engine, generation, kwargs, token_events)
        return EventSourceResponse(events, ping=15, headers={"Cache-Control": "no-cache, no-store"})

    routes = [
        Route("/api/v1/model", get_model),
        Route("/api/latest/model", get_model),
        Route("/api/v1/info/version", api_version),
        Route("/api/extra/version", extra_version),
        Route("/api/v1/config/max_context_length", max_context),
        Route("/api/v1/config/max_length", max_length),
        Route("/api/v1/tokenize", tokenize, methods=["POST"]),
        Route("/api/extra/tokencount", tokencount, methods=["POST"]),
        Route("/api/v1/detokenize", detokenize, methods=["POST"]),
        Route("/api/extra/detokenize", detokenize, methods=["POST"]),
        Route("/api/extra/generate/stream", generate_stream, methods=["POST"]),
        Route("/api/extra/abort", abort, methods=["POST"]),
    ]
    if attention:  # stock KoboldCPP has no read-ahead: without attention we serve as it does
        routes.append(Route("/api/extra/prepare", prepare, methods=["POST"]))
        routes.append(Route("/api/extra/restore", restore, methods=["POST"]))
    handlers = {
        RequestError: _request_error,
        HTTPException: _http_error,
        Exception: _internal_error,
    }
    middleware = [Middleware(RequestGuard, api_key=api_key)]
    return Starlette(routes=routes, exception_handlers=handlers, middleware=middleware)


async def _json(request: Request, limit: int = MAX_BODY_BYTES) -> dict:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, f"request body larger than {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(413, f"request body larger than {limit} bytes")
        chunks.append(chunk)
    if size <= PARSE_ON_LOOP_BYTES:
        return schema.parse_json_object(b"".join(chunks))
    def parse() -> dict:
        body = b"".join(chunks)
        limits.check_raw_body(body)
        return schema.parse_json_object(body)

    return await run_in_threadpool(parse)


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    where = f"{request.method} {request.url.path}"
    if exc.status_code == 404:
        return error_response(404, f"this endpoint does not exist: {where}", "not_found")
    if exc.status_code == 405:
        return error_response(405, f"method not allowed: {where}", "method_not_allowed")
    return error_response(exc.status_code, str(exc.detail))


async def _request_error(request: Request, exc: RequestError) -> JSONResponse:
    return error_response(400, str(exc))


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    log.exception("internal error on %s", request.url.path)
    return error_response(500, f"internal server error: {exc}", "server_error")


async def _stream_events(engine: EngineBase, generation, kwargs: dict, token_events: bool):
    """Run ``generation`` on a worker thread and relay its records as SSE events.

    Encoding (base64 of per_layer arrays) happens on the worker too, so the event loop
    stays free to notice a disconnect; the ``finally`` turns a disconnect (sse-starlette
    cancels this generator) into an abort that lands after the current token.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    attention = kwargs["output_attentions"]
    request_id = kwargs.get("request_id")

    def put(item) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # event loop closed: server shutting down
            generation.abort()

    def work() -> None:
        try:
            for record in generation:
                if isinstance(record, DoneRecord):
                    log.info(
                        "done: %s, %d tokens, %d prompt (%d reused), %.2f tok/s",
                        record.finish_reason, record.generated_tokens, record.prompt_tokens,
                        record.reused_prefix_tokens, record.tokens_per_s,
                    )
                    put(schema.done_event(record) if token_events
                        else schema.legacy_event("", record.finish_reason))
                    put(_END)  # the stream ends here; the engine may tidy its cache after
                elif token_events:
                    put(schema.token_event(record, engine, attention=attention, request_id=request_id))
                elif record.text:
                    put(schema.legacy_event(record.text, None))
        except Exception as exc:  # noqa: BLE001 - reported to the client, never a hung stream
            log.exception("generation failed")
            put(schema.error_event(f"generation failed: {exc}", request_id))
        finally:
            put(_END)

    threading.Thread(target=work, name="generation", daemon=True).start()
    try:
        while True:
            item = await queue.get()
            if item is _END:
                return
            yield {"event": "message", "data": item}
    finally:
        generation.abort()


async def _on_own_thread(fn):
    """``fn()`` on a new thread, as a generation runs: model work never runs on the
    server's pool of worker threads.  An OpenMP thread team belongs to the thread that
    starts it, and a team left to a long-lived pool thread slowed every later decode
    (measured: a read-ahead run on the pool took the answers after it from 83 to 37
    tokens/s on two cores, for good; on a thread of its own, 97-102 tokens/s)."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def work():
        try:
            result = fn()
        except BaseException as exc:  # noqa: BLE001
            loop.call_soon_threadsafe(future.set_exception, exc)
        else:
            loop.call_soon_threadsafe(future.set_result, result)

    threading.Thread(target=work, daemon=True).start()
    return await future

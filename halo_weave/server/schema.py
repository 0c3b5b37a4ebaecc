"""Request validation and event encoding for the HTTP layer (no HTTP here).

Unknown fields are ignored (KoboldAI clients send dozens), but a known field of the
wrong type is an error, so a client bug surfaces as a 400 with the field's name instead
of a silently different generation.  Events are encoded with ``json.dumps`` defaults,
like KoboldCPP: ``", "`` / ``": "`` separators and non-ASCII escaped as ``\\uXXXX``.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import numpy as np

from . import limits
from .engine_base import ATTENTION_FORMATS, PER_LAYER
from .engine_base import EngineBase
from .errors import RequestError
from .generation import DoneRecord, TokenRecord

#: Tokens generated when a request names no ``max_length``.
DEFAULT_MAX_LENGTH = 200

#: Longest text ``/api/v1/tokenize`` accepts, in characters.
MAX_TOKENIZE_CHARS = 1_000_000

_NUMBER = (int, float)

#: Generate-request fields the server uses: name -> (accepted types, engine keyword).
GENERATE_FIELDS: dict[str, tuple[tuple[type, ...], str | None]] = {
    "max_length": ((int,), "max_length"),
    "temperature": (_NUMBER, "temperature"),
    "top_p": (_NUMBER, "top_p"),
    "top_k": ((int,), "top_k"),
    "rep_pen": (_NUMBER, "rep_pen"),
    "rep_pen_range": ((int,), "rep_pen_range"),
    "sampler_seed": ((int,), "sampler_seed"),
    "max_context_length": ((int,), None),
}


def parse_json_object(body: bytes) -> dict:
    """The request body as a JSON object (whatever the Content-Type says, as KoboldCPP)."""
    try:
        data = json.loads(body.decode("utf-8") if body else "{}")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RequestError(f"request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise RequestError("request body is nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise RequestError(f"request body is not usable JSON: {exc}") from None
    if not isinstance(data, dict):
        raise RequestError("request body must be a JSON object")
    return data


def generate_kwargs(body: dict, engine: EngineBase) -> dict[str, Any]:
    """Validated keyword arguments for :meth:`EngineBase.generate` from a request body."""
    limits.check_generate(body, engine.context_size)
    kwargs: dict[str, Any] = {"max_length": DEFAULT_MAX_LENGTH}
    for name, (types, keyword) in GENERATE_FIELDS.items():
        if name not in body or body[name] is None:
            continue
        value = body[name]
        if isinstance(value, bool) or not isinstance(value, types):
            kind = "an integer" if types == (int,) else "a number"
            raise RequestError(f"{name} must be {kind}, got {json.dumps(value)[:40]}")
        if isinstance(value, float) and not math.isfinite(value):
            raise RequestError(f"{name} must be finite")
        if keyword:
            kwargs[keyword] = value

    input_ids = body.get("input_ids")
    if input_ids:
        kwargs["input_ids"] = engine.check_ids(input_ids)
    else:
        if input_ids is not None and not isinstance(input_ids, list):
            raise RequestError("input_ids must be a list of integers")
        prompt = body.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise RequestError("send input_ids (a non-empty list of token ids) or a non-empty prompt")
        # A text prompt is the client's framed chat, read as KoboldCPP reads it: its
        # marker strings are control tokens, and it gets the BOS where the model's
        # tokenizer adds one; input_ids are used as given.
        kwargs["input_ids"] = [i for i, _ in engine.tokenize(prompt, add_special_tokens=True, parse_special=True)]

    limit = body.get("max_context_length")
    if isinstance(limit, int) and len(kwargs["input_ids"]) + kwargs["max_length"] > limit:
        raise RequestError(
            f"prompt of {len(kwargs['input_ids'])} tokens + max_length {kwargs['max_length']} "
            f"exceeds max_context_length {limit}"
        )

    stops = body.get("stop_sequence")
    if stops is not None:
        if isinstance(stops, str):
            stops = [stops]
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise RequestError("stop_sequence must be a list of strings")
        kwargs["stop_sequence"] = stops

    kwargs["output_attentions"] = _flag(body, "output_attentions")
    fmt = body.get("attention_format")
    if fmt is not None:
        if fmt not in ATTENTION_FORMATS:
            raise RequestError(f"attention_format must be one of {list(ATTENTION_FORMATS)}")
        kwargs["attention_format"] = fmt

    request_id = body.get("request_id", body.get("genkey"))
    if request_id is not None:
        if isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
            raise RequestError("request_id must be a string")
        kwargs["request_id"] = str(request_id) or None
    conversation = conversation_key(body)
    if conversation is not None:
        kwargs["conversation"] = conversation
    return kwargs


def conversation_key(body: dict, required: bool = False) -> str | None:
    """The ``conversation`` a request names (our extension: whose cache is saved when idle)."""
    from .kv_files import MAX_KEY_CHARS

    key = body.get("conversation")
    if key is None and not required:
        return None
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS:
        raise RequestError(f"conversation must be a string of 1 to {MAX_KEY_CHARS} characters")
    return key


def wants_token_events(body: dict) -> bool:
    """Per-token events (ids, attention) or KoboldCPP's legacy text chunks.

    As in the original fork, per-token mode is on when attention or hidden states are
    asked for; ``"per_token": true`` (our extension) asks for it without attention.
    """
    return any(_flag(body, key) for key in ("output_attentions", "output_hidden_states", "per_token"))


def _flag(body: dict, key: str) -> bool:
    value = body.get(key, False)
    if value is None:
        return False
    if not isinstance(value, (bool, int)):
        raise RequestError(f"{key} must be true or false")
    return bool(value)


def tokenize_args(body: dict) -> tuple[str, bool, bool, bool]:
    """``(text, add_special_tokens, parse_special, with_pieces)`` from a tokenize request.

    ``parse_special`` (llama-server's name, default false) is how chat framing asks for
    its marker strings as control tokens; without it ``<|im_end|>`` in a message is text.
    """
    text = _text_field(body.get("text", body.get("content")), "text")
    add = body.get("add_special_tokens", body.get("add_special", False))
    parse = body.get("parse_special", False)
    pieces = body.get("with_pieces", True)
    if not all(isinstance(flag, bool) for flag in (add, parse, pieces)):
        raise RequestError("add_special_tokens, parse_special and with_pieces must be true or false")
    return text, add, parse, pieces


def tokencount_args(body: dict) -> tuple[str, bool]:
    """``(prompt, special)`` from KoboldCPP's ``/api/extra/tokencount`` request.

    ``special`` (default true) adds the model's BOS, as KoboldCPP does to a prompt.
    """
    prompt = _text_field(body.get("prompt", ""), "prompt")
    special = body.get("special", True)
    if not isinstance(special, bool):
        raise RequestError("special must be true or false")
    return prompt, special


def _text_field(text, name: str) -> str:
    if not isinstance(text, str):
        raise RequestError(f"{name} must be a string")
    limits.check_text(text, name)
    if len(text) > min(MAX_TOKENIZE_CHARS, limits.MAX_TEXT_CHARS):
        raise RequestError(f"{name} longer than {MAX_TOKENIZE_CHARS} characters")
    return text


def detokenize_ids(body: dict, engine: EngineBase) -> list[int]:
    ids = body.get("token_ids", body.get("tokens"))
    if ids is None:
        raise RequestError("token_ids is required")
    limits.check_detokenize(ids)
    return engine.check_ids(ids, allow_empty=True)


# ------------------------------------------------------------------ events


def attention_payload(array: np.ndarray, engine: EngineBase) -> dict:
    """The wire form of one token's attention (``aggregated`` or ``per_layer``)."""
    per_layer = array.ndim == 3
    return {
        "format": PER_LAYER if per_layer else "aggregated",
        "shape": list(array.shape),
        "context_length": int(array.shape[-1]),
        "n_layers": engine.num_layers,
        "n_heads": engine.num_heads,
        "encoding": "base64",
        "dtype": "float32",
        "data": base64.b64encode(np.ascontiguousarray(array, dtype="<f4").tobytes()).decode("ascii"),
    }


def token_event(record: TokenRecord, engine: EngineBase, *, attention: bool, request_id: str | None) -> str:
    event: dict[str, Any] = {"type": "token", "token": {"token_id": record.token_id, "text": record.text}}
    if request_id:
        event["request_id"] = request_id
    if attention:
        event["attention"] = (
            attention_payload(record.attention, engine) if record.attention is not None else None
        )
    return json.dumps(event)


def done_event(record: DoneRecord) -> str:
    event = {
        "type": "done",
        "finish_reason": record.finish_reason,
        "total_tokens": record.generated_tokens,
    }
    if record.request_id:
        event["request_id"] = record.request_id
    event.update(
        prompt_tokens=record.prompt_tokens,
        reused_prefix_tokens=record.reused_prefix_tokens,
        processed_prompt_tokens=record.processed_prompt_tokens,
        sampler_seed=record.sampler_seed,
        stop_sequence=record.stop_sequence,
        kv=record.kv,
        timings={
            "prefill_s": record.prefill_s,
            "sync_s": record.sync_s,
            "time_to_first_token_s": record.time_to_first_token_s,
            "decode_s": record.decode_s,
            "tokens_per_s": record.tokens_per_s,
            "total_s": record.total_s,
            "waited_s": record.waited_s,
        },
    )
    return json.dumps(event)


def error_event(message: str, request_id: str | None) -> str:
    event = {"type": "error", "message": message}
    if request_id:
        event["request_id"] = request_id
    return json.dumps(event)


def legacy_event(text: str, finish_reason: str | None) -> str:
    """Stock KoboldCPP's text-chunk event."""
    return json.dumps({"token": text, "finish_reason": finish_reason})

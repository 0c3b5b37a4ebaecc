"""Limits on every field of a request, checked before any work is done for it.

A request is refused with HTTP 400 naming the field, the limit and what was sent, before
anything is tokenized or allocated: a 32 MB ``stop_sequence`` used to be tokenized on the
event loop for 48 s, and an out-of-range ``sampler_seed`` was accepted and then failed
inside the stream.  The numbers are generous for any real client (KoboldAI
Lite, SillyTavern, the Halo Weave app) and small enough that no field can cost more
than a fraction of a second.
"""

from __future__ import annotations

import json
import math
from typing import Any

from .errors import RequestError

#: Stop strings: how many, and how long each may be (characters).
MAX_STOP_STRINGS = 64
MAX_STOP_CHARS = 1000

#: Text to tokenize, or a text prompt, in characters.
MAX_TEXT_CHARS = 1_000_000

#: Token ids in a detokenize request (more than any context; parsing a million ids held
#: the GIL long enough to delay /abort past 100 ms).
MAX_DETOKENIZE_IDS = 262_144

#: A request id / genkey, in characters.
MAX_REQUEST_ID_CHARS = 256

#: Seeds are C ints in KoboldCPP; torch takes them as given.
SEED_RANGE = (-(2**31), 2**31 - 1)

#: Numeric fields of a generate request: name -> (lowest, highest).
NUMBER_RANGES: dict[str, tuple[float, float]] = {
    "max_length": (1, 2**31 - 1),
    "max_context_length": (1, 2**31 - 1),
    "temperature": (0, 100),
    "top_p": (0, 1),
    "top_k": (0, 2**31 - 1),
    "rep_pen": (0, 100),
    "rep_pen_range": (-1, 2**31 - 1),
    "sampler_seed": SEED_RANGE,
}


def _shown(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"


def check_numbers(body: dict) -> None:
    """Every numeric field within its range (types are checked by the schema)."""
    for name, (lo, hi) in NUMBER_RANGES.items():
        value = body.get(name)
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise RequestError(f"{name} must be finite")
        if not lo <= value <= hi:
            raise RequestError(f"{name} must be between {lo} and {hi}, got {_shown(value)}")


def check_stop_sequence(stops: Any) -> None:
    """At most :data:`MAX_STOP_STRINGS` strings of at most :data:`MAX_STOP_CHARS` each."""
    if stops is None:
        return
    if isinstance(stops, str):
        stops = [stops]
    if not isinstance(stops, list):
        raise RequestError("stop_sequence must be a list of strings")
    if len(stops) > MAX_STOP_STRINGS:
        raise RequestError(f"stop_sequence has {len(stops)} strings; at most {MAX_STOP_STRINGS} are accepted")
    for i, stop in enumerate(stops):
        if isinstance(stop, str) and len(stop) > MAX_STOP_CHARS:
            raise RequestError(
                f"stop_sequence[{i}] is {len(stop)} characters long; at most {MAX_STOP_CHARS} are accepted"
            )


def check_text(value: Any, field: str) -> None:
    """A string field must be valid Unicode: JSON can spell a lone surrogate (``"\\ud800"``),
    which the tokenizer cannot take (it answered 500)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise RequestError(f"{field} holds text that is not valid Unicode (a lone surrogate at "
                               f"character {exc.start})") from None


def check_generate(body: dict, context_size: int) -> None:
    """Limits of a generate request (before its prompt is tokenized or its ids checked)."""
    check_numbers(body)
    check_stop_sequence(body.get("stop_sequence"))
    check_text(body.get("prompt"), "prompt")
    stops = body.get("stop_sequence")
    for i, stop in enumerate(stops if isinstance(stops, list) else [stops]):
        check_text(stop, f"stop_sequence[{i}]" if isinstance(stops, list) else "stop_sequence")
    for field in ("request_id", "genkey"):
        check_text(body.get(field), field)
    ids = body.get("input_ids")
    if isinstance(ids, list) and len(ids) > context_size:
        raise RequestError(f"input_ids has {len(ids)} tokens, more than the context size of {context_size}")
    prompt = body.get("prompt")
    if isinstance(prompt, str) and len(prompt) > MAX_TEXT_CHARS:
        raise RequestError(f"prompt is {len(prompt)} characters long; at most {MAX_TEXT_CHARS} are accepted")
    request_id = body.get("request_id", body.get("genkey"))
    if isinstance(request_id, str) and len(request_id) > MAX_REQUEST_ID_CHARS:
        raise RequestError(f"request_id is longer than {MAX_REQUEST_ID_CHARS} characters")


def check_detokenize(ids: Any) -> None:
    if isinstance(ids, list) and len(ids) > MAX_DETOKENIZE_IDS:
        raise RequestError(f"token_ids has {len(ids)} ids; at most {MAX_DETOKENIZE_IDS} are accepted")


#: Longest JSON text any accepted field can need: a 1M-character text of astral
#: characters sent as ``\uXXXX\uXXXX`` escapes, with room to spare.
MAX_VALUE_BYTES = 13 * 1024 * 1024

#: Bodies at least this large are scanned by :func:`check_raw_body` before parsing.
SCAN_BODY_BYTES = 8 * 1024 * 1024


def check_raw_body(body: bytes) -> None:
    """Refuse a body holding a value longer than any field accepts, without parsing it.

    Parsing a 30 MB string is one call that holds the GIL for tens of milliseconds (and
    /abort waits behind it); a run of :data:`MAX_VALUE_BYTES` without a quote can only
    be one string or number, and no field accepts that much.  Each ``find`` is short.
    """
    if len(body) < SCAN_BODY_BYTES:
        return
    position, end = 0, len(body)
    while position < end:
        quote = body.find(b'"', position, min(end, position + MAX_VALUE_BYTES + 1))
        if quote == -1:
            if min(end, position + MAX_VALUE_BYTES + 1) - position > MAX_VALUE_BYTES:
                raise RequestError(
                    f"the request body holds a value longer than {MAX_VALUE_BYTES >> 20} MB; "
                    "no field accepts that much"
                )
            return
        position = quote + 1

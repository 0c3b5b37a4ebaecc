"""What a model server's stream is made of, shared by every backend and the session.

One typed :class:`TokenEvent` travels from the client (or a backend) to
:class:`halo_weave.session.ChatSession` unchanged; :class:`DoneEvent` ends a stream;
:class:`ModelInfo` describes the served model and :class:`Capabilities` what its server
can do.  Pure data, Qt-free, below every module
that produces or consumes it, so ``kobold_client`` and the backends never need each
other for their types.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Iterable, Iterator

import numpy as np

#: Token id reported for events that carry none (stock KoboldCPP chunks, fork nulls).
NO_TOKEN_ID = -1


@dataclass
class ModelInfo:
    """What ``/api/v1/model`` says about the served model.

    ``supports_attention`` is True when the server declares it streams attention (ours
    does); the original fork does not declare it, so for it this is False and the token
    events tell (``GenerationStream.stats.attention_events``).
    """

    name: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    hidden_size: int
    max_context: int
    bos_token_id: int | None
    eos_token_id: int | None
    chat_template: str | None
    supports_attention: bool
    raw: dict
    # What kind of server answered (halo_weave.backends): set by the backend.
    kind: str = "halo"
    version: str | None = None
    server_max_context: int | None = None  # in the server's tokens (max_context: table units)
    context_known: bool = True  # False: the server does not say; max_context is assumed
    #: Where ``chat_template`` came from, in words ("llama-server /props"), and the
    #: end-of-sequence token's text when the server says it ("" when it does not).
    template_origin: str = "the server"
    eos_token: str = ""


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, as the app and ``--probe`` report it.

    ``attention``: streams attention (``None``: unknown until the first answer, the
    original fork).  ``token_ids``: the token table holds the server's own token ids
    (exact prompts, prefix caching by ids).  ``exact_tokens``: budgets count the server's
    own tokens (its tokenizer or counter); otherwise counts are the bundled tokenizer's
    estimate.  ``prefix_cache``, ``abort``, ``template``: one phrase each, for the status
    tooltip and the closing note's table.  ``weighs``: reads a message after the prompt and
    answers the attention it pays the prompt (our server on llama.cpp:
    ``prepare(..., queries=...)``).
    """

    attention: bool | None
    token_ids: bool
    exact_tokens: bool
    prefix_cache: str
    abort: str
    template: str
    weighs: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class TokenEvent:
    """One generated token: id (-1 if the server sent none), text piece, attention.

    ``attention`` is float32 1-D over the live context, already the mean over layers
    and heads, or None (not sent, first token of the fork, or unusable payload).
    """

    token_id: int
    text: str
    attention: np.ndarray | None


@dataclass
class DoneEvent:
    """How a generation ended.  Timings are measured by this client.

    ``time_to_first_token_s``: request sent to first token event.  ``tokens_per_s``:
    token events after the first divided by the time between first and last.
    ``finish_reason``: "stop" (stop token or stop sequence), "length", "abort" (ours, or
    any stream this client aborted), or what another server says.
    """

    finish_reason: str
    total_tokens: int
    prompt_tokens: int | None
    reused_prefix_tokens: int | None
    time_to_first_token_s: float
    tokens_per_s: float
    text: str
    processed_prompt_tokens: int | None = None
    raw: dict = field(default_factory=dict)


@dataclass
class StreamStats:
    """Counts of what a stream received (for the status bar and for tests)."""

    events: int = 0
    token_events: int = 0
    attention_events: int = 0
    attention_missing: int = 0
    attention_errors: int = 0
    ignored_events: int = 0
    last_attention_error: str | None = None


def token_events(stream: Iterable[TokenEvent], backend) -> Iterator[TokenEvent]:
    """The stream's events, each with a token id (blocking; the app's stream thread).

    A server that streams text without ids (stock KoboldCPP) gets its text tokenized
    here by ``backend``: the context needs ids.
    """
    for event in stream:
        if event.token_id < 0:
            for token_id, text in backend.tokenize(event.text, add_special_tokens=False):
                yield TokenEvent(int(token_id), text, None)
        else:
            yield event

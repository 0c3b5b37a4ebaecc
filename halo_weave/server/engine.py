"""The model behind the server, usable in-process without HTTP.

>>> engine = Engine.load()                                    # doctest: +SKIP
>>> ids = [i for i, _ in engine.tokenize("<|im_start|>user\\nHi<|im_end|>\\n")]
>>> for record in engine.generate(ids, max_length=8):         # doctest: +SKIP
...     print(record)       # TokenRecord(token_id, text, attention), then one DoneRecord

Attention semantics (the same as the wire protocol's token events): the attention of
generated token *i* is the row of the query that *produced* it, i.e. position
``len(input_ids) + i - 1``, over keys ``0 .. len(input_ids) + i - 1``; ``aggregated`` is
its mean over all layers and heads (length ``len(input_ids) + i``, sums to 1),
``per_layer`` the full ``[layers, heads, len(input_ids) + i]`` array.  The first token
has attention too: the last prompt token is run on its own with attention output.

Only one generation runs at a time (:class:`EngineBusy` otherwise).  Text pieces follow
:mod:`halo_weave.server.tokens`: a token that ends inside a UTF-8 character has text
``""`` and the token completing it carries the whole character.  A stop token (EOS,
``<|im_end|>``) ends the generation with ``finish_reason == "stop"`` and is not yielded.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

import numpy as np
import torch

from . import loader
from .generation import DoneRecord, Generation, GenerationRequest, TokenRecord
from .errors import EngineBusy, RequestError
from .kv import ContextCache
from .sampling import sampler_settings
from .tokens import TokenText

log = logging.getLogger("halo_weave.server")

AGGREGATED = "aggregated"
PER_LAYER = "per_layer"
ATTENTION_FORMATS = (AGGREGATED, PER_LAYER)

#: Stop-token names looked up in the vocabulary besides the configured EOS ids.
STOP_TOKEN_NAMES = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>", "</s>")

#: Forced tokens run per forward pass in :meth:`Engine.teacher_force` (bounds memory).
TEACHER_FORCE_CHUNK = 64

#: ChatML, used when the model ships no template but has the ChatML tokens.
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@dataclass
class Engine:
    """A loaded model, its tokenizer, and the KV cache reused across requests."""

    model: object
    tokenizer: object
    name: str
    device: str
    context_size: int
    default_attention_format: str = AGGREGATED
    loaded_from_cache: bool = False
    text: TokenText = field(init=False)
    stop_ids: frozenset[int] = field(init=False)
    _cache: ContextCache = field(init=False)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    _tokenizer_lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    _running: Generation | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.text = TokenText(self.tokenizer)
        self.stop_ids = frozenset(self._find_stop_ids())
        self._cache = ContextCache(self.model, self.device)

    # ---------------------------------------------------------------- loading

    @classmethod
    def load(
        cls,
        model: str | None = None,
        device: str = "auto",
        context_size: int | None = None,
        attention_format: str = AGGREGATED,
        cache_model: bool = True,
        threads: int | None = None,
    ) -> "Engine":
        """Load ``model`` (see :func:`loader.resolve`; ``None`` = bundled SmolLM2).

        ``threads`` sets torch's CPU thread count for the whole process (default: leave it).
        """
        if threads:
            torch.set_num_threads(threads)
        if attention_format not in ATTENTION_FORMATS:
            raise ValueError(f"attention format must be one of {ATTENTION_FORMATS}")
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        source = loader.resolve(model)
        hf_model, tokenizer, cached = loader.load(source, device)
        if cache_model and not cached:
            loader.save_cache_in_background(source, hf_model, tokenizer)
        trained = int(getattr(hf_model.config, "max_position_embeddings", 0) or 0)
        size = context_size or trained or 4096
        if trained and size > trained:
            log.warning("context size %d exceeds the model's trained %d", size, trained)
        return cls(hf_model, tokenizer, source.name, device, size, attention_format, cached)

    # ---------------------------------------------------------------- tokens

    @property
    def vocab_size(self) -> int:
        return self.text.vocab_size

    def tokenize(self, text: str, add_special_tokens: bool = False) -> list[tuple[int, str]]:
        """``(token_id, piece)`` pairs; pieces join to :meth:`detokenize` of the ids."""
        return list(zip(*self.token_columns(text, add_special_tokens)))

    def token_columns(self, text: str, add_special_tokens: bool = False) -> tuple[list[int], list[str]]:
        """The ids and pieces of :meth:`tokenize` as two lists (no per-token objects for
        the garbage collector to walk: a million of them stalled every thread)."""
        with self._tokenizer_lock:
            ids = self.tokenizer.encode(text, add_special_tokens=add_special_tokens)
        return ids, self.text.pieces(ids)

    def detokenize(self, ids) -> str:
        """Text of ``ids`` (control tokens dropped); raises RequestError on bad ids."""
        ids = self.check_ids(ids, allow_empty=True)
        return self.text.decode(ids)

    def check_ids(self, ids, *, allow_empty: bool = False) -> list[int]:
        """``ids`` as a list of in-vocabulary ints, or :class:`RequestError`."""
        if not isinstance(ids, (list, tuple)):
            raise RequestError("token ids must be a list of integers")
        if not ids and not allow_empty:
            raise RequestError("token id list is empty")
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int):
                raise RequestError(f"token id {i!r} is not an integer")
            if not 0 <= i < self.vocab_size:
                raise RequestError(f"token id {i} is outside the vocabulary (0..{self.vocab_size - 1})")
        return list(ids)

    # ---------------------------------------------------------------- model facts

    @property
    def num_layers(self) -> int:
        return int(self.model.config.num_hidden_layers)

    @property
    def num_heads(self) -> int:
        return int(self.model.config.num_attention_heads)

    def chat_template(self) -> str | None:
        """The model's Jinja chat template (ChatML when it has none but knows ChatML)."""
        template = getattr(self.tokenizer, "chat_template", None)
        if isinstance(template, str) and template:
            return template
        vocab = self.tokenizer.get_vocab()
        if "<|im_start|>" in vocab and "<|im_end|>" in vocab:
            return CHATML_TEMPLATE
        return None

    def template_tokens(self) -> dict[str, int]:
        """Ids of the special tokens that occur in the chat template."""
        template = self.chat_template() or ""
        vocab = self.tokenizer.get_vocab()
        return {
            tok: vocab[tok]
            for tok in self.tokenizer.convert_ids_to_tokens(sorted(self.text.special_ids))
            if tok and tok in template and tok in vocab
        }

    def _find_stop_ids(self) -> set[int]:
        ids: set[int] = set()
        for source in (self.model.config, getattr(self.model, "generation_config", None)):
            eos = getattr(source, "eos_token_id", None)
            ids.update([eos] if isinstance(eos, int) else list(eos or []))
        vocab = self.tokenizer.get_vocab()
        ids.update(vocab[name] for name in STOP_TOKEN_NAMES if name in vocab)
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        return {i for i in ids if isinstance(i, int) and i >= 0}

    # ---------------------------------------------------------------- generation

    def generate(
        self,
        input_ids,
        *,
        max_length: int = 200,
        temperature: float = 0.7,
        top_p: float = 0.9,
        top_k: int = 40,
        rep_pen: float = 1.1,
        rep_pen_range: int = 320,
        sampler_seed: int = -1,
        stop_sequence=(),
        output_attentions: bool = True,
        attention_format: str | None = None,
        request_id: str | None = None,
        wait_s: float = 0.0,
    ) -> Generation:
        """Start a generation; iterate it for :class:`TokenRecord`s then one :class:`DoneRecord`.

        Raises :class:`RequestError` for invalid input and :class:`EngineBusy` when another
        generation is still running after ``wait_s`` seconds.  Call ``.abort()`` on the
        result (or :meth:`abort`) to stop it after the current token.
        """
        ids = self.check_ids(input_ids)
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
            raise RequestError("max_length must be a positive integer")
        if len(ids) + max_length > self.context_size:
            raise RequestError(
                f"prompt of {len(ids)} tokens + max_length {max_length} exceeds the "
                f"context size of {self.context_size} tokens"
            )
        fmt = attention_format or self.default_attention_format
        if fmt not in ATTENTION_FORMATS:
            raise RequestError(f"attention_format must be one of {list(ATTENTION_FORMATS)}")
        request = GenerationRequest(
            input_ids=ids,
            max_length=max_length,
            sampler=sampler_settings(temperature, top_p, top_k, rep_pen, rep_pen_range, sampler_seed),
            stop_sequences=self._stop_strings(stop_sequence),
            stop_ids=self.stop_ids | self._single_token_stops(stop_sequence),
            attention=bool(output_attentions),
            per_layer=fmt == PER_LAYER,
            request_id=request_id,
        )
        acquired = self._lock.acquire(timeout=wait_s) if wait_s > 0 else self._lock.acquire(False)
        if not acquired:
            raise EngineBusy("another generation is running; abort it or retry when it ends")
        generation = Generation(self, request, release=self._release)
        self._running = generation
        return generation

    def _release(self, generation: Generation) -> None:
        if self._running is generation:
            self._running = None
            self._lock.release()

    def abort(self, request_id: str | None = None) -> bool:
        """Stop the running generation (only if its request id matches, when given)."""
        running = self._running
        if running is None:
            return False
        if request_id and running.request.request_id != request_id:
            return False
        running.abort()
        return True

    @property
    def busy(self) -> bool:
        return self._running is not None

    def _stop_strings(self, stops) -> tuple[str, ...]:
        if isinstance(stops, str):
            stops = [stops]
        if not isinstance(stops, (list, tuple)) or not all(isinstance(s, str) for s in stops):
            raise RequestError("stop_sequence must be a list of strings")
        return tuple(s for s in stops if s and not self._single_token_stops([s]))

    def _single_token_stops(self, stops) -> set[int]:
        """A stop string that is exactly one control token stops on that id (KoboldCPP)."""
        if isinstance(stops, str):
            stops = [stops]
        found = set()
        for s in stops if isinstance(stops, (list, tuple)) else ():
            if isinstance(s, str) and s:
                with self._tokenizer_lock:
                    ids = self.tokenizer.encode(s, add_special_tokens=False)
                if len(ids) == 1 and ids[0] in self.text.special_ids:
                    found.add(ids[0])
        return found

    # ---------------------------------------------------------------- teacher forcing

    def teacher_force(self, input_ids, forced_ids) -> np.ndarray:
        """Attention rows the model pays while producing each of ``forced_ids``.

        Returns float32 ``[len(forced_ids), len(input_ids) + len(forced_ids) - 1]``: row
        *i* is the layer-and-head mean attention of the query at position
        ``len(input_ids) + i - 1`` over keys ``0 .. len(input_ids) + i - 1`` (its first
        ``len(input_ids) + i`` cells; the rest are 0), i.e. what a generation event for
        forced token *i* carries.  The KV cache is reused and extended as in a generation.
        """
        ids = self.check_ids(input_ids)
        forced = self.check_ids(forced_ids, allow_empty=True)
        total = len(ids) + len(forced)
        if total > self.context_size:
            raise RequestError(f"{total} tokens exceed the context size of {self.context_size}")
        if not forced:
            return np.zeros((0, len(ids)), dtype=np.float32)
        if not self._lock.acquire(False):
            raise EngineBusy("a generation is running")
        try:
            width = total - 1
            out = np.zeros((len(forced), width), dtype=np.float32)
            queries = ids[-1:] + forced[:-1]  # the token fed when each forced id is produced
            self.prepare_prefix(ids[:-1])
            for start in range(0, len(queries), TEACHER_FORCE_CHUNK):
                block = queries[start : start + TEACHER_FORCE_CHUNK]
                _, rows = self._cache.feed(block, attention=True)
                mean = rows.mean(dim=(0, 1)).cpu().numpy()  # [len(block), keys so far]
                out[start : start + len(block), : mean.shape[1]] = mean
            return out
        finally:
            self._lock.release()

    def prepare_prefix(self, ids: list[int]) -> tuple[int, torch.Tensor | None]:
        """Make the cache hold exactly ``ids``; returns (reused count, last logits or None)."""
        reused = self._cache.common_prefix(ids)
        self._cache.rewind(reused)
        logits = self._cache.prefill(ids[reused:]) if len(ids) > reused else None
        return reused, logits

    @property
    def kv(self) -> ContextCache:
        """The KV cache (for :mod:`generation`)."""
        return self._cache


__all__ = [
    "AGGREGATED",
    "PER_LAYER",
    "DoneRecord",
    "Engine",
    "EngineBusy",
    "Generation",
    "RequestError",
    "TokenRecord",
]

"""The model behind the server, usable in-process without HTTP.

>>> engine = TransformersEngine.load()                        # doctest: +SKIP
>>> ids = [i for i, _ in engine.tokenize("<|im_start|>user\\nHi<|im_end|>\\n", parse_special=True)]
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
from dataclasses import dataclass, field

import numpy as np
import torch

from . import loader
from .engine_base import AGGREGATED, ATTENTION_FORMATS, CHATML_TEMPLATE, PER_LAYER, STOP_TOKEN_NAMES, EngineBase
from .errors import EngineBusy, RequestError
from .generation import DoneRecord, Generation, TokenRecord
from .transformers_cache import ContextCache
from .tokens import TokenText

log = logging.getLogger("halo_weave.server")

#: Forced tokens run per forward pass in :meth:`TransformersEngine.teacher_force` (bounds memory).
TEACHER_FORCE_CHUNK = 64


@dataclass
class TransformersEngine(EngineBase):
    """A loaded model, its tokenizer, and the KV cache reused across requests."""

    kind = "transformers"

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

    def __post_init__(self) -> None:
        self._init_locks()
        self.text = TokenText(self.tokenizer)
        self.stop_ids = frozenset(self._find_stop_ids())
        self._cache = ContextCache(self.model, self.device)

    # ---------------------------------------------------------------- loading

    @classmethod
    def load(
        cls,
        model: "str | loader.ModelSource | None" = None,
        device: str = "auto",
        context_size: int | None = None,
        attention_format: str = AGGREGATED,
        cache_model: bool = True,
        threads: int | None = None,
    ) -> "TransformersEngine":
        """Load ``model`` (a source, or what :func:`loader.resolve` takes; ``None`` = the
        bundled default).

        ``threads`` sets torch's CPU thread count for the whole process (default: leave it).
        """
        if threads:
            torch.set_num_threads(threads)
        if attention_format not in ATTENTION_FORMATS:
            raise ValueError(f"attention format must be one of {ATTENTION_FORMATS}")
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        source = model if isinstance(model, loader.ModelSource) else loader.resolve(model)
        hf_model, tokenizer, cached = loader.load(source, device)
        if cache_model and not cached:
            loader.save_cache_in_background(source, hf_model, tokenizer)
        trained = int(getattr(hf_model.config, "max_position_embeddings", 0) or 0)
        size = context_size or trained or 4096
        if trained and size > trained:
            log.warning("context size %d exceeds the model's trained %d", size, trained)
        return cls(hf_model, tokenizer, source.name, device, size, attention_format, cached)

    def fingerprint(self) -> str:
        """What a saved cache must have been made with to be read back here: the model,
        its dtype and the shape of its cache."""
        config = self.model.config
        heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        return "|".join(map(str, (self.kind, self.name, getattr(self.model, "dtype", "?"), torch.__version__,
                                  config.num_hidden_layers, heads, config.hidden_size, self.vocab_size)))

    # ---------------------------------------------------------------- tokens

    def encode(self, text: str, add_special_tokens: bool = False, parse_special: bool = False) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens,
                                     split_special_tokens=not parse_special)

    # ---------------------------------------------------------------- model facts

    @property
    def num_layers(self) -> int:
        return int(self.model.config.num_hidden_layers)

    @property
    def num_heads(self) -> int:
        return int(self.model.config.num_attention_heads)

    def describe(self) -> dict:
        """Model facts for ``/api/v1/model``."""
        config, tok = self.model.config, self.tokenizer
        rope = getattr(config, "rope_parameters", None) or {}
        return {
            "num_key_value_heads": int(getattr(config, "num_key_value_heads", self.num_heads)),
            "embedding_size": int(config.hidden_size),
            "max_trained_context": int(getattr(config, "max_position_embeddings", 0) or 0),
            "bos_token_id": tok.bos_token_id,
            "eos_token_id": tok.eos_token_id,
            "eot_token_id": tok.convert_tokens_to_ids("<|im_end|>") if self.chat_template() else -1,
            "rope_freq_base": float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))),
        }

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

    def prepare_prefix(self, ids: list[int]):
        """Make the cache hold exactly ``ids`` (surgery where it pays); returns the report."""
        return self._cache.sync(ids)

    @property
    def kv(self) -> ContextCache:
        """The KV cache (for :mod:`generation`)."""
        return self._cache


__all__ = [
    "AGGREGATED",
    "PER_LAYER",
    "DoneRecord",
    "TransformersEngine",
    "EngineBusy",
    "Generation",
    "RequestError",
    "TokenRecord",
]

"""Teacher-forced attention from the bundled model, with KV-cache reuse.

:class:`ModelAttention` offers the engine's call, ``teacher_force(input_ids, forced_ids)
-> float32 [len(forced_ids), len(input_ids) + len(forced_ids) - 1]``: row ``j`` is the
mean-over-layers-and-heads attention the model pays while producing ``forced_ids[j]``
(its first ``len(input_ids) + j`` cells; the rest are the causal zeros).  That is what a
generation event carries.

Two ways to reuse the cache when the context changed in the middle (a prune):

``exact``
    What the server does: keep the longest common prefix, re-run everything after it.
    After each prune that is most of the context again (pruning takes old chunks).
``shift``
    KoboldCPP's "ContextShift" / llama.cpp's ``seq_rm`` + ``seq_add``: drop the pruned
    tokens' keys and values and rotate the later keys back by the gap (RoPE rotations
    compose, :func:`halo_weave.server.kv_surgery.rotate_keys`, the server's own code),
    so only new tokens are run.  The approximation: hidden states of tokens
    after the gap were computed while the pruned tokens were still visible.  An insertion
    in the middle (a resurrection) falls back to ``exact``.

Callers pass ``keys`` (one stable identity per input token, e.g. absolute positions)
so that ``shift`` can tell which tokens were removed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

#: Longest slice run in one forward pass.
PREFILL_BLOCK = 1024
#: Query tokens per eager pass (bounds the [layers, heads, q, keys] attention tensor).
FORCED_BLOCK = 64


@dataclass
class AttentionStats:
    """Where the model's time went."""

    calls: int = 0
    prefill_tokens: int = 0
    forced_tokens: int = 0
    shifts: int = 0
    reprefills: int = 0
    seconds: float = 0.0
    by_kind: dict = field(default_factory=dict)


class ModelAttention:
    """The bundled model (or any transformers causal LM) as a teacher-forcing source."""

    def __init__(self, model, tokenizer, mode: str = "shift", device: str = "cpu") -> None:
        if mode not in ("exact", "shift"):
            raise ValueError(f"unknown KV mode {mode!r}")
        self.model = model
        self.tokenizer = tokenizer
        self.mode = mode
        self.device = device
        self.stats = AttentionStats()
        self._pieces = None
        self.reset()

    @classmethod
    def load(cls, mode: str = "shift", model: str | None = None) -> "ModelAttention":
        """Load through the server's loader (bundled SmolLM2 GGUF by default)."""
        import torch

        from halo_weave.server import loader

        device = "cuda" if torch.cuda.is_available() else "cpu"
        source = loader.resolve(model)
        lm, tokenizer, _ = loader.load(source, device)
        return cls(lm, tokenizer, mode, device)

    # ------------------------------------------------------------------ tokens
    def tokenize(self, text: str) -> list[tuple[int, str]]:
        """``[(token_id, piece)]``; special-token strings are parsed as specials."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if self._pieces is None:
            try:
                from halo_weave.server.tokens import TokenText

                self._pieces = TokenText(self.tokenizer).pieces
            except ImportError:  # the server's piece table is not there: decode one by one
                self._pieces = lambda ids: [self.tokenizer.decode([i]) for i in ids]
        return list(zip((int(i) for i in ids), self._pieces(ids)))

    # ------------------------------------------------------------------ cache
    def reset(self) -> None:
        """Forget the cache (a new conversation)."""
        self._cache = None
        self._ids: list[int] = []
        self._keys: list = []

    def _new_cache(self):
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def _crop(self, keep: int) -> None:
        if keep <= 0 or self._cache is None:
            self.reset()
            return
        extra = len(self._ids) - keep
        if extra > 0:
            self._cache.crop(-extra)
            del self._ids[keep:]
            del self._keys[keep:]

    def _sync(self, ids: list[int], keys: list) -> None:
        """Make the cache hold exactly ``ids`` (re-running only what must be run)."""
        n = 0
        for a, b, ka, kb in zip(self._ids, ids, self._keys, keys):
            if a != b or ka != kb:
                break
            n += 1
        if n < len(self._ids) and self.mode == "shift" and self._try_shift(ids, keys):
            n = len(self._ids)
        elif n < len(self._ids):
            self.stats.reprefills += n < len(ids)
            self._crop(n)
        if n < len(ids):
            self._run(ids[n:], keys[n:], attention=False)

    def _try_shift(self, ids: list[int], keys: list) -> bool:
        """Evict cached tokens absent from ``keys`` and close the gaps; False if not a pure removal."""
        import torch

        wanted = set(keys)
        keep = [i for i, k in enumerate(self._keys) if k in wanted]
        if not keep or len(keep) > len(ids):
            return False
        if [self._keys[i] for i in keep] != list(keys[: len(keep)]):
            return False
        if [self._ids[i] for i in keep] != list(ids[: len(keep)]):
            return False
        from halo_weave.server.kv_surgery import rotate_keys

        index = torch.tensor(keep, dtype=torch.long, device=self.device)
        delta = torch.arange(len(keep), device=self.device) - index  # new - old position
        inv_freq = self.model.model.rotary_emb.inv_freq
        for layer in self._cache.layers:
            layer.keys = rotate_keys(layer.keys.index_select(-2, index), delta, inv_freq)
            layer.values = layer.values.index_select(-2, index)
        self._ids = [self._ids[i] for i in keep]
        self._keys = [self._keys[i] for i in keep]
        self.stats.shifts += 1
        return True

    def _run(self, ids: list[int], keys: list, *, attention: bool):
        """Feed ids after the cache; returns mean attention rows [len(ids), keys] or None."""
        import torch

        if self._cache is None:
            self._cache = self._new_cache()
        impl = "eager" if attention else "sdpa"
        if getattr(self.model.config, "_attn_implementation", None) != impl:
            self.model.set_attn_implementation(impl)
        rows = []
        self._logp = []  # per attention block: log-softmax over the vocabulary per query
        block = FORCED_BLOCK if attention else PREFILL_BLOCK
        for start in range(0, len(ids), block):
            part = ids[start:start + block]
            tensor = torch.tensor([part], dtype=torch.long, device=self.device)
            with torch.inference_mode():
                try:
                    out = self.model(input_ids=tensor, past_key_values=self._cache, use_cache=True,
                                     output_attentions=attention, logits_to_keep=0 if attention else 1)
                except BaseException:
                    self.reset()
                    raise
            self._ids.extend(part)
            self._keys.extend(keys[start:start + block])
            if attention:
                self._logp.append(torch.log_softmax(out.logits[0].float(), dim=-1))
                total = None
                for layer in out.attentions:  # [1, heads, q, keys]
                    s = layer[0].float().sum(0)
                    total = s if total is None else total + s
                rows.append((total / (len(out.attentions) * out.attentions[0].shape[1])).cpu().numpy())
        if attention:
            self.stats.forced_tokens += len(ids)
        else:
            self.stats.prefill_tokens += len(ids)
        return rows

    # ------------------------------------------------------------------ the call
    def teacher_force(self, input_ids: Sequence[int], forced_ids: Sequence[int],
                      keys: Sequence | None = None) -> np.ndarray:
        """Attention rows while producing each forced token (see the module docstring).

        ``keys`` names every input token and then every forced token (defaults to
        positions, which makes ``shift`` act like ``exact``).
        """
        started = time.perf_counter()
        ids = [int(i) for i in input_ids]
        forced = [int(i) for i in forced_ids]
        if not ids or not forced:
            raise ValueError("teacher forcing needs at least one input and one forced token")
        keys = list(range(len(ids) + len(forced))) if keys is None else list(keys)
        if len(keys) != len(ids) + len(forced):
            raise ValueError("keys must name every input and forced token")
        self._sync(ids[:-1], keys[: len(ids) - 1])
        # The last input token is the query that produces forced[0], so it runs eagerly
        # with the forced tokens; the last forced token is never a query.
        blocks = self._run([ids[-1]] + forced[:-1], keys[len(ids) - 1: -1], attention=True)
        import torch

        logp = torch.cat(self._logp)  # [len(forced), vocab]: query j predicts forced[j]
        self.last_logprobs = logp[torch.arange(len(forced)), torch.tensor(forced)].double().numpy()
        self._logp = []
        width = len(ids) + len(forced) - 1
        out = np.zeros((len(forced), width), np.float32)
        row = 0
        for block in blocks:
            q, k = block.shape
            out[row:row + q, :k] = block
            row += q
        self.stats.calls += 1
        self.stats.seconds += time.perf_counter() - started
        return out


    def force(self, input_ids, forced_ids, keys=None):
        """:meth:`teacher_force` with the log-probability of every forced token."""
        from .llama_forcing import Forced

        rows = self.teacher_force(input_ids, forced_ids, keys)
        return Forced(rows, self.last_logprobs)


class EngineAttention:
    """The server's :class:`~halo_weave.server.engine.Engine` as a source (``exact``)."""

    mode = "engine"

    def __init__(self, engine) -> None:
        self.engine = engine
        self.stats = AttentionStats()

    def tokenize(self, text: str) -> list[tuple[int, str]]:
        return self.engine.tokenize(text)

    def reset(self) -> None:
        """Nothing to do: the engine reuses whatever prefix it shares with the next input."""

    def teacher_force(self, input_ids, forced_ids, keys=None) -> np.ndarray:
        started = time.perf_counter()
        rows = self.engine.teacher_force([int(i) for i in input_ids], [int(i) for i in forced_ids])
        self.stats.calls += 1
        self.stats.forced_tokens += len(forced_ids)
        self.stats.seconds += time.perf_counter() - started
        return rows


def load_source(kv: str, model: str | None = None, context_size: int = 8192):
    """A teacher-forcing source on the app's engine: ``engine`` (exact, the server's own
    call), or ``exact`` / ``shift`` on the engine's model and tokenizer."""
    try:
        from halo_weave.server.engine import Engine
    except ImportError:
        Engine = None
    if Engine is None:
        if kv == "engine":
            raise RuntimeError("halo_weave.server.engine is not available; use --kv exact")
        return ModelAttention.load(kv, model)
    engine = Engine.load(model, device="auto", context_size=context_size, cache_model=False)
    if kv == "engine":
        return EngineAttention(engine)
    source = ModelAttention(engine.model, engine.tokenizer, kv, engine.device)
    source.tokenize = engine.tokenize
    return source

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

from . import gqa
from .prefix import SharedPrefix

#: Longest slice run in one forward pass.
PREFILL_BLOCK = 1024
#: Query tokens per eager pass (bounds the [layers, heads, q, keys] attention tensor).
FORCED_BLOCK = 64
#: Query tokens per pass when the rows are summed as each layer runs ([heads, q, keys]).
SUMMED_BLOCK = 256


@dataclass
class AttentionStats:
    """Where the model's time went."""

    calls: int = 0
    prefill_tokens: int = 0
    forced_tokens: int = 0
    shifts: int = 0
    reprefills: int = 0
    in_place_shifts: int = 0
    restored_tokens: int = 0  # resurrected tokens taken from kept cells (not run)
    seconds: float = 0.0
    by_kind: dict = field(default_factory=dict)


class ModelAttention:
    """The bundled model (or any transformers causal LM) as a teacher-forcing source."""

    #: Rows summed while each layer runs (:class:`gqa.Rows`); False: from the
    #: probabilities transformers returns for every layer (the check).
    sum_in_layers = True
    #: The input the cache lacks runs in the forced tokens' pass (False: a pass of its own).
    one_pass = True
    #: A KV shift moves rows within the layer's own buffer where it can (False: always a
    #: new buffer, the check).
    shift_in_place = True

    def __init__(self, model, tokenizer, mode: str = "shift", device: str = "cpu") -> None:
        if mode not in ("exact", "shift"):
            raise ValueError(f"unknown KV mode {mode!r}")
        self.model = model
        self.tokenizer = tokenizer
        self.mode = mode
        self.device = device
        self.stats = AttentionStats()
        self._pieces = None
        self.shared = SharedPrefix()
        #: The attention that returns probabilities: grouped (no key/value copies), or
        #: transformers' "eager" (the reference it is checked against).
        self.rows_impl = gqa.register()
        self.reset()

    @classmethod
    def load(cls, mode: str = "shift", model: str | None = None) -> "ModelAttention":
        """Load through the server's loader (the bundled SmolLM2 GGUF by default: the proxy
        reader, whose attention the benchmark's figures are)."""
        import torch

        from halo_weave.server import bundled, loader

        device = "cuda" if torch.cuda.is_available() else "cpu"
        source = loader.resolve(model or bundled.SMOLLM2)
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

    @property
    def sums_rows(self) -> bool:
        """Whether rows are summed as each layer runs (:class:`gqa.Rows`), so that a pass
        can also run tokens whose rows nobody reads."""
        return self.rows_impl == gqa.NAME and self.sum_in_layers

    # ------------------------------------------------------------------ cache
    def reset(self, keep_pruned: bool = False) -> None:
        """Forget the cache (a new conversation); ``keep_pruned``: keep the keys and values
        of pruned tokens, so that a resurrection restores them instead of re-running."""
        self._cache = None
        self._ids: list[int] = []
        self._keys: list = []
        self.keep_pruned = keep_pruned
        self._grave = None  # per layer (keys, values) of pruned tokens, rows appended
        self._grave_rows: dict = {}  # key -> (row, token id, position it was rotated to)
        self._grave_len = 0
        self._call = 0  # teacher_force calls since the reset
        self._pending = 0  # cache length the last shared call left (not adopted yet)
        self._pure = True  # the cache only grew since the reset (no prune yet)
        self._exposed = False  # a shared prefix holds views of this cache's buffers

    def forget_shared(self) -> None:
        """A new conversation: drop the calls shared between its replays."""
        self.shared.clear()

    def _new_cache(self):
        from .kv_buffer import growing_cache

        return growing_cache(self.model.config)

    def _crop(self, keep: int) -> None:
        if keep <= 0 or self._cache is None:
            self.reset(self.keep_pruned)
            return
        extra = len(self._ids) - keep
        if extra > 0:
            self._pure = False
            self._cache.crop(-extra)
            del self._ids[keep:]
            del self._keys[keep:]

    def _sync(self, ids: list[int], keys: list, run: bool = True) -> int:
        """Make the cache hold exactly ``ids`` (re-running only what must be run); without
        ``run`` it holds the first n of them and n is returned: the rest is the caller's to
        run (in the same pass as what follows them)."""
        if self._cache is None and self.shared.ids:
            # After shared calls: the state the last one left; else the longest shared prefix.
            n, self._pending = self._pending or self.shared.common(ids, keys), 0
            if n:
                self._cache = self._new_cache()
                self.shared.adopt(self._cache, n)
                self._ids, self._keys = self.shared.ids[:n], self.shared.keys[:n]
        n = 0
        for a, b, ka, kb in zip(self._ids, ids, self._keys, keys):
            if a != b or ka != kb:
                break
            n += 1
        edited = n < len(self._ids) or (n < len(ids) and keys[n] in self._grave_rows)
        if edited and self.mode == "shift" and self._cache is not None:
            n = self._shift(ids, keys)
        elif n < len(self._ids):
            self.stats.reprefills += n < len(ids)
            self._crop(n)
        if n < len(ids) and run:
            self._run(ids[n:], keys[n:], attention=False)
            n = len(ids)
        return n

    def _shift(self, ids: list[int], keys: list) -> int:
        """Rebuild the cache from cells it holds (and, with ``keep_pruned``, pruned cells
        kept aside) for the longest prefix of ``keys`` they cover, each key rotated to
        its new position (ContextShift; llama.cpp's ``seq_rm`` + ``seq_add`` and its
        kept cells).  Returns that prefix's length; the rest must be run."""
        import torch

        # The model's passes run in inference mode, so the buffers they grow are inference
        # tensors, which torch lets only inference mode write in place: the shift runs there too.
        with torch.inference_mode():
            return self._shift_cells(ids, keys)

    def _shift_cells(self, ids: list[int], keys: list) -> int:
        """:meth:`_shift`'s work (in inference mode)."""
        import torch

        from halo_weave.server.kv_surgery import rope_factors, rotate_keys

        from .kv_buffer import GrowingLayer

        here = {k: i for i, k in enumerate(self._keys)}
        src_cache, dst_cache, src_grave, dst_grave = [], [], [], []
        old_pos = []  # per restored row: the position its key was rotated to
        m = 0
        for m, (token, key) in enumerate(zip(ids, keys)):
            i = here.get(key)
            if i is not None and self._ids[i] == token:
                src_cache.append(i)
                dst_cache.append(m)
                continue
            kept = self._grave_rows.get(key)
            if kept is not None and kept[1] == token:
                src_grave.append(kept[0])
                dst_grave.append(m)
                old_pos.append(kept[2])
                continue
            break
        else:
            m = len(ids)
        dev = self.device
        restored = []  # per layer: the kept keys and values coming back, read before
        if src_grave:  # burying below may compact the kept rows (and renumber them)
            sg = torch.tensor(src_grave, dtype=torch.long, device=dev)
            restored = [(gk.index_select(-2, sg), gv.index_select(-2, sg)) for gk, gv in self._grave]
        if self.keep_pruned:  # cells leaving the cache are kept aside, as they are
            taken = set(src_cache)
            self._bury([i for i in range(len(self._ids)) if i not in taken])
        self._pure = False
        if m == 0:
            self.reset(self.keep_pruned)
            return 0
        inv_freq = self.model.model.rotary_emb.inv_freq
        sc, dc = (torch.tensor(x, dtype=torch.long, device=dev) for x in (src_cache, dst_cache))
        dtype = self._cache.layers[0].keys.dtype
        if src_grave:
            dg = torch.tensor(dst_grave, dtype=torch.long, device=dev)
            delta = dg - torch.tensor(old_pos, dtype=torch.long, device=dev)
            back = rope_factors(delta, len(src_grave), inv_freq, dev, dtype)
        # A layer that owns its buffer (nothing shared holds a view of it) with room for m
        # rows is shifted in place: the rows that keep their index stay where they are, and
        # only the moved rows are read (copies, before anything is written) and written
        # back rotated.  Otherwise a new buffer is built.  Same floats either way.
        in_place = self.shift_in_place and not self._exposed and all(
            isinstance(layer, GrowingLayer) and layer.owns_buffer(m) for layer in self._cache.layers)
        if in_place and src_cache:
            stays = sc == dc
            sc, dc = sc[~stays], dc[~stays]
        # The rotations are the same for every layer: their cos and sin are computed once.
        moved = rope_factors(dc - sc, len(sc), inv_freq, dev, dtype) if len(sc) else None
        for li, layer in enumerate(self._cache.layers):
            k, v = layer.keys, layer.values
            if in_place:
                new_k, new_v = layer.buffers
            else:
                new_k, new_v = GrowingLayer.new_buffer(k, m), GrowingLayer.new_buffer(v, m)
            if len(sc):
                new_k.index_copy_(-2, dc, rotate_keys(k.index_select(-2, sc), dc - sc, inv_freq, moved))
                new_v.index_copy_(-2, dc, v.index_select(-2, sc))
            if src_grave:
                gk, gv = restored[li]
                new_k.index_copy_(-2, dg, rotate_keys(gk, delta, inv_freq, back))
                new_v.index_copy_(-2, dg, gv)
            if isinstance(layer, GrowingLayer):
                layer.hold(new_k, new_v, m)  # the rows after m: room for what runs next
            else:
                layer.keys, layer.values = new_k[..., :m, :], new_v[..., :m, :]
        self._ids, self._keys = list(ids[:m]), list(keys[:m])
        self._exposed = False  # new buffers, or ours already: no shared prefix views them
        self.stats.shifts += 1
        self.stats.in_place_shifts += in_place
        self.stats.restored_tokens += len(src_grave)
        return m

    def _bury(self, rows: list[int]) -> None:
        """Keep the cache rows ``rows`` aside (keys still rotated to their row index)."""
        import torch

        if not rows:
            return
        index = torch.tensor(rows, dtype=torch.long, device=self.device)
        n = len(rows)
        if self._grave is None:
            self._grave = [None] * len(self._cache.layers)
        elif self._grave_len + n > self._grave[0][0].shape[-2] and 2 * len(self._grave_rows) < self._grave_len:
            self._compact_grave()
        for li, layer in enumerate(self._cache.layers):
            k, v = layer.keys.index_select(-2, index), layer.values.index_select(-2, index)
            if self._grave[li] is None:
                cap = max(4096, 2 * n)
                self._grave[li] = (k.new_empty(k.shape[:-2] + (cap, k.shape[-1])),
                                   v.new_empty(v.shape[:-2] + (cap, v.shape[-1])))
            gk, gv = self._grave[li]
            if self._grave_len + n > gk.shape[-2]:  # grow by doubling
                cap = 2 * (self._grave_len + n)
                bigger_k = gk.new_empty(gk.shape[:-2] + (cap, gk.shape[-1]))
                bigger_v = gv.new_empty(gv.shape[:-2] + (cap, gv.shape[-1]))
                bigger_k[..., :self._grave_len, :] = gk[..., :self._grave_len, :]
                bigger_v[..., :self._grave_len, :] = gv[..., :self._grave_len, :]
                gk, gv = bigger_k, bigger_v
            gk[..., self._grave_len:self._grave_len + n, :] = k
            gv[..., self._grave_len:self._grave_len + n, :] = v
            self._grave[li] = (gk, gv)
        for j, i in enumerate(rows):
            self._grave_rows[self._keys[i]] = (self._grave_len + j, self._ids[i], i)
        self._grave_len += n

    def _compact_grave(self) -> None:
        """Drop the kept rows no key points at any more (a chunk buried again gets a new
        row): replays that resurrect on every message bury the same chunks thousands of
        times, and the appended rows alone outgrew the machine's memory (24 GiB, two
        workers).  Keeps every row still pointed at; the figures do not change."""
        import torch

        keys = list(self._grave_rows)
        index = torch.tensor([self._grave_rows[k][0] for k in keys], dtype=torch.long, device=self.device)
        m = len(keys)
        for li, (gk, gv) in enumerate(self._grave):
            cap = max(4096, 2 * m)
            new_k = gk.new_empty(gk.shape[:-2] + (cap, gk.shape[-1]))
            new_v = gv.new_empty(gv.shape[:-2] + (cap, gv.shape[-1]))
            new_k[..., :m, :] = gk.index_select(-2, index)
            new_v[..., :m, :] = gv.index_select(-2, index)
            self._grave[li] = (new_k, new_v)
        for j, key in enumerate(keys):
            _, token, position = self._grave_rows[key]
            self._grave_rows[key] = (j, token, position)
        self._grave_len = m

    def _run(self, ids: list[int], keys: list, *, attention: bool, logits: bool | None = None,
             scored: int | None = None):
        """Feed ids after the cache; returns mean attention rows [queries, keys] per block
        (none without ``attention``; with rows summed in layers, only the last ``scored``
        queries have rows).  ``logits`` (default: with ``attention``): keep the log-softmax
        of the last ``scored`` queries (default: every one) in ``self._logp``."""
        import torch

        logits = attention if logits is None else logits
        scored = len(ids) if scored is None else scored
        first_scored = len(ids) - scored  # queries before it only extend the cache
        started = time.perf_counter()
        if self._cache is None:
            self._cache = self._new_cache()
        impl = self.rows_impl if attention else "sdpa"
        if getattr(self.model.config, "_attn_implementation", None) != impl:
            self.model.set_attn_implementation(impl)
        rows = []
        self._logp = []  # per attention block: log-softmax over the vocabulary per query
        sums = attention and self.sums_rows
        block = SUMMED_BLOCK if sums else FORCED_BLOCK if attention else PREFILL_BLOCK
        for start in range(0, len(ids), block):
            part = ids[start:start + block]
            unscored = min(len(part), max(0, first_scored - start))  # leading queries not scored
            keep = len(part) - unscored if logits else 0
            tensor = torch.tensor([part], dtype=torch.long, device=self.device)
            summed = gqa.Rows(skip=unscored) if sums else None
            with torch.inference_mode():
                try:
                    if summed is not None:  # rows summed as each layer runs
                        with summed:
                            out = self.model(input_ids=tensor, past_key_values=self._cache,
                                             use_cache=True, logits_to_keep=keep or 1)
                    else:
                        out = self.model(input_ids=tensor, past_key_values=self._cache, use_cache=True,
                                         output_attentions=attention, logits_to_keep=keep or 1)
                except BaseException:
                    self.reset(self.keep_pruned)
                    raise
            self._ids.extend(part)
            self._keys.extend(keys[start:start + block])
            if keep:
                self._logp.append(torch.log_softmax(out.logits[0].float(), dim=-1))
            if summed is not None:
                if summed.total is not None:  # (a block of unscored queries has none)
                    rows.append(summed.mean().cpu().numpy())
            elif attention:  # the probabilities transformers kept, summed the same way
                stored = gqa.Rows()
                for layer in out.attentions:  # [1, heads, q, keys]
                    stored.add(layer)
                rows.append(stored.mean().cpu().numpy())
        if logits:
            self.stats.forced_tokens += scored
            self.stats.prefill_tokens += len(ids) - scored
        else:
            self.stats.prefill_tokens += len(ids)
        kind = "forced" if attention else "scored" if logits else "prefill"
        tokens, seconds = self.stats.by_kind.get(kind, (0, 0.0))
        self.stats.by_kind[kind] = (tokens + len(ids), seconds + time.perf_counter() - started)
        return rows

    # ------------------------------------------------------------------ the call
    def teacher_force(self, input_ids: Sequence[int], forced_ids: Sequence[int],
                      keys: Sequence | None = None, rows: bool = True) -> np.ndarray | None:
        """Attention rows while producing each forced token (see the module docstring).

        ``keys`` names every input token and then every forced token (defaults to
        positions, which makes ``shift`` act like ``exact``).  ``rows=False``: only the
        log-probabilities (``last_logprobs``; the fast attention kernel, no rows read);
        returns None.
        """
        started = time.perf_counter()
        ids = [int(i) for i in input_ids]
        forced = [int(i) for i in forced_ids]
        if not ids or not forced:
            raise ValueError("teacher forcing needs at least one input and one forced token")
        keys = list(range(len(ids) + len(forced))) if keys is None else list(keys)
        if len(keys) != len(ids) + len(forced):
            raise ValueError("keys must name every input and forced token")
        signature = (tuple(ids), tuple(keys), tuple(forced))
        call, self._call = self._call, self._call + 1
        shared = self.shared.lookup(call, signature, rows) if self._pure else None
        if shared is not None:  # another replay made this very call before its first prune
            self._cache, self._ids, self._keys = None, [], []  # the next sync adopts
            out, self.last_logprobs, self._pending = shared
            self.stats.calls += 1
            self.stats.seconds += time.perf_counter() - started
            return out
        # The last input token is the query that produces forced[0], so it runs eagerly
        # with the forced tokens; the last forced token is never a query.  The input the
        # cache lacks runs in the same pass as the forced tokens (one pass of ~70 tokens
        # instead of two of ~35: the layers' matrix products run fuller), through the fast
        # kernel (no rows read for it).
        n = self._sync(ids[:-1], keys[: len(ids) - 1],
                       run=not self.one_pass or (rows and not self.sums_rows))
        blocks = self._run(ids[n:] + forced[:-1], keys[n:-1], attention=rows, logits=True,
                           scored=len(forced))
        import torch

        logp = torch.cat(self._logp)  # [len(forced), vocab]: query j predicts forced[j]
        self.last_logprobs = logp[torch.arange(len(forced)), torch.tensor(forced)].double().numpy()
        self._logp = []
        out = None
        if rows:
            out = np.zeros((len(forced), len(ids) + len(forced) - 1), np.float32)
            row = 0
            for block in blocks:
                q, k = block.shape
                out[row:row + q, :k] = block
                row += q
        if self._pure:
            self.shared.record(call, signature, out, self.last_logprobs, self._ids, self._keys,
                               self._cache.layers)
            self._exposed = True  # it may hold views of our buffers: never written in place
        self.stats.calls += 1
        self.stats.seconds += time.perf_counter() - started
        return out


    def force(self, input_ids, forced_ids, keys=None, rows: bool = True):
        """:meth:`teacher_force` with the log-probability of every forced token (rows
        None with ``rows=False``)."""
        from .llama_forcing import Forced

        rows = self.teacher_force(input_ids, forced_ids, keys, rows)
        return Forced(rows, self.last_logprobs)


class EngineAttention:
    """The server's :class:`~halo_weave.server.transformers_engine.TransformersEngine` as a source (``exact``)."""

    mode = "engine"

    def __init__(self, engine) -> None:
        self.engine = engine
        self.stats = AttentionStats()

    def tokenize(self, text: str) -> list[tuple[int, str]]:
        """``[(token_id, piece)]``; special-token strings are parsed as specials (the
        replay's framing comes through here; LoCoMo's text holds no such strings)."""
        return self.engine.tokenize(text, parse_special=True)

    def reset(self, keep_pruned: bool = False) -> None:
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
        from halo_weave.server.transformers_engine import TransformersEngine
    except ImportError:
        TransformersEngine = None
    if TransformersEngine is None:
        if kv == "engine":
            raise RuntimeError("halo_weave.server.transformers_engine is not available; use --kv exact")
        return ModelAttention.load(kv, model)
    from halo_weave.server import bundled

    engine = TransformersEngine.load(model or bundled.SMOLLM2, device="auto", context_size=context_size, cache_model=False)
    if kv == "engine":
        return EngineAttention(engine)
    source = ModelAttention(engine.model, engine.tokenizer, kv, engine.device)
    source.tokenize = engine.tokenize
    return source

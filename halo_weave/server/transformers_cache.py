"""The model's KV cache, kept across requests and reused for the longest common prefix.

A chat turn resends the whole conversation; all of it but the new user message is
already in the cache from the previous turn, so only the new tokens are run.  Prompt
tokens run with ``sdpa`` and no attention output (about twice as cheap); tokens whose
attention a client wants run with ``eager`` and ``output_attentions``.

A prompt that differs from the cached ids inside the context (a prune, a resurrection)
goes through :mod:`.kv_surgery`: removed spans are cut out of the key and value tensors
(and kept in a :class:`~.span_store.SpanStore`) and the later keys RoPE-rotated back;
inserted spans are put back from the store (keys rotated to their new place) or run on
the cache cropped in front of them, and the keys after them rotated forward.
"""

from __future__ import annotations

import io
import time

import numpy as np
import torch

from . import kv_surgery
from .kv_surgery import EXACT, SURGERY, SyncReport
from .span_store import Context, SpanStore, to_run

#: Longest slice of prompt run in one forward pass: bounds memory on 8k prompts.
PREFILL_CHUNK = 2048

EAGER = "eager"
SDPA = "sdpa"


class ContextCache:
    """A ``DynamicCache`` plus the token ids whose keys and values it holds."""

    def __init__(self, model, device: str, store: SpanStore | None = None) -> None:
        self.model = model
        self.store = store if store is not None else SpanStore()
        self.device = device
        self.ids: list[int] = []
        self._cache = None
        self._impl = getattr(model.config, "_attn_implementation", None)
        self.mode = SURGERY
        #: Run a request's new tokens before its insertions (see :func:`.kv_surgery.sync`).
        self.tail_first = kv_surgery.TAIL_FIRST_DEFAULT

    def __len__(self) -> int:
        return len(self.ids)

    def reset(self) -> None:
        """Forget everything (after an error the cache may hold half a step)."""
        self.ids = []
        self._cache = None

    def rewind(self, keep: int) -> None:
        """Drop cached positions ``keep`` and later."""
        if keep <= 0:
            self.reset()
            return
        extra = len(self.ids) - keep
        if extra > 0:
            self._cache.crop(-extra)
            self.ids = self.ids[:keep]

    def feed(self, ids: list[int], *, attention: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Run ``ids`` after the cached ones.

        Returns the logits of the last position (1-D) and, when ``attention`` is set,
        the attention probabilities ``[layers, heads, len(ids), keys]``, keys counting
        the cached positions plus ``ids`` (causally masked cells are exactly 0).
        """
        from transformers import DynamicCache

        if self._cache is None:
            self._cache = DynamicCache(config=self.model.config)
        self._use(EAGER if attention else SDPA)
        tensor = torch.tensor([ids], dtype=torch.long, device=self.device)
        with torch.inference_mode():
            try:
                out = self.model(
                    input_ids=tensor,
                    past_key_values=self._cache,
                    use_cache=True,
                    output_attentions=attention,
                    logits_to_keep=1,
                )
            except BaseException:
                self.reset()
                raise
        self.ids.extend(ids)
        rows = None
        if attention:
            rows = torch.stack([layer[0] for layer in out.attentions]).float()
        return out.logits[0, -1], rows

    def prefill(self, ids: list[int], should_stop=lambda: False) -> torch.Tensor | None:
        """Run prompt ids without attention output, in chunks; returns the last logits."""
        logits = None
        for start in range(0, len(ids), PREFILL_CHUNK):
            if should_stop():
                return None
            logits, _ = self.feed(ids[start : start + PREFILL_CHUNK], attention=False)
        return logits

    # ------------------------------------------------------------ the engine's calls

    def step(self, ids: list[int], *, attention: bool, per_layer: bool = False):
        """Run ``ids``; ``(logits, row)`` as NumPy, ``row`` the last query's attention."""
        logits, rows = self.feed(ids, attention=attention)
        row = None
        if rows is not None:
            last = rows[:, :, -1, :]
            row = last if per_layer else last.mean(dim=(0, 1))
            row = np.ascontiguousarray(row.cpu().numpy(), dtype=np.float32)
        return logits.float().cpu().numpy(), row

    def sync(self, ids: list[int], should_stop=lambda: False, *, step: int | None = None,
             stoppable: bool = False) -> SyncReport | None:
        """Make the cache hold exactly ``ids``, by surgery where it pays (``None``: stopped).
        ``step`` and ``stoppable`` are the llama.cpp cache's; this cache's prefill asks
        ``should_stop`` every :data:`PREFILL_CHUNK` tokens whatever they are."""
        return kv_surgery.sync(self, ids, should_stop)

    def sync_pass(self, ids: list[int], edits, should_stop) -> SyncReport | None:
        """One pass of :meth:`sync`: apply ``edits`` (planned from ``self.ids`` to ``ids``)."""
        middle, tail = kv_surgery.split_tail(edits, len(self.ids), len(ids))
        report = SyncReport()
        covers = []
        if middle and self.mode != EXACT:
            started = time.perf_counter()
            for e in middle:
                if e.removed:
                    report.stored += self._save(e.cached_start, e.cached_end, self.ids[:e.cached_start])
            report.store_s = time.perf_counter() - started
            where = Context(ids, 0)
            covers = [self.store.cover(ids[e.start:e.end], where.at(e.start)) for e in middle]
        running = sum(to_run(c) for c in covers)
        if middle and (self.mode == EXACT or middle[0].start == 0
                       or kv_surgery.prefer_exact(middle, len(ids), running)):
            keep = middle[0].start
            report.mode, report.rerun, report.dropped = EXACT, len(ids) - keep, len(self.ids) - keep
            report.reused = keep
            self.rewind(keep)
            if ids[keep:] and self.prefill(ids[keep:], should_stop) is None:
                return None
            return report
        if middle:
            report.mode = SURGERY
            if not self._apply(middle, covers, ids, report, should_stop):
                return None
        keep = tail.start if tail else len(self.ids)  # new coordinates once surgery ran
        if tail:
            report.dropped += tail.removed
            self.rewind(keep)
        report.reused = len(self.ids) - report.inserted - report.restored
        if len(ids) > len(self.ids):
            report.appended = len(ids) - len(self.ids)
            if self.prefill(ids[len(self.ids):], should_stop) is None:
                return None
        return report

    def _save(self, start: int, end: int, before: list[int]) -> int:
        """Store the keys and values of cached positions ``[start, end)`` that the store
        does not hold yet (:meth:`.SpanStore.save`; ``before``: the cached tokens before the
        span); returns the tokens it holds."""

        def copy_out(a: int, b: int):
            layers = [(layer.keys[..., a:b, :].clone(), layer.values[..., a:b, :].clone())
                      for layer in self._cache.layers]
            return layers, sum(k.nbytes + v.nbytes for k, v in layers)

        return self.store.save(self.ids[start:end], start, copy_out, before)

    def _restore(self, piece, at: int) -> None:
        """Append a stored piece's keys (rotated to ``at..``) and values to the cache."""
        entry, n = piece.entry, len(piece)
        delta = at - (entry.pos + piece.offset)
        inv_freq = self.model.model.rotary_emb.inv_freq
        o = piece.offset
        for layer, (keys, values) in zip(self._cache.layers, entry.payload):
            k, v = keys[..., o:o + n, :], values[..., o:o + n, :]
            if delta:
                k = kv_surgery.rotate_keys(k, delta, inv_freq)
            layer.keys = torch.cat([layer.keys, k], dim=-2)
            layer.values = torch.cat([layer.values, v], dim=-2)
        self.ids = self.ids + list(entry.ids[o:o + n])
        self.store.touch(entry)

    def _apply(self, middle, covers, ids, report: SyncReport, should_stop) -> bool:
        """Cut removed spans, put back or run inserted ones, rotate what moved."""
        old_ids = self.ids
        old = [(layer.keys, layer.values) for layer in self._cache.layers]
        inv_freq = self.model.model.rotary_emb.inv_freq
        self.rewind(middle[0].cached_start)
        for n, edit in enumerate(middle):
            report.dropped += edit.removed
            report.spans_removed += edit.removed > 0
            for piece in covers[n]:
                at = edit.start + piece.start
                started = time.perf_counter()
                if piece.entry is not None:
                    self._restore(piece, at)
                    report.restored += len(piece)
                    report.restore_s += time.perf_counter() - started
                    continue
                if should_stop():
                    self.reset()
                    return False
                self.prefill(ids[at : edit.start + piece.end])
                report.inserted += len(piece)
                report.insert_s += time.perf_counter() - started
            report.spans_inserted += edit.inserted > 0
            # The cached run after this edit, up to the next one, moves by `delta`.
            a = edit.cached_end
            b = middle[n + 1].cached_start if n + 1 < len(middle) else len(old_ids)
            delta = edit.end - a
            for layer, (keys, values) in zip(self._cache.layers, old):
                k, v = keys[..., a:b, :], values[..., a:b, :]
                if delta:
                    k = kv_surgery.rotate_keys(k, delta, inv_freq)
                layer.keys = torch.cat([layer.keys, k], dim=-2)
                layer.values = torch.cat([layer.values, v], dim=-2)
            self.ids = self.ids + old_ids[a:b]
            report.moved += (b - a) if delta else 0
        return True

    # ------------------------------------------------------------ saved to disk

    def export_state(self) -> bytes | None:
        """Every layer's cached keys and values as one blob (``torch.save`` of host
        copies), for :mod:`..kv_files`; None when the cache is empty."""
        if self._cache is None or not self.ids:
            return None
        out = io.BytesIO()
        torch.save([(layer.keys.cpu(), layer.values.cpu()) for layer in self._cache.layers], out)
        return out.getvalue()

    def import_state(self, ids: list[int], blob: bytes, keep: int | None = None) -> bool:
        """Hold ``ids`` from a blob of :meth:`export_state` without a model run, then only
        their first ``keep`` (default all); False when the blob is not one for this model
        and these ids (the cache is then left as it was)."""
        from transformers import DynamicCache

        try:
            layers = torch.load(io.BytesIO(blob), map_location=self.device, weights_only=True)
        except Exception:  # noqa: BLE001 - not a blob of ours: the caller prefills
            return False
        config = self.model.config
        if not isinstance(layers, list) or len(layers) != config.num_hidden_layers or not ids or any(
                not isinstance(kv, tuple) or len(kv) != 2 or kv[0].shape[-2] != len(ids) or kv[1].shape[-2] != len(ids)
                for kv in layers):
            return False
        cache = DynamicCache(config=config)
        for index, (keys, values) in enumerate(layers):
            cache.update(keys, values, index)
        self._cache, self.ids = cache, [int(i) for i in ids]
        self.rewind(len(ids) if keep is None else keep)
        return True

    def _use(self, impl: str) -> None:
        if self._impl != impl:
            self.model.set_attn_implementation(impl)
            self._impl = impl

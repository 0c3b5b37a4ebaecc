"""The model's KV cache, kept across requests and reused for the longest common prefix.

A chat turn resends the whole conversation; all of it but the new user message is
already in the cache from the previous turn, so only the new tokens are run.  Prompt
tokens run with ``sdpa`` and no attention output (about twice as cheap); tokens whose
attention a client wants run with ``eager`` and ``output_attentions``.
"""

from __future__ import annotations

import torch

#: Longest slice of prompt run in one forward pass: bounds memory on 8k prompts.
PREFILL_CHUNK = 2048

EAGER = "eager"
SDPA = "sdpa"


class ContextCache:
    """A ``DynamicCache`` plus the token ids whose keys and values it holds."""

    def __init__(self, model, device: str) -> None:
        self.model = model
        self.device = device
        self.ids: list[int] = []
        self._cache = None
        self._impl = getattr(model.config, "_attn_implementation", None)

    def __len__(self) -> int:
        return len(self.ids)

    def reset(self) -> None:
        """Forget everything (after an error the cache may hold half a step)."""
        self.ids = []
        self._cache = None

    def common_prefix(self, ids: list[int]) -> int:
        """Length of the longest common prefix of ``ids`` and the cached ids."""
        n = 0
        for a, b in zip(self.ids, ids):
            if a != b:
                break
            n += 1
        return n

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

    def _use(self, impl: str) -> None:
        if self._impl != impl:
            self.model.set_attn_implementation(impl)
            self._impl = impl

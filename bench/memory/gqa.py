"""Attention without copying the keys and values for every query head (grouped queries).

SmolLM2 has 9 query heads over 3 key/value heads.  transformers' eager attention (the one
that returns the probabilities the replay reads) first repeats each key/value head 3
times, a copy of the whole cache per layer and per block: at a 2k-8k cache that copy
costs about as much as the attention itself.  ``grouped_eager`` computes the same
probabilities with the query heads of one key/value head stacked, against the shared
keys (same products, same softmax, same order: the rows agree with eager to float
rounding).  The fast path (no rows) gets the same from torch's own grouped-query
``scaled_dot_product_attention`` (``TRANSFORMERS_SDPA_FORCE_GQA``; bit-identical here).

What the replay reads is one row per query: the attention summed over every head of every
layer.  With :class:`Rows` active the function adds each layer's head sum to it as the
layer runs and hands transformers no probabilities, instead of the model keeping every
layer's ``[heads, q, keys]`` probabilities to the end of the pass (30 layers x 9 heads x
64 queries x 8k keys = 566 MB per block at the fidelity reference's window, allocated
afresh each time) and summing them afterwards.  Same sums, same order: the same floats.
"""

from __future__ import annotations

import os

NAME = "halo_grouped_eager"

# Read by transformers' sdpa integration on every call; torch then attends per key/value
# head without repeat_kv, also with the causal mask a cache continuation needs.
os.environ.setdefault("TRANSFORMERS_SDPA_FORCE_GQA", "1")


class Rows:
    """Head-and-layer sums of the attention of one forward pass (see the module docstring).

    ``with Rows() as rows: model(...)``; then ``rows.total`` is ``[q, keys]`` (float32,
    the sum over layers, in layer order, of each layer's sum over heads) and
    ``rows.layers`` / ``rows.heads`` what it summed."""

    active: "Rows | None" = None

    def __init__(self, skip: int = 0) -> None:
        self.total = None
        self.layers = 0
        self.heads = 0
        #: Leading queries whose rows nobody reads (a prompt's end run in the same pass as
        #: the forced tokens): they attend through torch's fast kernel, no probabilities.
        self.skip = skip

    def add(self, probs) -> None:
        s = probs[0].float().sum(0)  # [heads, q, keys] -> [q, keys]
        self.total = s if self.total is None else self.total + s
        self.layers += 1
        self.heads = probs.shape[1]

    def mean(self):
        """The mean over layers and heads, ``[q, keys]``."""
        return self.total / (self.layers * self.heads)

    def __enter__(self) -> "Rows":
        if Rows.active is not None:
            raise RuntimeError("attention rows are already being read")
        Rows.active = self
        return self

    def __exit__(self, *exc) -> None:
        Rows.active = None


def grouped_eager(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """transformers' eager attention (probabilities returned, or added to the active
    :class:`Rows`) for grouped-query heads."""
    import torch
    import torch.nn.functional as F

    skip = Rows.active.skip if Rows.active is not None else 0
    first = None
    if skip:
        mask = None if attention_mask is None else attention_mask[:, :, :skip, :key.shape[2]]
        first = F.scaled_dot_product_attention(query[:, :, :skip], key, value, attn_mask=mask,
                                               scale=scaling, enable_gqa=True)
        if skip == query.shape[2]:
            return first.transpose(1, 2).contiguous(), None
        query = query[:, :, skip:]
        if attention_mask is not None:
            attention_mask = attention_mask[:, :, skip:]
    b, heads, q, d = query.shape
    groups = key.shape[1]
    k = key.shape[2]
    per = heads // groups  # query heads per key/value head, in transformers' order
    # Scaled and masked in place (the same operations as eager's, so the same floats,
    # without two more [heads, q, keys] tensors: 5-15 % of this function at 8k keys).
    scores = torch.matmul(query.reshape(b, groups, per * q, d), key.transpose(2, 3))
    scores.mul_(scaling)
    scores = scores.view(b, groups, per, q, k)
    if attention_mask is not None:
        scores.add_(attention_mask[:, :, None, :, :k])
    probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    out = torch.matmul(probs.view(b, groups, per * q, k), value).view(b, heads, q, d)
    if first is not None:
        out = torch.cat((first, out), dim=2)
    probs = probs.view(b, heads, q, k)
    if Rows.active is not None:
        Rows.active.add(probs)
        probs = None
    return out.transpose(1, 2).contiguous(), probs


def register() -> str:
    """Make ``NAME`` an attention implementation (eager's additive mask); returns it."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

    AttentionInterface.register(NAME, grouped_eager)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, eager_mask)
    return NAME

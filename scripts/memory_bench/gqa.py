"""Attention without copying the keys and values for every query head (grouped queries).

SmolLM2 has 9 query heads over 3 key/value heads.  transformers' eager attention (the one
that returns the probabilities the replay reads) first repeats each key/value head 3
times, a copy of the whole cache per layer and per block: at a 2k-8k cache that copy
costs about as much as the attention itself.  ``grouped_eager`` computes the same
probabilities with the query heads of one key/value head stacked, against the shared
keys (same products, same softmax, same order: the rows agree with eager to float
rounding).  The fast path (no rows) gets the same from torch's own grouped-query
``scaled_dot_product_attention`` (``TRANSFORMERS_SDPA_FORCE_GQA``; bit-identical here).
"""

from __future__ import annotations

import os

NAME = "halo_grouped_eager"

# Read by transformers' sdpa integration on every call; torch then attends per key/value
# head without repeat_kv, also with the causal mask a cache continuation needs.
os.environ.setdefault("TRANSFORMERS_SDPA_FORCE_GQA", "1")


def grouped_eager(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """transformers' eager attention (probabilities returned) for grouped-query heads."""
    import torch

    b, heads, q, d = query.shape
    groups = key.shape[1]
    k = key.shape[2]
    per = heads // groups  # query heads per key/value head, in transformers' order
    scores = torch.matmul(query.reshape(b, groups, per * q, d), key.transpose(2, 3)) * scaling
    scores = scores.view(b, groups, per, q, k)
    if attention_mask is not None:
        scores = scores + attention_mask[:, :, None, :, :k]
    probs = torch.nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    out = torch.matmul(probs.view(b, groups, per * q, k), value).view(b, heads, q, d)
    return out.transpose(1, 2).contiguous(), probs.view(b, heads, q, k)


def register() -> str:
    """Make ``NAME`` an attention implementation (eager's additive mask); returns it."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

    AttentionInterface.register(NAME, grouped_eager)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, eager_mask)
    return NAME

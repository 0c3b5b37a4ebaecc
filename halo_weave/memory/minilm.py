"""A BERT encoder in plain torch, for the bundled MiniLM: no transformers import.

The app's first message after a start waits for the memory, and the memory for the
embedder.  Loading it through transformers imported transformers' model machinery
(SciPy, SymPy, its quantizers and loss functions: ~5.5 s on two Zen 3 cores, after
torch's ~2.7 s) to run a six-layer encoder.  For a BERT folder with a ``tokenizer.json``
and ``model.safetensors`` (all-MiniLM-L6-v2 is one) the encoder runs here instead: the
word-pieces from the ``tokenizers`` library (the Rust tokenizer transformers' fast
tokenizer wraps, reading the same file), the weights from the safetensors file, and the
forward pass of BERT's post-layer-norm encoder written out: embeddings (word + position +
token type 0, layer norm), then per layer self-attention (the padding masked out), a
residual and layer norm, a GELU feed-forward, a residual and layer norm.  Its vectors equal
sentence-transformers' to float rounding (``tests/test_embedder_vectors.py``).  Any other
folder is loaded with transformers (:mod:`.embedder`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np


def runs_here(folder: Path) -> bool:
    """Whether ``folder`` holds a BERT this module runs: its config, a ``tokenizer.json``
    and ``model.safetensors``."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return (config.get("model_type") == "bert" and config.get("position_embedding_type", "absolute") == "absolute"
            and config.get("hidden_act") == "gelu" and (folder / "tokenizer.json").is_file()
            and (folder / "model.safetensors").is_file())


class WordPieces:
    """The folder's ``tokenizer.json``, as BERT reads it: ``[CLS] pieces [SEP]``."""

    def __init__(self, folder: Path, max_tokens: int) -> None:
        from tokenizers import Tokenizer

        self._plain = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._plain.no_truncation()
        self._plain.no_padding()
        self._batched = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._batched.enable_truncation(max_tokens)
        pad = self._batched.token_to_id("[PAD]")
        self._batched.enable_padding(pad_id=0 if pad is None else pad, pad_token="[PAD]")
        self.max_tokens = max_tokens

    def counts(self, texts: list[str]) -> list[int]:
        """Word-pieces of each text, without the specials."""
        return [len(e.ids) for e in self._plain.encode_batch(texts, add_special_tokens=False)]

    def ids_and_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Each word-piece's id and ``(start, end)`` in ``text``, without the specials."""
        encoded = self._plain.encode(text, add_special_tokens=False)
        return list(encoded.ids), list(encoded.offsets)

    def batch(self, texts: list[str]):
        """``(ids, mask)`` int64 tensors ``[len(texts), longest]``: the texts with their
        specials, cut to :attr:`max_tokens`, padded to the longest."""
        import torch

        encoded = self._batched.encode_batch(texts)
        ids = torch.tensor([e.ids for e in encoded], dtype=torch.int64)
        mask = torch.tensor([e.attention_mask for e in encoded], dtype=torch.int64)
        return ids, mask


class Bert:
    """BERT's encoder (post-layer-norm, absolute positions, GELU) from a safetensors file:
    :meth:`states` gives the last layer's states of a batch."""

    def __init__(self, folder: Path, device: str = "cpu") -> None:
        import torch
        from safetensors.torch import load_file

        config = json.loads((folder / "config.json").read_text())
        self.hidden_size = int(config["hidden_size"])
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        weights = load_file(str(folder / "model.safetensors"))
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
        self.w = {name[len(prefix):]: tensor.to(device) for name, tensor in weights.items()
                  if name.startswith(prefix) and tensor.is_floating_point()}
        self.device = device
        self.dtype = torch.float32

    def to(self, dtype) -> "Bert":
        """The weights in ``dtype`` (bfloat16 where the CPU computes it natively)."""
        self.w = {name: tensor.to(dtype) for name, tensor in self.w.items()}
        self.dtype = dtype
        return self

    def _norm(self, x, name: str):
        import torch

        return torch.nn.functional.layer_norm(x, (self.hidden_size,), self.w[f"{name}.weight"],
                                              self.w[f"{name}.bias"], self.eps)

    def _linear(self, x, name: str):
        import torch

        return torch.nn.functional.linear(x, self.w[f"{name}.weight"], self.w[f"{name}.bias"])

    def states(self, ids, mask):
        """The last layer's states ``[batch, tokens, hidden]`` of ``ids`` (``mask``: 1 for
        a real piece, 0 for padding)."""
        import torch

        w, n = self.w, ids.shape[1]
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = self._norm(x, "embeddings.LayerNorm")
        batch, head_dim = ids.shape[0], self.hidden_size // self.heads
        # Padding is never attended to: the lowest finite value of the dtype added to its scores.
        bias = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        scale = 1.0 / math.sqrt(head_dim)

        def heads(t):  # [batch, tokens, hidden] -> [batch, heads, tokens, head_dim]
            return t.view(batch, n, self.heads, head_dim).transpose(1, 2)

        for i in range(self.layers):
            layer = f"encoder.layer.{i}"
            q = heads(self._linear(x, f"{layer}.attention.self.query"))
            k = heads(self._linear(x, f"{layer}.attention.self.key"))
            v = heads(self._linear(x, f"{layer}.attention.self.value"))
            scores = torch.matmul(q, k.transpose(-1, -2)) * scale + bias
            context = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2).reshape(batch, n, -1)
            x = self._norm(self._linear(context, f"{layer}.attention.output.dense") + x,
                           f"{layer}.attention.output.LayerNorm")
            inner = torch.nn.functional.gelu(self._linear(x, f"{layer}.intermediate.dense"))
            x = self._norm(self._linear(inner, f"{layer}.output.dense") + x, f"{layer}.output.LayerNorm")
        return x


def mean_pooled(states, mask) -> np.ndarray:
    """Each text's states averaged over its real pieces, scaled to length 1 (float32)."""
    import torch

    weights = mask.unsqueeze(-1).to(states.dtype)
    mean = (states * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
    return torch.nn.functional.normalize(mean.float(), p=2, dim=1).cpu().numpy()

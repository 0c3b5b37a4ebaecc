"""``python -m halo_weave.server.llamacpp.canary MODE GGUF``: a few tokens, then exit 0.

The child process :mod:`.safety` runs to learn whether llama.cpp survives on this CPU
with the settings ``MODE`` (``default`` or ``safe``): it loads the model the way the
engine does, prefills a short prompt (the batched matrix products) and decodes a few
tokens one at a time (the vector products).  It prints the tokens it chose and exits 0;
a crash shows as the signal that killed it.
"""

from __future__ import annotations

import ctypes
import os
import sys

PROMPT = b"The capital of France is"
NEW_TOKENS = 4


def run(mode: str, gguf: str) -> list[int]:
    """Load ``gguf`` with ``mode``'s settings and return the greedy tokens it decodes."""
    from . import bindings, safety

    L = bindings.load().llama
    model = L.llama_model_load_from_file(gguf.encode(), safety.apply(L.llama_model_default_params(), mode))
    if not model:
        raise RuntimeError(f"llama.cpp cannot load {gguf}")
    vocab = L.llama_model_get_vocab(model)
    params = L.llama_context_default_params()
    params.n_ctx = params.n_batch = params.n_ubatch = 64
    params.n_threads = params.n_threads_batch = max(1, min(2, os.cpu_count() or 1))
    params.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
    ctx = L.llama_init_from_model(model, params)
    if not ctx:
        raise RuntimeError("llama.cpp could not create a context")
    ids = (L.llama_token * 64)()
    n = L.llama_tokenize(vocab, PROMPT, len(PROMPT), ids, 64, True, False)
    if n <= 0:
        raise RuntimeError("the prompt did not tokenize")
    n_vocab = int(L.llama_vocab_n_tokens(vocab))
    chosen: list[int] = []
    batch, count = ids, n
    for _ in range(NEW_TOKENS):
        if L.llama_decode(ctx, L.llama_batch_get_one(batch, count)) != 0:
            raise RuntimeError("llama_decode failed")
        logits = ctypes.cast(L.llama_get_logits_ith(ctx, -1), ctypes.POINTER(ctypes.c_float * n_vocab)).contents
        best = max(range(n_vocab), key=logits.__getitem__)
        chosen.append(best)
        batch, count = (L.llama_token * 1)(best), 1
    L.llama_free(ctx)
    L.llama_model_free(model)
    return chosen


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m halo_weave.server.llamacpp.canary default|safe GGUF", file=sys.stderr)
        return 2
    print("ok", *run(argv[1], argv[2]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""The llama.cpp engine (GGUF models): attention read out of llama.cpp's graph, KV surgery.

* :mod:`.bindings` - llama-cpp-python's C API plus the ggml calls bound here;
* :mod:`.cache` - the context as the server's KV cache: decoding, cells, surgery;
* :mod:`.decoder` - batches run through the context, with their thread counts;
* :mod:`.readout` - the attention read out of the graph by ggml's evaluation callback;
* :mod:`.growth` - a larger context when a request needs more cells, and packing it;
* :mod:`.filter` - ggml's per-node asks answered in C (compiled on first use), not Python;
* :mod:`.states` - pruned spans' states saved to host memory and put back without a run;
* :mod:`.engine` - :class:`LlamaEngine`, the engine the server serves.

Importing this package loads nothing heavy; llama-cpp-python is imported when an
engine is created.
"""

from __future__ import annotations


def __getattr__(name: str):
    if name == "LlamaEngine":
        from .engine import LlamaEngine

        return LlamaEngine
    raise AttributeError(name)

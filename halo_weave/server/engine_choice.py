"""Choose and load the engine the server runs: ``--engine llamacpp|transformers|auto``.

``auto`` takes llama.cpp for a GGUF file (the bundled models included) when
llama-cpp-python is installed, and transformers otherwise (a transformers model
directory, a CUDA device, or no llama-cpp-python).  Each engine's heavy imports
happen here, on demand: the llama.cpp path never imports torch.
"""

from __future__ import annotations

import logging

from . import loader
from .engine_base import AGGREGATED, EngineBase
from .kv_surgery import KV_MODES, SURGERY, TAIL_FIRST_DEFAULT
from .span_store import DEFAULT_STORE_BYTES, RESTORE_POLICIES, SAME_CONTEXT

log = logging.getLogger("halo_weave.server")

AUTO, LLAMACPP, TRANSFORMERS = "auto", "llamacpp", "transformers"
ENGINES = (AUTO, LLAMACPP, TRANSFORMERS)


def faster_engine_hint() -> str:
    """Shown when ``auto`` falls back to transformers for a GGUF file: the command that fixes it."""
    from .install_hints import engine_command

    return ("llama-cpp-python is not installed, so this GGUF model runs on transformers; "
            f"`{engine_command()}` (needs a C/C++ compiler, ~8 min) gives the "
            "llama.cpp engine, several times faster.")


def choose(kind: str, source: loader.ModelSource, device: str = "auto") -> str:
    """The engine ``kind`` resolves to for ``source`` (``auto`` decided here)."""
    if kind not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}")
    if kind != AUTO:
        return kind
    if not source.gguf_file or device == "cuda":
        return TRANSFORMERS
    from .llamacpp import bindings

    try:
        bindings.load()
    except bindings.LlamaUnavailable as exc:
        log.debug("llama.cpp unavailable: %s", exc)
        log.warning(faster_engine_hint())
        return TRANSFORMERS
    from .llamacpp import safety

    # A build that crashed its test run on this CPU, even with safe settings, is not used.
    return TRANSFORMERS if safety.verdict(source.path / source.gguf_file).mode == safety.UNUSABLE else LLAMACPP


def load_engine(
    kind: str = AUTO,
    model: str | None = None,
    *,
    device: str = "auto",
    context_size: int | None = None,
    attention_format: str = AGGREGATED,
    threads: int | None = None,
    cache_model: bool = True,
    kv_mode: str = SURGERY,
    kv_tail_first: bool = TAIL_FIRST_DEFAULT,
    store_bytes: int = DEFAULT_STORE_BYTES,
    kv_restore: str = SAME_CONTEXT,
    initial_context: int | None = None,
    gpu_layers: int = 0,
) -> EngineBase:
    """Load ``model`` (``None``: the bundled default, see :mod:`.bundled`) on the engine ``kind`` names;
    ``kv_tail_first``: run a request's new tokens before its insertions (see
    :func:`.kv_surgery.sync`); ``store_bytes`` bounds the host memory keeping pruned spans' states;
    ``kv_restore``: where those states may be put back (see :mod:`.span_store`);
    ``initial_context``: KV cells the llama.cpp engine starts with (it grows on demand up
    to ``context_size``; the transformers engine's cache has no fixed size); ``gpu_layers``:
    the llama.cpp engine's layers on a GPU (see :mod:`.llamacpp.offload`; the transformers
    engine takes ``device`` instead)."""
    if kv_mode not in KV_MODES:
        raise ValueError(f"kv mode must be one of {KV_MODES}")
    if kv_restore not in RESTORE_POLICIES:
        raise ValueError(f"kv restore must be one of {RESTORE_POLICIES}")
    source = loader.resolve(model)
    chosen = choose(kind, source, device)
    if chosen == LLAMACPP:
        if not source.gguf_file:
            raise loader.ModelNotFound("the llama.cpp engine needs a .gguf file")
        if device == "cuda":
            raise ValueError("the llama.cpp engine is put on a GPU with --gpu-layers N (-1: every layer), "
                             "not --device cuda (which is the transformers engine's)")
        from .llamacpp.engine import LlamaEngine

        engine = LlamaEngine(source.path / source.gguf_file, context_size=context_size,
                             threads=threads, attention_format=attention_format,
                             initial_cells=initial_context, gpu_layers=gpu_layers)
    else:
        from .transformers_engine import TransformersEngine

        engine = TransformersEngine.load(source, device=device, context_size=context_size,
                             attention_format=attention_format, cache_model=cache_model,
                             threads=threads if device != "cuda" else None)
    offload = getattr(engine, "offload", None)
    engine.model_note = " ".join(n for n in (source.note, offload.note if offload else None) if n) or None
    engine.kv.mode = kv_mode
    engine.kv.tail_first = kv_tail_first
    engine.kv.store.max_bytes = store_bytes
    engine.kv.store.restore = kv_restore
    return engine


def engine_note(kind: str, model_note: str | None = None) -> str | None:
    """What the window shows with the model: ``model_note`` (why this is not the model
    asked for) and the sentence about how llama.cpp runs on this machine (None: nothing
    to say: the model asked for, llama.cpp's default settings or not consulted here)."""
    from .llamacpp import safety

    notes = [model_note] if model_note else []
    found = safety.known_verdict()
    if found is not None and (kind, found.mode) in ((LLAMACPP, safety.SAFE), (TRANSFORMERS, safety.UNUSABLE)):
        notes.append(found.sentence)
    return " ".join(notes) or None

"""The llama.cpp engine: a GGUF model served with attention, quantized, at llama.cpp speed.

Built on llama-cpp-python's low-level API (the high-level ``Llama`` class takes no
evaluation callback).  The context is created with flash attention off (the softmax
nodes the attention is read from only exist then; a context for answers only may have it
on), a unified KV cache and
:data:`~.cache.N_SEQ` sequences (live and scratch, see :mod:`.cache`).
Tokenization, stop tokens and generation behave as in the transformers engine; text
pieces come from each token's bytes as llama.cpp stores them.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from .. import loader
from ..engine_base import AGGREGATED, ATTENTION_FORMATS, CHATML_TEMPLATE, STOP_TOKEN_NAMES, EngineBase
from ..tokens import TokenText
from . import bindings
from . import filter as filter_
from . import offload as offload_
from . import safety
from ..span_store import DEFAULT_STORE_BYTES
from .cache import N_SEQ, LlamaCache
from .growth import CELL_PAD, Growth
from .readout import K_CACHE_LAYER0, SOFTMAX_PREFIX, AttentionReadout

log = logging.getLogger("halo_weave.server")

#: Tokens per llama_decode call while prefilling.
N_BATCH = 512
#: ggml log levels relayed to our log (the others are debug, info and continuations).
WARN_LEVEL, ERROR_LEVEL = 3, 4


class LlamaEngine(EngineBase):
    """A GGUF model in llama.cpp (see the module docstring)."""

    kind = "llamacpp"
    device = "cpu"
    loaded_from_cache = False

    def __init__(self, path: Path, *, context_size: int | None = None, threads: int | None = None,
                 attention_format: str = AGGREGATED, capture_threads: int | None = None,
                 store_bytes: int = DEFAULT_STORE_BYTES, initial_cells: int | None = None,
                 c_filter: bool = True, read_attention: bool = True, gpu_layers: int = 0) -> None:
        """``threads`` run prefill and plain decoding; ``capture_threads`` a decode whose
        attention is read (default: ``threads``);
        ``store_bytes`` bounds the host memory keeping pruned spans' states (0: none);
        ``initial_cells``: KV cells to start with (default: ``context_size``); a request
        that needs more grows the cache (see :meth:`.LlamaCache.reserve`), up to
        ``context_size``.  Fewer cells make every prune cheaper: llama.cpp re-rotates the
        keys of every cell after a position shift;
        ``c_filter``: answer ggml's per-node asks in C where it compiles (:mod:`.filter`);
        ``read_attention=False``: a context for answers only, with flash attention on
        (several times faster at long contexts, where the plain kernel writes every
        head's whole score matrix), but no attention can be read: a decode that asks for
        it fails with :class:`~.readout.DecodeError`;
        ``gpu_layers``: layers on a GPU, -1 all (a CPU-only build runs them on the CPU and
        says so in :attr:`offload`'s note, see :mod:`.offload`)."""
        if attention_format not in ATTENTION_FORMATS:
            raise ValueError(f"attention format must be one of {ATTENTION_FORMATS}")
        if initial_cells is not None and initial_cells < 1:
            raise ValueError(f"the initial context must be a positive number of tokens, not {initial_cells}")
        self._init_locks()
        lib = bindings.load()
        L = self.L = lib.llama
        self._silence_logs()
        #: The layers on a GPU, and what the window says when none could be.
        self.offload = offload_.resolve(L, gpu_layers)
        # Settings this CPU survives: see .safety (AMX, and the canary's verdict).
        model = L.llama_model_load_from_file(str(path).encode(),
                                             safety.model_params(L, path, self.offload.layers))
        if not model:
            raise loader.ModelNotFound(f"llama.cpp cannot load {path}")
        self.model = model
        self.path = Path(path)
        self.vocab = L.llama_model_get_vocab(model)
        self.name = path.stem
        self.default_attention_format = attention_format
        trained = int(L.llama_model_n_ctx_train(model))
        self.context_size = context_size or trained or 4096
        if trained and self.context_size > trained:
            log.warning("context size %d exceeds the model's trained %d", self.context_size, trained)
        self._n_layer = int(L.llama_model_n_layer(model))
        self._n_head = int(L.llama_model_n_head(model))
        self.device = self.offload.device(self._n_layer)
        n_vocab = int(L.llama_vocab_n_tokens(self.vocab))
        # No spare cells: a restore that finds no room for a whole stored entry in the
        # scratch sequence (a prompt near the full context) runs the span instead.
        max_cells = _padded(self.context_size)
        n_cells = min(_padded(initial_cells), max_cells) if initial_cells else max_cells

        cp = self._params = L.llama_context_default_params()
        cp.n_batch = cp.n_ubatch = N_BATCH
        cp.n_seq_max = N_SEQ
        cp.kv_unified = True
        # The softmax nodes the attention is read from exist only with flash attention off.
        cp.flash_attn_type = (L.LLAMA_FLASH_ATTN_TYPE_DISABLED if read_attention
                              else L.LLAMA_FLASH_ATTN_TYPE_ENABLED)
        self.reads_attention = read_attention
        threads = threads or max(1, os.cpu_count() or 1)
        cp.n_threads = cp.n_threads_batch = threads
        readout = AttentionReadout(lib, self._n_layer, self._n_head)  # its callback goes into the context
        # The C filter answers ggml's per-node asks without entering Python (see .filter);
        # every context made from these parameters (a grown cache too) uses it.
        self._filter = filter_.build(L.ggml_backend_sched_eval_callback, readout.callback, lib.ggml.ggml_get_name,
                                     lib.ggml.ggml_backend_tensor_get, bindings.NE_OFFSET,
                                     SOFTMAX_PREFIX, K_CACHE_LAYER0) if c_filter else None
        if self._filter is not None:
            cp.cb_eval, cp.cb_eval_user_data = self._filter.callback, self._filter.user_data
            readout.use_filter(self._filter)
        else:
            self._callback = L.ggml_backend_sched_eval_callback(readout.callback)
            cp.cb_eval = self._callback
        # The same library stops a read-ahead's batch part way when an answer comes.
        stopper = self._filter.stopper(L.ggml_abort_callback) if self._filter is not None else None
        ctx = self._new_context(n_cells)
        cache = LlamaCache(lib, ctx, self._n_layer, self._n_head, n_cells, N_BATCH, n_vocab,
                           readout=readout, threads=(threads, capture_threads or threads),
                           growth=Growth(max_cells, self._new_context), stopper=stopper)
        cache.store.max_bytes = store_bytes
        self._kv = cache
        self.threads = threads
        self.text = TokenText.from_table(*self._token_table(n_vocab))
        self.stop_ids = frozenset(self._find_stop_ids())

    def _new_context(self, n_cells: int):
        """A llama.cpp context of ``n_cells`` KV cells (the cache frees it)."""
        self._params.n_ctx = n_cells
        ctx = self.L.llama_init_from_model(self.model, self._params)
        if not ctx:
            raise RuntimeError(f"llama.cpp could not create a context of {n_cells} cells")
        return ctx

    @property
    def ctx(self):
        """The llama.cpp context (replaced when the cache grows)."""
        return self._kv.ctx if getattr(self, "_kv", None) is not None else None

    @property
    def n_cells(self) -> int:
        """KV cells the context has now (at most ``context_size``, padded)."""
        return self._kv.n_cells

    def _silence_logs(self) -> None:
        L = self.L

        def relay(level, text, _user_data) -> None:
            if level in (WARN_LEVEL, ERROR_LEVEL) and text:
                message = text.decode("utf-8", "replace").rstrip()
                if message:
                    log.warning("llama.cpp: %s", message)

        self._log_callback = L.llama_log_callback(relay)
        L.llama_log_set(self._log_callback, None)

    # ---------------------------------------------------------------- tokens

    def _token_table(self, n_vocab: int):
        L, vocab = self.L, self.vocab
        import ctypes

        buf = ctypes.create_string_buffer(256)
        table, special = [], set()
        control = L.LLAMA_TOKEN_ATTR_CONTROL
        for token in range(n_vocab):
            if L.llama_vocab_get_attr(vocab, token) & control:
                special.add(token)
                table.append(b"")
                continue
            n = L.llama_token_to_piece(vocab, token, buf, len(buf), 0, False)
            table.append(buf.raw[:n] if n > 0 else b"")
        return table, special

    def encode(self, text: str, add_special_tokens: bool = False, parse_special: bool = False) -> list[int]:
        import ctypes

        data = text.encode("utf-8")
        room = len(data) + 16
        out = (ctypes.c_int32 * room)()
        n = self.L.llama_tokenize(self.vocab, data, len(data), out, room, add_special_tokens, parse_special)
        if n < 0:  # more tokens than bytes: cannot happen for BPE, but size it and retry
            out = (ctypes.c_int32 * -n)()
            n = self.L.llama_tokenize(self.vocab, data, len(data), out, -n, add_special_tokens, parse_special)
        return list(out[:n])

    def _token_text(self, token: int) -> str:
        return (self.L.llama_vocab_get_text(self.vocab, token) or b"").decode("utf-8", "replace")

    def _find_stop_ids(self) -> set[int]:
        L, vocab = self.L, self.vocab
        ids = {L.llama_vocab_eos(vocab), L.llama_vocab_eot(vocab)}
        for token in self.text.special_ids:
            if self._token_text(token) in STOP_TOKEN_NAMES or L.llama_vocab_is_eog(vocab, token):
                ids.add(token)
        return {i for i in ids if i >= 0}

    # ---------------------------------------------------------------- model facts

    @property
    def num_layers(self) -> int:
        return self._n_layer

    @property
    def num_heads(self) -> int:
        return self._n_head

    @property
    def kv(self) -> LlamaCache:
        return self._kv

    def _meta(self, key: str) -> str | None:
        import ctypes

        buf = ctypes.create_string_buffer(256)
        n = self.L.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace") if n >= 0 else None

    def describe(self) -> dict:
        L, vocab = self.L, self.vocab
        arch = self._meta("general.architecture") or "llama"
        rope = self._meta(f"{arch}.rope.freq_base")
        eot = self.template_tokens().get("<|im_end|>", L.llama_vocab_eot(vocab))
        return {
            "num_key_value_heads": int(L.llama_model_n_head_kv(self.model)),
            "embedding_size": int(L.llama_model_n_embd(self.model)),
            "max_trained_context": int(L.llama_model_n_ctx_train(self.model)),
            "bos_token_id": _or_none(L.llama_vocab_bos(vocab)),
            "eos_token_id": _or_none(L.llama_vocab_eos(vocab)),
            "eot_token_id": eot if eot >= 0 and self.chat_template() else -1,
            "rope_freq_base": float(rope) if rope else 10000.0,
        }

    def fingerprint(self) -> str:
        """What a saved cache must have been made with to be read back here: the model
        file (name, size, time), the llama.cpp build and the shape of its cache."""
        L = self.L
        try:
            stat = self.path.stat()
            made = f"{stat.st_size}:{stat.st_mtime_ns}"
        except OSError:
            made = "?"
        import llama_cpp

        return "|".join(map(str, (
            self.kind, self.path.name, made, getattr(llama_cpp, "__version__", "?"),
            self._n_layer, int(L.llama_model_n_head_kv(self.model)), int(L.llama_model_n_embd(self.model)),
            self.vocab_size, self._params.type_k, self._params.type_v)))

    def chat_template(self) -> str | None:
        """The GGUF's chat template (ChatML when it has none but knows ChatML)."""
        template = self.L.llama_model_chat_template(self.model, None)
        if template:
            return template.decode("utf-8", "replace")
        texts = {self._token_text(t) for t in self.text.special_ids}
        return CHATML_TEMPLATE if {"<|im_start|>", "<|im_end|>"} <= texts else None

    def template_tokens(self) -> dict[str, int]:
        template = self.chat_template() or ""
        found = {}
        for token in sorted(self.text.special_ids):
            text = self._token_text(token)
            if text and text in template:
                found.setdefault(text, token)
        return found

    def close(self) -> None:
        """Free the context and the model (the engine is unusable afterwards)."""
        if self.ctx:
            ctx = self.ctx
            self._kv.close()
            self.L.llama_free(ctx)
            self.L.llama_model_free(self.model)
            self._kv.ctx = self.model = None


def _padded(n: int) -> int:
    return -(-n // CELL_PAD) * CELL_PAD


def _or_none(token: int) -> int | None:
    return token if token >= 0 else None

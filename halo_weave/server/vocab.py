"""The vocabulary size of the model a conversation will be used with.

An import checks its token ids against it (ids outside the vocabulary made every
later generation fail).  The connected server reports ``vocab_size`` in
``/api/v1/model``; without a server, the default bundled model's token list is counted by
reading only its metadata header (milliseconds; ``gguf.GGUFReader`` parses every tensor record
and takes seconds).
"""

from __future__ import annotations

import functools
import struct
from pathlib import Path
from typing import BinaryIO

_GGUF_MAGIC = b"GGUF"
_TOKENS_KEY = "tokenizer.ggml.tokens"
#: GGUF value type -> byte size of fixed-size values (8 = string, 9 = array).
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


def _u32(f: BinaryIO) -> int:
    return struct.unpack("<I", f.read(4))[0]


def _u64(f: BinaryIO) -> int:
    return struct.unpack("<Q", f.read(8))[0]


def _skip_value(f: BinaryIO, kind: int) -> None:
    if kind in _FIXED:
        f.seek(_FIXED[kind], 1)
    elif kind == _STRING:
        f.seek(_u64(f), 1)
    elif kind == _ARRAY:
        item, count = _u32(f), _u64(f)
        if item in _FIXED:
            f.seek(_FIXED[item] * count, 1)
        else:
            for _ in range(count):
                _skip_value(f, item)
    else:
        raise ValueError(f"unknown GGUF value type {kind}")


def gguf_vocab_size(path: Path) -> int | None:
    """How many tokens the GGUF file's tokenizer holds (None when it names none)."""
    with open(path, "rb") as f:
        if f.read(4) != _GGUF_MAGIC:
            raise ValueError(f"{Path(path).name} is not a GGUF file")
        _u32(f)  # version
        _u64(f)  # tensor count
        for _ in range(_u64(f)):
            key = f.read(_u64(f)).decode("utf-8", "replace")
            kind = _u32(f)
            if key == _TOKENS_KEY and kind == _ARRAY:
                _u32(f)
                return _u64(f)
            _skip_value(f, kind)
    return None


@functools.lru_cache(maxsize=1)
def bundled_vocab_size() -> int | None:
    """The default bundled model's vocabulary size (None when it is not installed)."""
    from .bundled import ModelNotFound, default_header

    try:
        return gguf_vocab_size(default_header())
    except (ModelNotFound, OSError, ValueError, struct.error):
        return None


def vocab_size_for(model_info) -> int | None:
    """The connected server's vocabulary when it reports one, else the default bundled model's."""
    raw = getattr(model_info, "raw", None) or {}
    size = raw.get("vocab_size") if isinstance(raw, dict) else None
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    return bundled_vocab_size()

"""Checks of an export document that need more than its shape: Unicode and the vocabulary.

A JSON file can spell a lone surrogate (``"\\ud800"``), which Python parses into a string
that cannot be written as UTF-8: SQLite, the window and the next export would each fail
later with an unclear error.  And token ids outside the model's vocabulary are accepted
by the file format but make every later generation fail with HTTP 400.  Both are refused
here, naming the field and the reason (:class:`~halo_weave.errors.TransferError`).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import TransferError


def _fail(where: str, problem: str):
    raise TransferError(f"Invalid export: {where} {problem}.")


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def bad_text_path(value: Any, where: str = "the document") -> str | None:
    """Where (``tokens.text[12]``) the first string that is not valid UTF-8 sits, if any."""
    if isinstance(value, str):
        return None if _encodable(value) else where
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and not _encodable(key):
                return f"{where} (a key)"
            found = bad_text_path(item, f"{where}.{key}" if where != "the document" else str(key))
            if found:
                return found
        return None
    if isinstance(value, list):
        # One join per list keeps a million token texts in C; walk only when it fails.
        if all(type(v) is str for v in value):
            if _encodable("".join(value)):
                return None
            for i, text in enumerate(value):
                if not _encodable(text):
                    return f"{where}[{i}]"
            return where  # a pair split across two items
        for i, item in enumerate(value):
            found = bad_text_path(item, f"{where}[{i}]")
            if found:
                return found
    return None


def check_unicode(document: dict) -> None:
    """Refuse any string in the document that is not valid UTF-8 (lone surrogates)."""
    where = bad_text_path(document)
    if where:
        _fail(where, "holds text that is not valid Unicode (a lone surrogate)")


def check_token_ids(ids: Sequence[int] | np.ndarray, where: str, vocab_size: int | None) -> None:
    """Refuse token ids outside ``0 .. vocab_size - 1`` (nothing to check without one)."""
    if not vocab_size:
        return
    array = np.asarray(ids, dtype=np.int64)
    if not array.size:
        return
    outside = np.flatnonzero((array < 0) | (array >= vocab_size))
    if outside.size:
        at = int(outside[0])
        _fail(
            f"{where}[{at}]",
            f"= {int(array[at])} is outside the model's vocabulary (0..{vocab_size - 1}; "
            f"{outside.size} id(s) in all): this conversation was made with another model",
        )

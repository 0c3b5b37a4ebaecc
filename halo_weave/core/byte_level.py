"""GPT-2 byte-level token pieces: the table that maps their characters back to bytes.

Byte-level BPE tokenizers (SmolLM2's among them) spell each byte as one printable
character; both the server's token texts and the text-mode tokenizer need the inverse.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's ``bytes_to_unicode`` table: piece character → byte."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("\xa1"), ord("\xac") + 1))
        + list(range(ord("\xae"), ord("\xff") + 1))
    )
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}

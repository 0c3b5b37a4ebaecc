"""Token ids to text that joins up exactly, including characters split across tokens.

Byte-level BPE vocabularies (SmolLM2, GPT-2, Llama 3, Qwen) give many emoji and CJK
characters as two or three tokens that each hold a fragment of the UTF-8 bytes.  The
server streams one event per token, so each token's piece is what its bytes *complete*:
a token that ends inside a character gets ``""`` and the token that completes it
carries the whole character.  Pieces therefore concatenate to exactly
:meth:`TokenText.decode` of the same ids, which is what ``/api/v1/detokenize`` returns
(an incomplete character at the very end is left out of both).

Special (control) tokens such as ``<|im_start|>`` have empty pieces and are dropped by
:meth:`TokenText.decode`, as in KoboldCPP.
"""

from __future__ import annotations

import codecs
import re

from ..core.byte_level import byte_decoder

#: SentencePiece's word-boundary mark and byte-fallback token form.
SP_SPACE = "\u2581"
SP_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


class TokenText:
    """Per-token byte strings of one tokenizer, and decoding built on them."""

    def __init__(self, tokenizer) -> None:
        self.vocab_size = len(tokenizer)
        added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        self.special_ids = frozenset(
            {int(i) for i in tokenizer.all_special_ids if i is not None and i >= 0}
            | {int(i) for i, tok in added.items() if getattr(tok, "special", False)}
        )
        self._bytes = self._build_table(tokenizer)

    @classmethod
    def from_table(cls, table: list[bytes], special_ids) -> "TokenText":
        """From each token's bytes (``b""`` for control tokens), e.g. read from llama.cpp."""
        self = cls.__new__(cls)
        self.vocab_size = len(table)
        self.special_ids = frozenset(int(i) for i in special_ids)
        self._bytes = list(table)
        return self

    def _build_table(self, tokenizer) -> list[bytes]:
        pieces = tokenizer.convert_ids_to_tokens(list(range(self.vocab_size)))
        added = {int(i) for i in getattr(tokenizer, "added_tokens_decoder", {})}
        byte_level = byte_decoder()
        regular = [p for i, p in enumerate(pieces) if i not in added and p]
        if regular and all(all(ch in byte_level for ch in p) for p in regular):
            convert = lambda p: bytes(byte_level[ch] for ch in p)  # noqa: E731
        elif any(SP_BYTE.match(p or "") for p in regular):
            convert = _sentencepiece_bytes
        else:
            # Unknown scheme: single-token decoding loses split characters but keeps text.
            def convert(p, _t=tokenizer):
                return _t.convert_tokens_to_string([p]).encode("utf-8")

        table = []
        for i, piece in enumerate(pieces):
            if i in self.special_ids or piece is None:
                table.append(b"")
            elif i in added:
                table.append(piece.encode("utf-8"))
            else:
                table.append(convert(piece))
        return table

    def token_bytes(self, token_id: int) -> bytes:
        """The UTF-8 bytes one token contributes (``b""`` for control tokens)."""
        return self._bytes[token_id]

    def decode(self, ids) -> str:
        """Text of ``ids``; control tokens are dropped, invalid UTF-8 becomes U+FFFD.

        An incomplete character at the very end (generation stopped between its byte
        tokens) is left out rather than shown as U+FFFD, exactly as streaming does.
        """
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        return decoder.decode(b"".join(self._bytes[i] for i in ids), final=False)

    def pieces(self, ids) -> list[str]:
        """One piece per id; the pieces concatenate to exactly :meth:`decode` of ``ids``."""
        stream = self.stream()
        return [stream.push(i) for i in ids]

    def stream(self) -> "PieceStream":
        """An incremental decoder for a sequence of generated tokens."""
        return PieceStream(self)


class PieceStream:
    """Turns token ids into text pieces one at a time, holding back split characters."""

    def __init__(self, table: TokenText) -> None:
        self._table = table
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        """The text this token completes (``""`` while a character is still incomplete)."""
        return self._decoder.decode(self._table.token_bytes(token_id), final=False)

    @property
    def pending(self) -> bool:
        """True while bytes of an unfinished character are held back."""
        return bool(self._decoder.getstate()[0])


def _sentencepiece_bytes(piece: str) -> bytes:
    match = SP_BYTE.match(piece)
    if match:
        return bytes([int(match.group(1), 16)])
    return piece.replace(SP_SPACE, " ").encode("utf-8")

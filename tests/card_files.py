"""Character cards as SillyTavern writes them, built byte by byte for the tests: a PNG
image with the card's JSON base64-encoded in a ``tEXt`` chunk, and the JSON alone."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

#: A V2 card: every field the import reads, with SillyTavern's placeholders.
SERAPHINA = {
    "spec": "chara_card_v2",
    "spec_version": "2.0",
    "data": {
        "name": "Seraphina",
        "description": "{{char}} is a forest guardian with pink hair who heals travellers in her glade.",
        "personality": "warm, protective, a little mischievous",
        "scenario": "{{user}} wakes up in {{char}}'s glade after a storm.",
        "first_mes": "*{{char}} kneels beside you.* Welcome to my glade, {{user}}. You are safe now.",
        "mes_example": "<START>\n{{user}}: Who are you?\n{{char}}: I keep this forest, and now I keep you.",
        "system_prompt": "",
        "post_history_instructions": "",
        "alternate_greetings": ["Ah, you are awake."],
        "tags": ["fantasy"],
        "creator": "test",
        "character_version": "1",
        "extensions": {},
    },
}

#: A V1 card: the same fields flat at the top.
V1_CARD = {
    "name": "Captain Mora",
    "description": "<BOT> commands the airship Kestrel.",
    "personality": "gruff, loyal",
    "scenario": "<USER> has just signed on as a deckhand.",
    "first_mes": "Welcome aboard, {{user}}. I'm {{char}}. Don't touch the red lever.",
    "mes_example": "",
}


def chunk(kind: bytes, body: bytes, crc: int | None = None) -> bytes:
    """One PNG chunk: length, type, data, CRC-32 of type and data (or ``crc``)."""
    return (struct.pack(">I", len(body)) + kind + body
            + struct.pack(">I", zlib.crc32(kind + body) if crc is None else crc))


def text_chunk(keyword: str, text: bytes) -> bytes:
    return chunk(b"tEXt", keyword.encode("latin-1") + b"\0" + text)


def png(*extra: bytes) -> bytes:
    """A 2x2 RGB PNG with ``extra`` chunks (e.g. :func:`text_chunk`) before its pixels."""
    header = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)
    rows = b"".join(b"\x00" + bytes([200, 120, 160]) * 2 for _ in range(2))
    return (PNG_SIGNATURE + chunk(b"IHDR", header) + b"".join(extra)
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def card_png(card: dict, keyword: str = "chara") -> bytes:
    """A PNG carrying ``card`` as SillyTavern writes it."""
    return png(text_chunk(keyword, base64.b64encode(json.dumps(card).encode("utf-8"))))


def write_card(folder: Path, name: str, content: dict | bytes) -> Path:
    """``content`` (a card as JSON, or a file's bytes) written to ``folder/name``."""
    path = Path(folder) / name
    path.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode("utf-8"))
    return path

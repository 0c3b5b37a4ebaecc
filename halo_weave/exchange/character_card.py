"""Import a SillyTavern character card as a new conversation.

A card is a PNG image whose ``tEXt`` chunk with the keyword ``chara`` holds the card's
JSON, base64-encoded (``ccv3``, a V3 card's copy, is read when there is no ``chara``), or
that JSON alone in a ``.json`` file.  Two shapes are read:

* V2 (and V3): ``{"spec": "chara_card_v2", "data": {name, description, personality,
  scenario, first_mes, mes_example, system_prompt, ...}}``;
* V1: the same fields flat at the top, or TavernAI's older names (``char_name``,
  ``char_persona``, ``world_scenario``, ``char_greeting``, ``example_dialogue``).

The conversation gets the card's text as its own system prompt (the character's
description, personality, scenario and example dialogue, ``{{char}}`` and ``{{user}}``
filled in) and the card's greeting as its first answer.  The system prompt is never
pruned, so the character stays whole however long the chat runs; recalling it would
bring back only the paragraphs a message matches, and a character is needed in every
answer.  A card's lorebook (``character_book``), alternate greetings and
post-history instructions are not imported.

A card that cannot be used is refused with the reason (not a PNG, no character in it, a
damaged chunk, bad base64 or JSON, no name, a field too long) and nothing is written.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from ..conversation import Framing
from ..errors import TransferError
from ..settings import DEFAULT_SYSTEM_PROMPT, Settings
from .foreign_import import ForeignChat, Message, Tokenize, write_chat

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: The ``tEXt`` keywords that hold a card, in the order they are looked for.
CARD_KEYWORDS = ("chara", "ccv3")
#: A card file larger than this is refused unread (cards with large pictures are a few MB).
MAX_CARD_BYTES = 50 << 20
#: The longest text field accepted (characters, about 8,000 tokens): the card's text is the
#: system prompt of every request, which the model's window must hold beside the chat.
MAX_FIELD_CHARS = 32_000
MAX_NAME_CHARS = 200
#: Who ``{{user}}`` is: SillyTavern's default persona name.
USER_NAME = "User"
#: What the system prompt opens with when the card brings no ``system_prompt`` of its own.
CHARACTER_INSTRUCTION = (
    "This is a role-play chat between {{char}} and {{user}}. You are {{char}}: write only "
    "{{char}}'s next reply, in {{char}}'s voice, with what {{char}} says and does, and stay in "
    "character. Never write {{user}}'s words or actions.")

#: The fields read (the rest of a card is left alone, whatever it holds).
_TEXT_FIELDS = ("description", "personality", "scenario", "first_mes", "mes_example", "system_prompt")
#: TavernAI's older field names -> today's.
_V1_NAMES = {"char_name": "name", "char_persona": "description", "world_scenario": "scenario",
             "char_greeting": "first_mes", "example_dialogue": "mes_example"}
_FIELD_WORDS = {"description": "description", "personality": "personality", "scenario": "scenario",
                "first_mes": "first message", "mes_example": "example dialogue",
                "system_prompt": "system prompt"}


@dataclass(frozen=True)
class CharacterCard:
    """A character card's fields (text, ``""`` where the card has none)."""

    name: str
    description: str = ""
    personality: str = ""
    scenario: str = ""
    first_mes: str = ""
    mes_example: str = ""
    system_prompt: str = ""
    spec: str = "v1"  # "chara_card_v2", "chara_card_v3" or "v1"


# ---------------------------------------------------------------------- reading
def looks_like_card(path: Path) -> bool:
    """Whether ``path`` is a PNG or starts like a character card's JSON (a cheap look at
    its head, to tell a card from another app's chat)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64 << 10)
    except OSError:
        return False
    if head.startswith(PNG_SIGNATURE):
        return True
    text = head.decode("utf-8", "ignore")
    return re.search(r'"spec"\s*:\s*"chara_card_v|"(first_mes|char_greeting)"\s*:', text) is not None


def read_card(path: Path) -> CharacterCard:
    """The card in ``path``: a PNG with the card in it, or the card's JSON."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_CARD_BYTES:
            raise TransferError(f"{path.name} is {size >> 20} MB, too large for a character card.")
        data = path.read_bytes()
    except OSError as exc:
        raise TransferError(f"Could not read {path.name}: {exc.strerror or exc}") from exc
    if data.startswith(PNG_SIGNATURE):
        return parse_card_png(data, path.name)
    if path.suffix.lower() == ".png":
        raise TransferError(f"{path.name} is not a PNG image (its first bytes are not PNG's), "
                            "so not a character card.")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise TransferError(f"{path.name} is neither a PNG image nor UTF-8 text, so not a character card.") from None
    return parse_card_json(text, path.name)


def png_text_chunks(data: bytes, name: str = "card.png") -> dict[str, bytes]:
    """The ``tEXt`` chunks of a PNG file: keyword -> its text's bytes (the first of each
    keyword).  Raises :class:`TransferError` for a file that is not a whole PNG."""
    if not data.startswith(PNG_SIGNATURE):
        raise TransferError(f"{name} is not a PNG image.")
    texts: dict[str, bytes] = {}
    position = len(PNG_SIGNATURE)
    while True:
        if position + 8 > len(data):
            raise TransferError(f"{name} is cut short: the PNG image ends before its last chunk.")
        length, kind = struct.unpack(">I4s", data[position:position + 8])
        end = position + 12 + length
        if end > len(data):
            raise TransferError(f"{name} is cut short: a PNG chunk runs past the end of the file.")
        body = data[position + 8:end - 4]
        if kind == b"tEXt":
            (crc,) = struct.unpack(">I", data[end - 4:end])
            if zlib.crc32(kind + body) != crc:
                raise TransferError(f"{name} is damaged: a text chunk's checksum does not match.")
            keyword, separator, text = body.partition(b"\0")
            if separator:
                texts.setdefault(keyword.decode("latin-1"), text)
        if kind == b"IEND":
            return texts
        position = end


def parse_card_png(data: bytes, name: str = "card.png") -> CharacterCard:
    """The card embedded in a PNG image (see the module docstring)."""
    texts = png_text_chunks(data, name)
    keyword = next((k for k in CARD_KEYWORDS if k in texts), None)
    if keyword is None:
        raise TransferError(f"{name} is a PNG image with no character card in it "
                            f"(no '{CARD_KEYWORDS[0]}' text chunk).")
    try:
        raw = base64.b64decode(b"".join(texts[keyword].split()), validate=True)
    except (binascii.Error, ValueError):
        raise TransferError(f"{name}: the character data in its '{keyword}' chunk is not base64.") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise TransferError(f"{name}: the character data in its '{keyword}' chunk is not UTF-8 text.") from None
    return parse_card_json(text, name)


def parse_card_json(text: str, name: str = "card.json") -> CharacterCard:
    """The card in its JSON text (V2/V3 with ``spec`` and ``data``, or V1's flat fields)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TransferError(f"{name}: the character card is not valid JSON ({exc.msg}, "
                            f"line {exc.lineno}, column {exc.colno}).") from None
    except RecursionError:
        raise TransferError(f"{name}: the character card is nested too deeply.") from None
    return card_from_dict(doc, name)


def card_from_dict(doc, name: str = "card.json") -> CharacterCard:
    """The card of an already parsed JSON document."""
    if not isinstance(doc, dict):
        raise TransferError(f"{name}: a character card is a JSON object, not {type(doc).__name__}.")
    spec = doc.get("spec")
    if spec in ("chara_card_v2", "chara_card_v3"):
        fields = doc.get("data")
        if not isinstance(fields, dict):
            raise TransferError(f"{name}: a {spec} card keeps its character in \"data\", which is missing.")
    elif spec is not None:
        raise TransferError(f"{name}: unknown character card spec {str(spec)[:40]!r} "
                            "(chara_card_v2 and chara_card_v3 are read).")
    else:
        spec = "v1"
        fields = dict(doc)
        for old, new in _V1_NAMES.items():
            if old in doc and not fields.get(new):
                fields[new] = doc[old]
    char = fields.get("name")
    if not isinstance(char, str) or not char.strip():
        raise TransferError(f"{name}: the character card has no name, so it is not a character.")
    if len(char.strip()) > MAX_NAME_CHARS:
        raise TransferError(f"{name}: the character's name is longer than {MAX_NAME_CHARS} characters.")
    values = {}
    for key in _TEXT_FIELDS:
        value = fields.get(key)
        if value is None:
            value = ""
        if not isinstance(value, str):
            raise TransferError(f"{name}: the card's {_FIELD_WORDS[key]} ({key}) must be text, "
                                f"not {type(value).__name__}.")
        if len(value) > MAX_FIELD_CHARS:
            raise TransferError(f"{name}: the card's {_FIELD_WORDS[key]} ({key}) is {len(value):,} "
                                f"characters, more than the {MAX_FIELD_CHARS:,} a card's field may hold.")
        values[key] = value
    return CharacterCard(char.strip(), spec=spec, **values)


# ---------------------------------------------------------------------- the conversation
def substitute(text: str, char: str, user: str = USER_NAME) -> str:
    """``text`` with ``{{char}}`` and ``{{user}}`` (any letter case; TavernAI's ``<BOT>``
    and ``<USER>`` too) replaced by the names."""
    text = re.sub(r"\{\{\s*char\s*\}\}|<BOT>", lambda _: char, text, flags=re.IGNORECASE)
    return re.sub(r"\{\{\s*user\s*\}\}|<USER>", lambda _: user, text, flags=re.IGNORECASE)


def example_dialogue(mes_example: str) -> str:
    """The example dialogue without its ``<START>`` markers (each example a paragraph)."""
    examples = [block.strip() for block in re.split(r"<START>", mes_example, flags=re.IGNORECASE)]
    return "\n\n".join(block for block in examples if block)


def card_prompt(card: CharacterCard, user: str = USER_NAME, original: str = DEFAULT_SYSTEM_PROMPT) -> str:
    """The system prompt a card's conversation keeps: the card's own instruction (its
    ``{{original}}`` being ``original``, the app's default prompt) or a role-play one, then
    the description, personality, scenario and example dialogue."""
    opening = card.system_prompt.strip() or CHARACTER_INSTRUCTION
    parts = [re.sub(r"\{\{\s*original\s*\}\}", lambda _: original, opening, flags=re.IGNORECASE)]
    if card.description.strip():
        parts.append(card.description.strip())
    if card.personality.strip():
        parts.append(f"{{{{char}}}}'s personality: {card.personality.strip()}")
    if card.scenario.strip():
        parts.append(f"Scenario: {card.scenario.strip()}")
    examples = example_dialogue(card.mes_example)
    if examples:
        parts.append(f"Examples of how {{{{char}}}} talks:\n\n{examples}")
    return substitute("\n\n".join(parts), card.name, user)


def greeting(card: CharacterCard, user: str = USER_NAME) -> str:
    """The card's first message, names filled in (``""`` when it has none)."""
    return substitute(card.first_mes, card.name, user).strip()


def import_card(path: Path, data_dir: Path, tokenize: Tokenize, framing: Framing,
                settings: Settings | None = None) -> Path:
    """Read a character card and write it as a new conversation (its system prompt the
    card's text, its first answer the card's greeting); returns the new file.  Raises
    :class:`TransferError` (writing nothing) for a card that cannot be used."""
    return write_card(read_card(Path(path)), data_dir, tokenize, framing, settings)


def write_card(card: CharacterCard, data_dir: Path, tokenize: Tokenize, framing: Framing,
               settings: Settings | None = None) -> Path:
    """Write ``card`` as a new conversation (see :func:`import_card`)."""
    settings = settings or Settings()
    first = greeting(card)
    chat = ForeignChat("character card", card.name, [Message("assistant", first)] if first else [],
                       names={"assistant": card.name})
    return write_chat(chat, data_dir, tokenize, framing, settings,
                      system_prompt=card_prompt(card, original=settings.chat.system_prompt))

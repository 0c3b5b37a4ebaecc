"""Import a chat from another app: a SillyTavern chat (``.jsonl``) or a KoboldAI Lite save (``.json``).

Neither format has a written specification; what is accepted here follows how each app
writes and reads its files (SillyTavern: ``public/script.js`` ``saveChat``,
``src/endpoints/chats.js``; KoboldAI Lite: ``index.html`` ``generate_savefile`` and
``kai_json_load``):

SillyTavern, one JSON object per line:
  * a header line ``{user_name, character_name, create_date, chat_metadata}`` (old
    TavernAI chats: no ``chat_metadata``, ``create_date`` in milliseconds); group chats
    have no header, every line is a message;
  * messages ``{name, is_user, is_system, send_date, mes, swipes, swipe_id, extra}``;
    ``mes`` is the text the model saw (Chub exports: ``{"message": ...}``, swipes too);
    ``is_system`` messages are hidden from the model and are not imported;
  * ``send_date``: ISO 8601, ``"June 19, 2023 2:20pm"``, ``"2024-7-12@01h31m37s"``,
    ``"2024-6-5 @14h 56m 50s 682ms"`` or Unix milliseconds (older files).

KoboldAI Lite, one JSON object: the story is ``prompt`` + ``actions`` (v1 files, Lite's own
and old KoboldAI), ``prompt`` + ``actions.actions[*]["Selected Text"]`` (v2 files, with
``file_version``) or ``ga`` (old share files).  The turns are read back from that text by
the mode it was written in (``savedsettings.opmode``): instruct (``{{[INPUT]}}`` /
``{{[OUTPUT]}}`` placeholders, or the literal tags of older saves), chat (``"\\nName: "``
lines, ``chatname`` against ``chatopponent``, several opponents as ``A||$||B``) and
adventure (``"\\n\\n> action\\n\\n"``).  A story-mode save has no turns and is refused.
Memory, author's note and world info are not part of the chat and are not imported.

Like the JSON import (:mod:`halo_weave.exchange.transfer`) this is all or nothing: the whole
file is read and checked, then every message is tokenized with the connected server,
then the new conversation file is written under a temporary name in one transaction
and renamed into place.  A problem at any step leaves no file behind.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ..conversation import Conversation, Framing
from ..errors import TransferError
from ..rules import WITHOUT_BRIGHTNESS
from ..settings import Settings
from ..store import ConversationStore
from ..storage.st_dates import parse_st_date
from .transfer import MAX_FILE_BYTES, write_new_conversation

#: The longest single message accepted (characters).
MAX_MESSAGE_CHARS = 4 << 20
MAX_MESSAGES = 200_000
ROLES = ("user", "assistant")

#: tokenize(text) -> [(token_id, text piece)], the connected server's tokenizer.
Tokenize = Callable[[str], Sequence[tuple[int, str]]]


@dataclass
class Message:
    role: str  # "user" or "assistant"
    text: str
    created_at: float | None = None


@dataclass
class ForeignChat:
    """A chat read from another app's file, checked and ready to tokenize."""

    source: str  # "SillyTavern" or "KoboldAI Lite"
    title: str
    messages: list[Message] = field(default_factory=list)
    skipped: int = 0  # hidden/system messages left out
    #: Who speaks for a role, when the file says ({"assistant": "Seraphina", "user": "Ann"}).
    names: dict[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------------- reading
def is_halo_weave_export(path: Path) -> bool:
    """Whether ``path`` starts like our own JSON export (else: another app's chat)."""
    try:
        with open(path, "rb") as f:
            head = f.read(256).decode("utf-8", "ignore")
    except OSError:
        return True  # let the JSON import report the problem
    return re.match(r'\s*\{\s*"format"\s*:\s*"halo-weave"', head.lstrip("\ufeff")) is not None


def read_foreign(path: Path) -> ForeignChat:
    """Read a SillyTavern ``.jsonl`` or KoboldAI Lite ``.json`` file (by its content)."""
    text = _read_text(Path(path))
    stripped = text.lstrip("\ufeff \t\r\n")
    if Path(path).suffix.lower() == ".jsonl" or (stripped.startswith("{") and "\n{" in stripped.strip()):
        return parse_sillytavern(text, Path(path).name)
    return parse_kobold_lite(text, Path(path).name)


def _read_text(path: Path) -> str:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise TransferError(f"{path.name} is {size >> 20} MB, too large to import.")
        raw = path.read_bytes()
    except OSError as exc:
        raise TransferError(f"Could not read {path.name}: {exc.strerror or exc}") from exc
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise TransferError(f"{path.name} is not UTF-8 text, so not a chat file.") from None


def _json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TransferError(f"{where} is not valid JSON ({exc.msg}, column {exc.colno}).") from None
    except RecursionError:
        raise TransferError(f"{where} is nested too deeply.") from None


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise TransferError(f"{where}: expected text, found {type(value).__name__}.")
    if len(value) > MAX_MESSAGE_CHARS:
        raise TransferError(f"{where} is longer than {MAX_MESSAGE_CHARS:,} characters.")
    return value


# -- SillyTavern
def parse_sillytavern(text: str, name: str = "chat.jsonl") -> ForeignChat:
    """The messages of a SillyTavern chat file (see the module docstring)."""
    lines = [(n, line) for n, line in enumerate(text.lstrip("\ufeff").split("\n"), 1) if line.strip()]
    if not lines:
        raise TransferError(f"{name} is empty.")
    if len(lines) > MAX_MESSAGES:
        raise TransferError(f"{name} has more than {MAX_MESSAGES:,} messages.")
    objects = []
    for n, line in lines:
        value = _json(line, f"{name}, line {n}")
        if not isinstance(value, dict):
            raise TransferError(f"{name}, line {n}: expected a JSON object, not a SillyTavern chat.")
        objects.append((n, value))
    header: dict = {}
    if not _is_st_message(objects[0][1]):
        n, header = objects.pop(0)
        if not any(k in header for k in ("user_name", "character_name", "chat_metadata", "name")):
            raise TransferError(f"{name}, line {n}: neither a SillyTavern chat header nor a message.")
    chat = ForeignChat("SillyTavern", _st_title(header, name))
    speakers: dict[str, set[str]] = {}
    for n, obj in objects:
        where = f"{name}, line {n}"
        if not _is_st_message(obj):
            raise TransferError(f"{where}: not a chat message (no 'mes').")
        is_user, is_system = obj.get("is_user", False), obj.get("is_system", False)
        if not isinstance(is_user, bool) or not isinstance(is_system, bool):
            raise TransferError(f"{where}: 'is_user' and 'is_system' must be true or false.")
        body = _st_text(obj, where)
        if is_system or not body.strip():
            chat.skipped += 1
            continue
        role = "user" if is_user else "assistant"
        chat.messages.append(Message(role, body.replace("\r\n", "\n"), parse_st_date(obj.get("send_date"))))
        speaker = obj.get("name")
        if isinstance(speaker, str) and speaker.strip():
            speakers.setdefault(role, set()).add(speaker.strip()[:80])
    if not chat.messages:
        raise TransferError(f"{name} holds no messages to import.")
    # A role's name: the header's, else its one speaker's (a group chat's several stay unnamed).
    for role, key in (("user", "user_name"), ("assistant", "character_name")):
        named, heard = header.get(key), speakers.get(role, set())
        if isinstance(named, str) and named.strip() and len(heard - {named.strip()[:80]}) == 0:
            chat.names[role] = named.strip()[:80]
        elif len(heard) == 1:
            chat.names[role] = next(iter(heard))
    return chat


def _is_st_message(obj: dict) -> bool:
    return "mes" in obj or ("swipes" in obj and "swipe_id" in obj)


def _st_text(obj: dict, where: str) -> str:
    mes = obj.get("mes")
    if isinstance(mes, dict):  # Chub exports
        mes = mes.get("message")
    if mes is None:  # only swipes: the chosen one
        swipes, index = obj.get("swipes"), obj.get("swipe_id")
        if not isinstance(swipes, list) or not isinstance(index, int) or not 0 <= index < len(swipes):
            raise TransferError(f"{where}: 'swipe_id' does not point into 'swipes'.")
        mes = swipes[index]
        mes = mes.get("message") if isinstance(mes, dict) else mes
    return _text(mes, f"{where}, 'mes'")


def _st_title(header: dict, name: str) -> str:
    character = header.get("character_name")
    if isinstance(character, str) and character.strip():
        return f"{character.strip()} (SillyTavern)"[:200]
    return f"{Path(name).stem} (SillyTavern)"[:200]


# -- KoboldAI Lite
_IMAGE = re.compile(r"\[<\|[ph]\|.+?\|[ph]\|>\]")
_PLACEHOLDER = re.compile(r"\{\{\[(INPUT|OUTPUT|SYSTEM)(_END)?\]\}\}")


def parse_kobold_lite(text: str, name: str = "save.json") -> ForeignChat:
    """The turns of a KoboldAI Lite (or KoboldAI) save (see the module docstring)."""
    doc = _json(text, name)
    if not isinstance(doc, dict):
        raise TransferError(f"{name} is not a KoboldAI Lite save (expected a JSON object).")
    pieces = _kobold_pieces(doc, name)
    story = _IMAGE.sub("", "".join(pieces)).replace("\r\n", "\n")
    settings = doc.get("savedsettings") if isinstance(doc.get("savedsettings"), dict) else {}
    mode = settings.get("opmode")
    if mode is not None and (isinstance(mode, bool) or not isinstance(mode, int)):
        raise TransferError(f"{name}: 'savedsettings.opmode' must be a number.")
    user = settings.get("chatname") if isinstance(settings.get("chatname"), str) else "User"
    opponents = settings.get("chatopponent") if isinstance(settings.get("chatopponent"), str) else "KoboldAI"
    starts = [t for t in (settings.get("instruct_starttag"),) if isinstance(t, str)]
    ends = [t for t in (settings.get("instruct_endtag"),) if isinstance(t, str)]
    if mode is None:  # old KoboldAI files and share files carry no settings: judge by the text
        mode = 4 if _PLACEHOLDER.search(story) else 3 if re.search(rf"(^|\n){re.escape(user)}:", story) else 1
    if mode == 4:
        messages, skipped = _instruct_turns(story, starts, ends)
    elif mode == 3:
        messages, skipped = _chat_turns(story, user or "User", [o for o in opponents.split("||$||") if o] or ["KoboldAI"])
    elif mode == 2:
        messages, skipped = _adventure_turns(story), 0
    else:
        raise TransferError(f"{name} is a story-mode save: it has no chat turns to import "
                            "(open it in KoboldAI Lite's chat or instruct mode first).")
    messages = [m for m in messages if m.text.strip()]
    if not messages:
        raise TransferError(f"{name} holds no messages to import.")
    chat = ForeignChat("KoboldAI Lite", f"{Path(name).stem} (KoboldAI Lite)"[:200], messages, skipped)
    return chat


def _kobold_pieces(doc: dict, name: str) -> list[str]:
    actions = doc.get("actions")
    if actions is None and isinstance(doc.get("ga"), list):  # old share format
        return [_text(p, f"{name}, 'ga'") for p in doc["ga"]]
    if actions is None or "prompt" not in doc:
        raise TransferError(f"{name} is not a KoboldAI Lite save (no 'prompt' and 'actions').")
    pieces = [_text(doc["prompt"], f"{name}, 'prompt'")]
    if isinstance(actions, list):  # v1: Lite and old KoboldAI
        pieces += [_text(a, f"{name}, action {i}") for i, a in enumerate(actions)]
    elif isinstance(actions, dict) and isinstance(actions.get("actions"), dict):  # v2: KoboldAI United
        items = sorted(actions["actions"].items(), key=lambda kv: int(kv[0]) if str(kv[0]).isdigit() else 0)
        for key, item in items:
            if not isinstance(item, dict):
                raise TransferError(f"{name}, action {key}: expected an object.")
            pieces.append(_text(item.get("Selected Text", ""), f"{name}, action {key}"))
    else:
        raise TransferError(f"{name}: 'actions' is neither a list nor KoboldAI's action table.")
    if len(pieces) > MAX_MESSAGES:
        raise TransferError(f"{name} has more than {MAX_MESSAGES:,} actions.")
    return pieces


def _unescape_tag(tag: str) -> str:
    return tag.replace("\\n", "\n").strip()


def _instruct_turns(story: str, starts: list[str], ends: list[str]) -> tuple[list[Message], int]:
    """Split instruct text at its tags: placeholders, or the literal tags of older saves."""
    tags: list[tuple[str, str]] = []  # (literal, kind)
    for tag in starts:
        if _unescape_tag(tag) and not _PLACEHOLDER.fullmatch(_unescape_tag(tag)):
            tags.append((_unescape_tag(tag), "INPUT"))
    for tag in ends:
        if _unescape_tag(tag) and not _PLACEHOLDER.fullmatch(_unescape_tag(tag)):
            tags.append((_unescape_tag(tag), "OUTPUT"))
    literal = "|".join(re.escape(t) for t, _ in sorted(tags, key=lambda t: -len(t[0])))
    pattern = re.compile(_PLACEHOLDER.pattern + (f"|({literal})" if literal else ""))
    kinds = {t: k for t, k in tags}
    messages, skipped, role, start = [], 0, "assistant", 0  # text before any tag: a greeting

    def close(end: int) -> None:
        nonlocal skipped
        body = story[start:end].strip("\n")
        if role == "system":
            skipped += bool(body.strip())
        elif role is not None:
            messages.append(Message(role, body))

    for m in pattern.finditer(story):
        close(m.start())
        if m.group(2):  # an *_END tag: what follows belongs to no one until the next tag
            role = None
        else:
            kind = m.group(1) or kinds[m.group(3)]
            role = {"INPUT": "user", "OUTPUT": "assistant", "SYSTEM": "system"}[kind]
        start = m.end()
    close(len(story))
    return messages, skipped


def _chat_turns(story: str, user: str, opponents: list[str]) -> tuple[list[Message], int]:
    """``\\nName: text`` lines: the user's name against the opponents'; continuation lines join."""
    names = sorted({user, *opponents}, key=len, reverse=True)
    speaker = re.compile(r"(?:^|\n)(" + "|".join(re.escape(n) for n in names) + r"):[ \t]?")
    messages: list[Message] = []
    matches = list(speaker.finditer(story))
    preamble = story[: matches[0].start()].strip() if matches else story.strip()
    if preamble:
        messages.append(Message("assistant", preamble))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(story)
        body = story[m.end() : end].strip("\n")
        role = "user" if m.group(1) == user else "assistant"
        if role == "assistant" and len(opponents) > 1:
            body = f"{m.group(1)}: {body}"  # a group chat: keep who speaks
        messages.append(Message(role, body))
    return messages, 0


def _adventure_turns(story: str) -> list[Message]:
    """Adventure mode: the player's actions are ``\\n\\n> action\\n\\n``."""
    messages: list[Message] = []
    position = 0
    for m in re.finditer(r"\n\n> (.+?)\n\n", story):
        before = story[position : m.start()].strip("\n")
        if before.strip():
            messages.append(Message("assistant", before))
        messages.append(Message("user", m.group(1)))
        position = m.end()
    rest = story[position:].strip("\n")
    if rest.strip():
        messages.append(Message("assistant", rest))
    return messages


# ---------------------------------------------------------------------- writing
def merged(messages: list[Message]) -> list[Message]:
    """Consecutive messages of one role become one turn (paragraphs apart)."""
    out: list[Message] = []
    for message in messages:
        if out and out[-1].role == message.role:
            out[-1] = Message(message.role, f"{out[-1].text}\n\n{message.text}", out[-1].created_at)
        else:
            out.append(Message(message.role, message.text, message.created_at))
    return out


def import_foreign(path: Path, data_dir: Path, tokenize: Tokenize, framing: Framing,
                   settings: Settings | None = None) -> Path:
    """Read, check, tokenize and write a chat from another app as a new conversation.

    Returns the new conversation file; raises :class:`TransferError` (writing nothing)
    when the file is not a chat this module can read.  Chunks over the context budget
    are pruned oldest-first before writing (the semantic index can bring them back).
    """
    chat = read_foreign(Path(path))
    return write_chat(chat, data_dir, tokenize, framing, settings)


def write_chat(chat: ForeignChat, data_dir: Path, tokenize: Tokenize, framing: Framing,
               settings: Settings | None = None, system_prompt: str | None = None) -> Path:
    """Tokenize every message, then write the conversation in one transaction;
    ``system_prompt``: the conversation's own (framed when it is opened), instead of the
    settings' default."""
    settings = settings or Settings()
    turns = merged(chat.messages)
    tokenized = []
    for message in turns:
        pieces = list(tokenize(message.text))
        if not pieces:
            raise TransferError("The server returned no tokens for a message; nothing was imported.")
        tokenized.append(([int(i) for i, _ in pieces], [t for _, t in pieces]))
    conv = Conversation(settings, framing)
    now = time.time()
    for message, (ids, texts) in zip(turns, tokenized):
        conv.add_turn(message.role, ids, texts, created_at=message.created_at or now)
    pruned = []
    budget = settings.pruning.max_context_tokens
    if budget > 0:  # no attention yet: the oldest go first
        pruned = conv.prune_to_fit(budget, order=WITHOUT_BRIGHTNESS, keep_latest_exchange=True)
    def fill(store: ConversationStore) -> None:
        with store.transaction():
            for turn in conv.turns.values():
                store.save_turn(conv, turn)
            if pruned:
                store.save_chunks(conv, pruned)
            store.set_meta("title", chat.title)
            if system_prompt is not None:
                store.save_system_prompt(conv, own=system_prompt)
            if chat.names:
                store.set_meta("role_names", chat.names)
            store.set_meta("imported_from", {"app": chat.source, "messages": len(chat.messages),
                                             "skipped": chat.skipped})

    return write_new_conversation(data_dir, fill)

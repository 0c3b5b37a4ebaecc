"""How the open conversation uses the connected server: the chat template and model it
asks for, and the server's cache of it (named per conversation, warmed when it opens,
read ahead while a message is typed, saved after answers where the server keeps none).

Read-ahead (:mod:`.read_ahead`): while the user types, the server's cache takes the
prompt the message *would* get; Enter then sends the real prompt and only what differs
runs.  Warm-up: when a conversation opens, its live context is restored from the cache
the server saved for it (ours, llama-server's slot files) or read as a prefill.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass

from ..core.chat_template import TemplateStrings, detect_template
from ..core.token_resurrection import returning
from ..memory import relevance
from ..memory.recall_note import best_first, of_chunks
from ..memory.room import room_choice
from ..rules import prune_when
from ..storage.transfer_document import CACHE_KEY_META
from .read_ahead import input_ids_with


@dataclass(frozen=True)
class DraftPlan:
    """What a draft would bring back (:meth:`ServerUse.draft_plan`): the pruned content
    chunks in the order the message's recall keeps them (the plan's, best first), the
    framing chunks that come back with them, and the live chunks its room would prune."""

    recalled: list
    framing: list
    gone: list


def _framing_left(conv, kept: list, framing: list) -> list:
    """The chunks of ``framing`` whose turn still has content: live, or in ``kept``.  The
    framing of a turn whose recalled content all goes back goes with it, as a prune takes it."""
    turns = {c.turn_id for c in kept} | {c.turn_id for c in conv.live_chunks() if not c.framing}
    return [c for c in framing if c.turn_id in turns]


class ServerUse:
    """What the open conversation asks of its server and keeps there (``session.server``).

    Also the model's window (its context size, the room it leaves beside the answer) and
    the server's tokenizer.  Owns no state of its own: the choices are kept in the conversation's file (meta
    ``chat_template``, ``model``, the cache key), the template and cache in the backend.
    """

    def __init__(self, session) -> None:
        self._session = session

    # -- the choices saved with the conversation

    def saved_choice(self, key: str) -> str:
        """A choice saved in the conversation's file (meta ``key``); "" when there is none,
        no file, or the row cannot be read (the settings' default applies then)."""
        store = self._session.store
        if store is None:
            return ""
        try:
            saved = store.get_meta(key)
        except Exception:  # noqa: BLE001 - an unreadable meta row falls back to settings
            return ""
        return saved if isinstance(saved, str) else ""

    def template_choice(self) -> str:
        """The conversation's saved template choice, else the settings' (``"auto"``)."""
        return self.saved_choice("chat_template") or self._session.settings.server.chat_template

    def model_choice(self) -> str:
        """Which of the server's models this conversation uses (where it serves several):
        the one saved with it, else the settings' default ("" = the first the server lists)."""
        return self.saved_choice("model") or self._session.settings.server.served_model

    @property
    def template(self) -> TemplateStrings:
        """The chat template in use: the one the connection framed with (the server's own or
        the conversation's choice), else what the model info and the choice give."""
        session = self._session
        connected = session.backend.template if session.backend is not None else None
        return connected or detect_template(getattr(session.model_info, "chat_template", None), self.template_choice())

    # -- the model's window and tokenizer

    def tokenize(self, text: str) -> list[tuple[int, str]]:
        """The backend's tokens of ``text`` as text (blocking): markup in it stays text."""
        return self._session.backend.tokenize(text, add_special_tokens=False) if text else []

    @property
    def max_context(self) -> int:
        """The model's context size in tokens (0 when unknown)."""
        return int(getattr(self._session.model_info, "max_context", 0) or 0)

    def window_limit(self) -> int:
        """The prompt tokens the model's window leaves beside the answer (0 when unknown)."""
        session = self._session
        if self.max_context <= 0:
            return 0
        framing = session.framing
        frame = sum(len(ids) for ids, _ in [framing.prefix.get("assistant", ([], []))]) if framing else 0
        return self.max_context - session.settings.sampling.max_new_tokens - frame

    @property
    def prunes_for_room(self) -> bool:
        """Whether pruning waits until the model's window is full: ``prune_when``'s
        ``for_room`` (:mod:`halo_weave.rules.prune_when`) with a known window
        (:mod:`halo_weave.memory.room`)."""
        return prune_when(self._session.settings.pruning.prune_when).for_room and self.window_limit() > 0

    # -- the server's cache of the conversation

    def cache_key(self) -> str | None:
        """The name the server saves the open conversation's KV cache under: a random key
        kept in the file (a read-only file: one made from its path), and the branch shown
        (:meth:`branch_part`); None without a file."""
        store = self._session.store
        if store is None:
            return None
        try:
            key = store.get_meta(CACHE_KEY_META)
            if not key:
                key = uuid.uuid4().hex
                store.set_meta(CACHE_KEY_META, key)
            key = str(key)
        except Exception:  # noqa: BLE001 - a read-only or damaged file still gets a name
            key = hashlib.sha256(str(store.path).encode()).hexdigest()[:32]
        return key + self.branch_part()

    def branch_part(self) -> str:
        """``#`` and a name of the branch shown, where it is not the first one made at every
        branch point ("" there, so a conversation keeps its key until a later branch is
        shown): each branch's context has its own saved cache at the server, and switching
        back to one, or reopening on it, reads its cache back instead of its tail again."""
        try:
            later = sorted(s.first_turn_id for s in self._session.branches.states().values() if s.number > 1)
        except Exception:  # noqa: BLE001 - unreadable branch rows: the conversation's own key
            return ""
        if not later:
            return ""
        return "#" + hashlib.sha256(",".join(map(str, later)).encode()).hexdigest()[:16]

    def name_conversation(self) -> None:
        """Tell a server that saves caches per conversation which one its requests are for."""
        session = self._session
        if session.backend is not None:
            session.backend.conversation = self.cache_key() if session.conv is not None else None

    @property
    def can_warm_up(self) -> bool:
        """Whether the server can be given the open conversation's context before a message:
        restored from the cache it saved (ours), or read ahead as a prefill."""
        backend = self._session.backend
        return self._session.conv is not None and backend is not None and (backend.restores or self.can_read_ahead)

    def warm_up_ids(self) -> list[int]:
        """The prompt the next message starts with, as far as it is known: the live context
        (what a warm-up puts in the server's cache when a conversation opens)."""
        conv = self._session.conv
        return [int(i) for i in conv.live_input_ids()] if conv is not None else []

    def warm_up(self, ids: list[int], key: str | None, request_id: str | None = None) -> dict:
        """Put ``ids`` (:meth:`warm_up_ids`) in the server's cache for the conversation
        ``key`` names (:meth:`cache_key`; both read on the conversation's thread: the
        user may open another one meanwhile); blocking, the restore or prefill may take
        minutes; ``request_id`` lets ``backend.abort`` stop it.  Returns the server's answer."""
        session = self._session
        room = session.settings.sampling.max_new_tokens
        if session.backend is not None and session.backend.restores and key:
            return session.backend.restore(ids, max_length=room, conversation=key, request_id=request_id)
        if self.can_read_ahead:
            return session.backend.prepare(ids, max_length=room)
        return {}

    def save_cache(self) -> int:
        """Ask a server that keeps no cache per conversation itself to save this one's
        (llama-server's slot, :meth:`~halo_weave.backends.llama_server.LlamaServer.save_cache`);
        blocking.  Returns the tokens saved (0 where the server saves none)."""
        backend = self._session.backend
        return backend.save_cache() if backend is not None else 0

    # -- read-ahead

    @property
    def can_read_ahead(self) -> bool:
        """Whether the connected server takes the prompt of a message being typed."""
        session = self._session
        backend = session.backend
        return bool(session.conv is not None and session.framing is not None
                    and backend is not None and backend.read_ahead)

    def draft_plan(self, index, matches, ids: list[int]) -> DraftPlan:
        """What a message of token ``ids`` would bring back once sent, nothing changed:
        ``session.recall.recall_for``'s plan for ``matches`` (the search for the draft, on
        ``index``), read and not applied.

        When the message makes room (``session.recall.makes_room``) the chunks its plan would
        prune are left out too (:func:`~halo_weave.memory.room.room_choice`; a turn's framing
        that the prune would also take stays: the sync moves what differs)."""
        session = self._session
        recall = session.recall
        conv = session.conv
        user_tokens = len(ids) + recall.note_reserve
        if matches and index is not None and index is session.recall.index and recall.can_recall():
            if recall.makes_room:
                plan, gone, _ = room_choice(conv, matches, index.plan, **recall.room_terms(user_tokens))
            else:
                plan, gone = index.plan(conv, matches, recall.budget(user_tokens)), []
            if plan.taken:
                chunks = returning(conv, plan.chunk_ids, plan.with_anchors)
                content = best_first(plan, [c for c in chunks if not c.framing])
                return DraftPlan([conv.chunks[c] for c in content], [c for c in chunks if c.framing], list(gone))
            return DraftPlan([], [], list(gone))
        return DraftPlan([], [], [])

    def draft_ids(self, index, matches, ids: list[int], order: list[int] | None = None, text: str = "") -> list[int]:
        """:meth:`draft_prompt` of :meth:`draft_plan` (``order``: the relevance order of
        what it brings back, :meth:`.recall.Recall.ranking`'s answer for the draft)."""
        return self.draft_prompt(self.draft_plan(index, matches, ids), ids, order, text)

    def draft_prompt(self, plan: DraftPlan, ids: list[int], order: list[int] | None = None,
                     text: str = "") -> list[int]:
        """The prompt a message of token ``ids`` (its text ``text``, which the note's cue
        reads) would start with once sent: the live context with what ``plan`` brings
        back, the user turn's opening framing, the recall note of what came back
        (:mod:`halo_weave.memory.recall_note`), then ``ids``.

        ``order`` (what came back, the most relevant first: the relevance step the message
        takes once sent, :meth:`.recall.Recall.ranking`): only the part the message
        would keep comes back (:func:`~halo_weave.memory.relevance.kept`, with the framing
        of turns it leaves empty), and the note copies it in that order, as Enter's does.
        None: all of it, the note in the plan's order."""
        session = self._session
        recall, conv = session.recall, session.conv
        content, framing, note = plan.recalled, plan.framing, []
        if order is not None and recall.keeps_part(content):
            by_id = {c.id: c for c in content}
            ranked = [c for c in order if c in by_id]
            keep, _ = relevance.kept(ranked, {c: by_id[c].token_count for c in ranked},
                                     session.settings.recall.recall_keep_share)
            content = [by_id[c] for c in keep]
            framing = _framing_left(conv, content, framing)
        chunks = content + framing
        prefix = conv.framing.prefix.get("user", ([], []))[0]
        context = input_ids_with(conv, sorted(chunks, key=lambda c: c.start), plan.gone)
        if content and recall.writes_notes:
            # The note the answer's request will carry (Recall.note), in the room the whole
            # prompt leaves.
            framing = conv.framing
            prompt = len(context) + len(prefix) + len(ids) + len(framing.suffix.get("user", ([], []))[0]) \
                + len(framing.prefix.get("assistant", ([], []))[0])
            note = of_chunks(conv, content, recall.note_room(prompt), message=text)[0]
        return [*map(int, context), *map(int, prefix), *note, *map(int, ids)]

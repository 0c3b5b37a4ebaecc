"""Read-ahead: the prompt a message still being typed would be sent with, for a server
that can take it early (ours: ``/api/extra/prepare``, :meth:`halo_weave.kobold_client.KoboldClient.prepare`).

When the user presses Enter the server has to run the message's tokens over the whole
live context before the first answer token: ~50 tokens at 6k context cost ~0.5 s on two
cores, the floor of the chat's time to first token.  While the user types, the app sends
the prompt the message *would* get — the live context with what the search for the draft
would resurrect, the user turn's opening framing and the draft's finished words — and the
server's cache takes it.  Enter then sends the real prompt; the server's KV surgery keeps
every token the two share (a resurrection the final text plans differently is restored
from its span store or run in place), so only the last word, the closing framing and the
answer's opening remain to run.

Nothing here changes the conversation: the plan is the one :meth:`ChatSession.resurrect_for
<halo_weave.session.ChatSession.resurrect_for>` would make for the draft, read and not applied.
Functions of the session (``session``); Qt-free.
"""

from __future__ import annotations

import hashlib
import re
import uuid

import numpy as np

from ..core.pruning import load_pruned
from ..core.token_resurrection import returning
from ..memory.recall_note import best_first, note_tokens
from ..memory.room import room_choice
from ..storage.transfer_document import CACHE_KEY_META
from .resurrect import room_terms

_LAST_WORD = re.compile(r"\s+\S*$")



def settled_text(text: str) -> str:
    """The part of a message being typed that will not change: ``text`` as sent (stripped)
    up to its last word, which may still grow, unless a space or line already ended it."""
    sent = text.strip()
    if not sent or text[-1:].isspace():
        return sent
    match = _LAST_WORD.search(sent)
    return sent[:match.start()] if match else ""


def can_read_ahead(session) -> bool:
    """Whether the connected server takes a draft prompt early."""
    backend = session.backend
    return bool(session.conv is not None and session.framing is not None
                and getattr(backend, "read_ahead", False) and callable(getattr(backend, "prepare", None)))


def draft_ids(session, index, matches, ids: list[int]) -> list[int]:
    """The prompt a message of token ``ids`` would start with once sent: the live context
    with what :meth:`resurrect_for` would bring back for ``matches`` (the search for the
    draft, on ``index``), the user turn's opening framing, the recall note of what came
    back (:mod:`halo_weave.memory.recall_note`), then ``ids``.

    When the message makes room (:attr:`ChatSession.makes_room`) the chunks its plan would
    prune are left out too (:func:`~halo_weave.memory.room.room_choice`; a turn's framing
    that the prune would also take stays: the sync moves what differs)."""
    conv = session.conv
    chunks, gone = [], []
    user_tokens = len(ids) + session.note_reserve
    note: list[int] = []
    if matches and index is not None and index is session.index and session.can_resurrect():
        if session.makes_room:
            plan, gone, _ = room_choice(conv, matches, index.plan, **room_terms(session, user_tokens))
        else:
            plan = index.plan(conv, matches, session.resurrection_budget(user_tokens))
        if plan.taken:
            chunks = returning(conv, plan.chunk_ids, plan.with_anchors)
    prefix = conv.framing.prefix.get("user", ([], []))[0]
    context = input_ids_with(conv, chunks, gone)
    if chunks and session.writes_notes:
        # The note the answer's request will carry (ChatSession.recall_note), in the room
        # the whole prompt leaves.
        framing = conv.framing
        prompt = len(context) + len(prefix) + len(ids) + len(framing.suffix.get("user", ([], []))[0]) \
            + len(framing.prefix.get("assistant", ([], []))[0])
        order = best_first(plan, [c for c in chunks if not c.framing])
        tokens = (conv.chunk_tokens(c) for c in order)
        note = note_tokens(framing.note, ((t.token_ids, t.texts) for t in tokens), session.note_room(prompt))[0]
    return [*map(int, context), *map(int, prefix), *note, *map(int, ids)]


def input_ids_with(conv, chunks, without=()) -> np.ndarray:
    """``conv.live_input_ids()`` as it would read with the pruned ``chunks`` live again
    (at their original positions) and the live chunks ``without`` pruned, the
    conversation left as it is."""
    if not chunks and not without:
        return conv.live_input_ids()
    table = conv.table
    kept = np.ones(len(table.position), bool)
    for chunk in without:
        kept &= ~((table.position >= chunk.start) & (table.position < chunk.end))
    tokens = load_pruned(conv, [c.id for c in chunks]) if chunks else {}
    positions = np.concatenate([table.position[kept]] + [np.arange(c.start, c.end) for c in chunks])
    ids = np.concatenate([table.token_id[kept]] + [np.asarray(tokens[c.id].token_ids) for c in chunks])
    order = np.argsort(positions, kind="stable")
    return np.concatenate((conv.system_ids, ids[order])).astype(np.int32)



def cache_key(session) -> str | None:
    """The name the server saves the open conversation's KV cache under: a random key
    kept in the file (a read-only file: one made from its path); None without a file."""
    store = session.store
    if store is None:
        return None
    try:
        key = store.get_meta(CACHE_KEY_META)
        if not key:
            key = uuid.uuid4().hex
            store.set_meta(CACHE_KEY_META, key)
        return str(key)
    except Exception:  # noqa: BLE001 - a read-only or damaged file still gets a name
        path = getattr(store, "path", None)
        return hashlib.sha256(str(path).encode()).hexdigest()[:32] if path is not None else None


def warm_up_ids(session) -> list[int]:
    """The prompt the next message starts with, as far as it is known: the live context
    (what a warm-up puts in the server's cache when a conversation opens)."""
    conv = session.conv
    return [int(i) for i in conv.live_input_ids()] if conv is not None else []


def unread(held: list[int], ids: list[int]) -> int:
    """Tokens of the prompt ``ids`` a server holding ``held`` still has to read, counting
    from the first that differs (what the user is told while the answer waits)."""
    n = min(len(held), len(ids))
    same = next((k for k in range(n) if held[k] != ids[k]), n)
    return len(ids) - same

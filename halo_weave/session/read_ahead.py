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

Nothing here changes the conversation: the plan is the one ``session.recall.recall_for``
would make for the draft, read and not applied (:meth:`.server_use.ServerUse.draft_ids`).
Here the helpers that need no session; Qt-free.
"""

from __future__ import annotations

import re

import numpy as np

from ..core.pruning import load_pruned

_LAST_WORD = re.compile(r"\s+\S*$")


def settled_text(text: str) -> str:
    """The part of a message being typed that will not change: ``text`` as sent (stripped)
    up to its last word, which may still grow, unless a space or line already ended it."""
    sent = text.strip()
    if not sent or text[-1:].isspace():
        return sent
    match = _LAST_WORD.search(sent)
    return sent[:match.start()] if match else ""


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
    return np.concatenate((conv.system.ids, ids[order])).astype(np.int32)


def unread(held: list[int], ids: list[int]) -> int:
    """Tokens of the prompt ``ids`` a server holding ``held`` still has to read, counting
    from the first that differs (what the user is told while the answer waits)."""
    n = min(len(held), len(ids))
    same = next((k for k in range(n) if held[k] != ids[k]), n)
    return len(ids) - same

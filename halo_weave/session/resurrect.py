"""The user's message brings back what its search found, with each match's anchors,
within the budget: the universal equation, with the live context counted as at most
``resurrection_keep_share`` of the max context (or of the window, pruning only for
room); just enough older context is pruned first when the plan needs it
(:mod:`halo_weave.memory.room`).

Functions of the :class:`~halo_weave.session.ChatSession` (``session``), whose method of
the same name calls them.
"""

from __future__ import annotations

from ..conversation import Chunk
from ..memory.recall_note import best_first
from ..memory.resurrection_plan import apply_plan
from ..memory import room
from ..memory.room import plan_with_room


def room_terms(session, user_tokens: int) -> dict:
    """The terms of the room a message makes (:func:`~halo_weave.memory.room.plan_with_room`):
    the model's window less the answer's opening framing, the room counted from
    :func:`~halo_weave.memory.room.floor` live tokens at most."""
    s = session.settings
    return dict(user_tokens=user_tokens, max_context=session.window_limit() + s.max_new_tokens,
                max_new_tokens=s.max_new_tokens, floor=room.floor(s), cap=s.resurrection_budget_cap,
                order=session.prune_order)


def resurrect_for(session, index, matches, user_tokens: int) -> list[Chunk]:
    """Bring back what the search for the message found; the content chunks resurrected,
    best match first (:func:`~halo_weave.memory.recall_note.best_first`).

    ``index`` is the index the search ran on: results for one closed since are dropped.
    ``user_tokens``: the message's; the plan keeps room for its recall note too.
    """
    session.last_resurrected = 0
    if index is not session.index or session.store is None or not matches:
        return []
    conv, s = session.conv, session.settings
    user_tokens += session.note_reserve
    try:
        if session.makes_room:
            # The window less the answer's opening framing: fit_model_window then has
            # nothing left to prune (it would take the dim chunks just brought back first).
            made = plan_with_room(conv, matches, index.plan, **room_terms(session, user_tokens))
            plan = made.plan
            if made.pruned:
                session.save(lambda: session.store.save_chunks(conv, made.pruned), "Saving pruned chunks")
        else:
            plan = index.plan(conv, matches, session.resurrection_budget(user_tokens))
        result = apply_plan(conv, plan, index.conn, s.resurrection_brightness, session.store)
    except Exception as err:  # noqa: BLE001
        session.report(err, "Resurrecting from memory")
        return []
    session.last_resurrected = len(result.resurrected)
    order = best_first(plan, result.resurrected)
    return [conv.chunks[c] for c in order]

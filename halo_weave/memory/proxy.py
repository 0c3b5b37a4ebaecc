"""Brightness from the reader's attention (proxy attention) for a finished exchange.

Three steps, so that only the first and the last touch the conversation (the app's
thread) and the reader's run and the votes happen on a worker:

1. :func:`plan_read` snapshots the last answer and the context before it, within the
   reader's window (the system prompt and the newest context that fits);
2. the reader returns one attention row per answer token, and :func:`votes` replays the
   settings' brightness rule (:mod:`halo_weave.rules.brightness_rules`) on the snapshot
   exactly as streaming would have (row *j* applied before answer token *j* joined, over
   the cells that existed then);
3. :func:`apply` adds the change to the rows that are still live, found by position,
   so a prune, a pin or a resurrection in the meantime is neither undone nor lost.

Qt-free.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import brightness as bright
from ..conversation import Conversation
from ..rules import brightness_rule
from ..settings import Settings


@dataclass
class ReadPlan:
    """What the reader reads: ids, and where each table row sits in them."""

    context_ids: np.ndarray  # system tokens read, then table rows before the answer
    answer_ids: np.ndarray
    n_system: int  # system tokens at the front of context_ids
    positions: np.ndarray  # absolute positions of the table rows read (context, then answer)
    brightness: np.ndarray  # their brightness at the snapshot (int32)
    scored: np.ndarray  # which of them vote (content rows)
    turn_id: int
    cut: int  # context rows left out to fit the window (oldest first)

    @property
    def tokens(self) -> int:
        return len(self.context_ids) + len(self.answer_ids)


def plan_read(conv: Conversation, window: int, answer_turn: int | None = None) -> ReadPlan | None:
    """The read for ``answer_turn`` (default: the last assistant turn), or None when there
    is nothing to read (no live answer, or an answer while a turn is still open)."""
    if conv.open_turn is not None:
        return None
    turn_id = conv.turns.last("assistant") if answer_turn is None else answer_turn
    if turn_id is None:
        return None
    table = conv.table
    content = np.flatnonzero((table.turn_id == turn_id) & ~table.framing)
    if content.size == 0:
        return None
    first, last = int(content[0]), int(content[-1]) + 1
    answer_rows = np.arange(first, last)
    room = window - 1  # the last answer token is never a query: it costs no row
    answer_rows = answer_rows[: max(1, room - MIN_CONTEXT_ROWS)]
    room -= len(answer_rows)
    system = conv.system.ids if len(conv.system.ids) <= room // 2 else conv.system.ids[:0]
    room -= len(system)
    start = max(0, first - room)
    context_rows = np.arange(start, first)
    if len(system) + len(context_rows) == 0:
        return None  # an answer with nothing before it: no query to read it with
    rows = np.concatenate([context_rows, answer_rows])
    scored = ~table.framing[rows]
    if not conv.settings.brightness.score_current_turn:
        scored[len(context_rows):] = False
    return ReadPlan(
        context_ids=np.concatenate([system, table.token_id[context_rows]]).astype(np.int64),
        answer_ids=table.token_id[answer_rows].astype(np.int64),
        n_system=len(system),
        positions=table.position[rows].astype(np.int64),
        brightness=table.brightness[rows].astype(np.int32),
        scored=scored,
        turn_id=turn_id,
        cut=start,
    )


#: Context rows kept in the window however long the answer (it needs something to read).
MIN_CONTEXT_ROWS = 64


def votes(plan: ReadPlan, rows: np.ndarray, settings: Settings) -> np.ndarray:
    """The brightness change of the plan's rows after one step of the settings'
    brightness rule per answer token."""
    rule = brightness_rule(settings.brightness.brightness_rule)
    n_system, n_context = plan.n_system, len(plan.context_ids)
    values = plan.brightness.copy()
    for j in range(len(plan.answer_ids)):
        cells = n_context + j  # what existed when answer token j was "written"
        row = rows[j, :cells]
        rule.step(values[: cells - n_system], row[n_system:], bright.vote_threshold(row), settings.brightness,
                  mask=plan.scored[: cells - n_system])
    return values - plan.brightness


def apply(conv: Conversation, plan: ReadPlan, delta: np.ndarray, settings: Settings) -> int:
    """Add ``delta`` to the rows still live (by position), within the rule's ceiling;
    returns how many changed."""
    cap = brightness_rule(settings.brightness.brightness_rule).ceiling(settings.brightness)
    table = conv.table
    if len(table) == 0:
        return 0
    live = table.position
    at = np.searchsorted(live, plan.positions)
    at = np.minimum(at, len(live) - 1)
    found = (live[at] == plan.positions) & (delta != 0)
    rows = at[found]
    if rows.size == 0:
        return 0
    values = table.brightness[rows].astype(np.int64) + delta[found]
    table.brightness[rows] = np.minimum(values, cap).astype(np.int32)
    return int(rows.size)

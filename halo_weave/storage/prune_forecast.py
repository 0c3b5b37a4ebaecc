"""Forecast from a capture which chunks pruning would take next (for offline analysis).

Works on a capture read back with :func:`~.capture.load_capture`; lives apart from the
recorder because it rebuilds a conversation rather than reading or writing files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import CaptureError

if TYPE_CHECKING:
    from .capture import Capture


def prune_forecast(capture: Capture, record: int = -1, groups: int = 10) -> list[list[dict]]:
    """The chunk groups that pruning would take next, in order, as of one record.

    Rebuilds a :class:`~halo_weave.conversation.Conversation` from the record's rows and
    the capture's chunk snapshot (``stats["chunks"]``, else ``meta["chunks"]``) and lets
    its own :meth:`prune_to_fit` choose, one group at a time, so the forecast follows
    the real rule (lowest peak first, pinned chunks kept, anchor pairs together).
    Returns up to ``groups`` groups of snapshot rows with ``peak`` added.
    """
    from ..conversation import Chunk, ChunkTokens, Conversation, Turn

    rec = capture[record]
    if rec.chunk_ids is None:
        raise CaptureError("this capture has no chunk ids; record() them to forecast pruning")
    snapshot = (capture.stats or {}).get("chunks") or capture.generation.get("chunks") or []
    known = {row["id"]: row for row in snapshot}
    ids = np.asarray(rec.chunk_ids)
    brightness = np.asarray(rec.brightness)
    positions = np.asarray(rec.positions)
    starts = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1]))) if ids.size else np.zeros(0, int)
    ends = np.append(starts[1:], ids.size)

    conv = Conversation()
    live_rows = {}
    for a, b in zip(starts, ends):
        chunk_id = int(ids[a])
        row = known.get(chunk_id, {"id": chunk_id, "turn_id": -1, "chunk_index": 1, "role": "assistant",
                                   "pinned": False, "tool_result": False, "preview": ""})
        live_rows[chunk_id] = dict(row, start=int(positions[a]), token_count=int(b - a),
                                   peak=int(brightness[a:b].max()))
    for row in sorted(live_rows.values(), key=lambda r: r["start"]):
        turn = Turn(row["turn_id"], row["role"], 0.0, complete=True)
        chunk = Chunk(row["id"], row["turn_id"], row["chunk_index"], row["role"], row["start"],
                      row["token_count"], live=True, pinned=row["pinned"], tool_result=row["tool_result"])
        a = int(np.searchsorted(positions, row["start"]))
        n = row["token_count"]
        conv.add_stored_chunk(turn, chunk, ChunkTokens(np.zeros(n, np.int32), [""] * n, brightness[a:a + n].copy()))
    forecast = []
    while len(forecast) < groups and conv.live_token_count() > 0:
        pruned = [c for c in conv.prune_to_fit(conv.live_token_count() - 1) if not c.framing]
        if not pruned:
            break
        forecast.append([live_rows[c.id] for c in pruned])
    return forecast

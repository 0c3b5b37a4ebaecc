"""Continuation fidelity: how well each policy's live context lets the model go on.

For every assistant turn after the first prune (the turns whose whole history is longer
than ``P``), the real tokens are teacher-forced under

* the **reference** context: the most recent whole turns that fill the model's own
  window (``window``, 8,192 for the bundled model) with the turn; the whole history
  while it fits.  One pass per conversation, shared by every method;
* each policy's live context at that moment (the replay records it).

``ΔNLL`` = the turn's mean negative log-likelihood (nats/token) under the policy minus
under the reference, averaged over those turns.  ``kept attention mass`` = the share of
the attention the reference pays, while producing the turn, to earlier *content* tokens
(system prompt, chat framing and the turn itself left out) that falls on tokens the policy
had live.  Both are the measures of the KV-eviction literature (H2O, TOVA, SnapKV): what
the model needs to go on, not what a later question asks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from halo_weave.conversation import Conversation

from .replay import FidelityRecord, force


@dataclass
class ReferenceTurn:
    """The reference's view of one assistant turn."""

    nll: float
    positions: np.ndarray  # positions of the earlier content tokens in the reference context
    mass: np.ndarray  # attention mass on each, summed over the turn's tokens


def reference_pass(full: Conversation, turns: list[tuple[list[int], list[str]]], source,
                   window: int, after_tokens: int) -> dict[int, ReferenceTurn]:
    """Teacher-force every assistant turn of ``full`` whose history exceeds ``after_tokens``
    under the reference context (see the module docstring); turn index -> result.

    ``full`` is the unpruned replay (turn ids are the dialogue's turn indices).
    """
    if hasattr(source, "reset"):
        try:
            source.reset(keep_pruned=False)  # the window only slides: nothing comes back
        except TypeError:
            source.reset()
    table = full.table
    system = [int(i) for i in full.system.ids]
    turn_starts = np.flatnonzero(np.concatenate(([True], table.turn_id[1:] != table.turn_id[:-1])))
    out: dict[int, ReferenceTurn] = {}
    for turn_id in sorted(full.turns):
        turn = full.turns[turn_id]
        if turn.role != "assistant":
            continue
        content = full.content_chunks(turn_id)
        if not content:
            continue
        forced = turns[turn_id][0]
        end = int(np.searchsorted(table.position, content[0].start))  # rows before the turn's text
        if len(system) + end <= after_tokens:
            continue
        room = window - len(system) - len(forced)
        start = 0
        if end > room:
            start = int(turn_starts[np.searchsorted(turn_starts, end - room)])
        ids = system + table.token_id[start:end].tolist()
        # Keys name every token by its position, so that once the window is full and
        # slides, the cache drops the oldest turns and shifts the rest (ContextShift, what
        # llama.cpp's sync does here too) instead of re-running the whole window per turn.
        keys = (list(range(-len(system), 0)) + table.position[start:end].tolist()
                + table.position[end:end + len(forced)].tolist())
        rows, logprobs = force(source, ids, forced, keys)
        mass = rows[:, len(system):len(ids)].sum(axis=0, dtype=np.float64)
        content_rows = ~table.framing[start:end] & (table.turn_id[start:end] < turn_id)
        out[turn_id] = ReferenceTurn(float(-logprobs.mean()), table.position[start:end][content_rows].copy(),
                                     mass[content_rows])
    return out


@dataclass
class Fidelity:
    """Sums over scored turns (so that runs merge by adding)."""

    turns: int = 0
    delta_nll_sum: float = 0.0
    kept_mass_sum: float = 0.0

    @property
    def delta_nll(self) -> float:
        return self.delta_nll_sum / self.turns if self.turns else float("nan")

    @property
    def kept_attention_mass(self) -> float:
        return self.kept_mass_sum / self.turns if self.turns else float("nan")

    def add(self, other: "Fidelity") -> None:
        self.turns += other.turns
        self.delta_nll_sum += other.delta_nll_sum
        self.kept_mass_sum += other.kept_mass_sum


def score(records: list[FidelityRecord], reference: dict[int, ReferenceTurn]) -> Fidelity:
    """ΔNLL and kept attention mass of one replay against the reference."""
    f = Fidelity()
    for record in records:
        ref = reference.get(record.turn_index)
        if ref is None or not np.isfinite(record.nll) or not np.isfinite(ref.nll):
            continue
        total = float(ref.mass.sum())
        kept = float(ref.mass[np.isin(ref.positions, record.live_positions)].sum())
        f.turns += 1
        f.delta_nll_sum += record.nll - ref.nll
        f.kept_mass_sum += kept / total if total > 0 else 1.0
    return f


def identity(reference: dict[int, ReferenceTurn]) -> Fidelity:
    """The reference scored against itself (``full`` within the model's window)."""
    return Fidelity(len(reference), 0.0, float(len(reference)))

"""When pruning happens (``Settings.prune_when``): after every exchange, or only when the
model's window needs the room.

Each timing is a small object with its words and ``for_room``: whether the context keeps
the model's window full and is pruned only to make room (:mod:`halo_weave.memory.room`).
"""

from __future__ import annotations

from typing import Protocol

from .choice import Choice


class PruneWhen(Protocol):
    """What every pruning time offers."""

    choice: Choice
    #: True when the context is pruned only when the model's window is full.
    for_room: bool
    #: A sentence added to the scoring sentence ("" = none).
    sentence: str


class AfterExchange:
    """Down to the context budget after every exchange."""

    choice = Choice(
        "after_exchange", "After every exchange (down to the context budget)",
        "After every answer the context is pruned back under the context target, which "
        "leaves the rest of the model's window free for what your next message brings back.",
        "")
    for_room = False
    sentence = ""


class ForRoom:
    """Only when the model's window is full, and just enough for what a message brings back."""

    choice = Choice(
        "for_room", "Only when room is needed",
        "The context keeps as much recent conversation as the model's window holds; it is "
        "pruned only when the window is full, or just enough to make room for what your "
        "message brings back (never more room than pruning after every exchange gives).",
        "only for room")
    for_room = True
    sentence = " The context keeps the model's window full; pruning makes only the room needed."


#: Every pruning time by its setting's value, in the order the dialog lists them.
PRUNE_WHEN: dict[str, PruneWhen] = {when.choice.value: when for when in (AfterExchange(), ForRoom())}


def prune_when(name: str) -> PruneWhen:
    """The pruning time called ``name`` (a clear error for any other)."""
    try:
        return PRUNE_WHEN[name]
    except KeyError:
        raise ValueError(f"unknown prune_when {name!r}: one of {list(PRUNE_WHEN)}") from None

"""Whether a match comes back with its anchors (``Settings.resurrection_anchors``): the
opening chunks of its exchange's question and answer
(:mod:`halo_weave.memory.recall_plan`).

Each rule is a small object with its words and ``with_match``: True when a match's
anchors are paid for with it, False when they come back only from what the matches leave.
"""

from __future__ import annotations

from typing import Protocol

from .choice import Choice


class ResurrectionAnchors(Protocol):
    """What every anchor rule offers."""

    choice: Choice
    #: True: each match with its anchors; False: the anchors only while room is left.
    with_match: bool


class IfRoom:
    """The matches first; their anchors from the budget they leave."""

    choice = Choice(
        "if_room", "Only with room left (matches first)",
        "Paragraphs found for your message come back first; the openings of their "
        "question and answer come back too only while the budget has room for them.")
    with_match = False


class Always:
    """Each match with its anchors (the seed's rule)."""

    choice = Choice(
        "always", "Always with the match (the seed's rule)",
        "Every paragraph found comes back together with the opening of its question "
        "and of its answer, even when that leaves no room for the next one found.")
    with_match = True


#: Every anchor rule by its setting's value, in the order the dialog lists them.
RESURRECTION_ANCHORS: dict[str, ResurrectionAnchors] = {
    rule.choice.value: rule for rule in (IfRoom(), Always())}


def resurrection_anchors(name: str) -> ResurrectionAnchors:
    """The rule called ``name`` (a clear error for any other)."""
    try:
        return RESURRECTION_ANCHORS[name]
    except (KeyError, TypeError):
        raise ValueError(f"resurrection anchors must be one of {list(RESURRECTION_ANCHORS)}, "
                         f"not {name!r}") from None

"""Prune orders: which chunks go first when the context is over its limit.

Each order is a small object with its words and ``key(chunk, ranking)``, the sort key
pruning ranks candidates by (lowest first).  ``ranking`` is what
:func:`halo_weave.core.pruning.select` knows of the live chunks: ``ranking.level(chunk)``,
the chunk's score on the tie grid (an anchor pair ranked by its brighter member), and
``ranking.recent(chunk)``, whether it lies in the recent window (``prune_keep_recent``).
Sorting is stable, so equal keys keep position order.
"""

from __future__ import annotations

from typing import Protocol

from .choice import Choice


class PruneOrder(Protocol):
    """What every prune order offers."""

    choice: Choice
    #: False when brightness decides nothing (an order for a server without attention).
    needs_brightness: bool
    #: "the ... paragraphs": which go first, in one word ("oldest", "dimmest").
    first: str
    #: What a paragraph's colour means beside this order, for the legend.
    colour: str
    #: A line for every chunk's tooltip ("" = none).
    note: str

    def key(self, chunk, ranking):
        """Sort key of a candidate chunk: the lowest goes first."""

    def words(self, settings) -> str:
        """The order in a few words, for the stats line."""

    def sentence(self, words: str, rank: str) -> str:
        """The order in a sentence: ``words`` from :meth:`words` (with any suffix),
        ``rank`` the chunk rank's words."""


class ByBrightness:
    """The dimmest chunks first, by their score; the recent window's chunks last."""

    choice = Choice(
        "brightness", "Dimmest first (by the score above)",
        "When the context is full, the paragraphs with the lowest score are pruned first "
        "(pinned ones, the last exchange and the newest tokens of the recent window are kept).",
        "dimmest first", uses=("prune_keep_recent",))
    needs_brightness = True
    first = "dimmest"
    colour = "Dim paragraphs are pruned first."
    note = ""

    def key(self, chunk, ranking):
        return ranking.recent(chunk), ranking.level(chunk), chunk.start

    def words(self, settings) -> str:
        recent = settings.pruning.prune_keep_recent
        return "dimmest first" + (f" (newest {recent:,} tokens last)" if recent else "")

    def sentence(self, words: str, rank: str) -> str:
        return f"Pruning: {words}, by that {rank} score."


class ByAge:
    """The oldest chunks first; a resurrected chunk counts as new from its resurrection
    (``Chunk.age_key``), so what came back for a message is not the first to go."""

    choice = Choice(
        "age", "Oldest first (brightness only colours)",
        "When the context is full, the oldest paragraphs are pruned first whatever their "
        "brightness; the colours still show what the model reads.",
        "oldest first")
    needs_brightness = False
    first = "oldest"
    colour = "Pruning is oldest first: the colour shows what the model reads, not what goes next."
    note = "pruned oldest first (brightness does not decide)"

    def key(self, chunk, ranking):
        return chunk.age_key

    def words(self, settings) -> str:
        return "oldest first"

    def sentence(self, words: str, rank: str) -> str:
        return "Pruning: oldest first (brightness only colours the text)."


#: Every prune order by its setting's value, in the order the dialog lists them.
PRUNE_ORDERS: dict[str, PruneOrder] = {order.choice.value: order for order in (ByBrightness(), ByAge())}
#: The order used whatever the settings say while nothing measures brightness (a server
#: that sends no attention, an imported conversation).
WITHOUT_BRIGHTNESS = "age"


def prune_order(name: str) -> PruneOrder:
    """The order called ``name`` (a clear error for any other)."""
    try:
        return PRUNE_ORDERS[name]
    except KeyError:
        raise ValueError(f"unknown prune order {name!r}") from None

"""The multiple-choice settings in words: their allowed values, the dialog's "What
decides pruning" fields, and the sentences the window shows for the chosen rules."""

from __future__ import annotations

from dataclasses import dataclass

from ..rules import BRIGHTNESS_RULES, CHUNK_RANKS, PRUNE_ORDERS, WITHOUT_BRIGHTNESS, Choice, prune_order
from .sections import Settings


#: The multiple-choice settings and their allowed values, in the order the dialog lists
#: them.  The single source: loading, validation and the dialog's combo boxes all read
#: these, so a new rule added here appears everywhere without a UI edit.
CHOICES: dict[str, tuple[Choice, ...]] = {
    "brightness_rule": tuple(rule.choice for rule in BRIGHTNESS_RULES.values()),
    "new_token_brightness": (
        Choice("cap", "At the starting brightness (fail bright)",
               "New text starts as bright as possible, so it is never pruned before the model "
               "had a chance to read it.",
               "new text starts bright"),
        Choice("median", "At the live median",
               "New text starts at the median brightness of what is live: a fair chance, "
               "no head start.",
               "new text starts at the median"),
    ),
    "chunk_rank": tuple(rank.choice for rank in CHUNK_RANKS.values()),
    "prune_order": tuple(order.choice for order in PRUNE_ORDERS.values()),
    "prune_when": (
        Choice("after_exchange", "After every exchange (down to the context budget)",
               "After every answer the context is pruned back under the context target, which "
               "leaves the rest of the model's window free for what your next message brings back.",
               ""),
        Choice("for_room", "Only when room is needed",
               "The context keeps as much recent conversation as the model's window holds; it is "
               "pruned only when the window is full, or just enough to make room for what your "
               "message brings back (never more room than pruning after every exchange gives).",
               "only for room"),
    ),
    "resurrection_brightness": (
        Choice("at_prune", "Brightness when pruned (no gifts)",
               "A paragraph that comes back keeps the brightness it had when it was pruned."),
        Choice("mean", "Mean live brightness",
               "A paragraph that comes back starts at the mean brightness of what is live."),
    ),
    "resurrection_anchors": (
        Choice("if_room", "Only with room left (matches first)",
               "Paragraphs found for your message come back first; the openings of their "
               "question and answer come back too only while the budget has room for them."),
        Choice("always", "Always with the match (the seed's rule)",
               "Every paragraph found comes back together with the opening of its question "
               "and of its answer, even when that leaves no room for the next one found."),
    ),
    "attention_format": (
        Choice("aggregated", "Aggregated (one value per token; less traffic)",
               "The server averages its layers and heads and sends one value per token."),
        Choice("per_layer", "Per layer (layers × heads × tokens)",
               "The server sends every layer's and head's attention; the app averages them."),
    ),
}

#: The settings that decide what is pruned, in the order the dialog's "What decides
#: pruning" group shows them: (field, label, tooltip for a numeric field).
PRUNING_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("brightness_rule", "Brightness rule", ""),
    ("brightness_half_life", "Half-life (generated tokens)",
     "After this many generated tokens, the attention a word collected counts half."),
    ("new_token_brightness", "New text starts", ""),
    ("chunk_rank", "A paragraph's score", ""),
    ("chunk_rank_k", "k (brightest words averaged)",
     "How many of a paragraph's brightest words its score averages."),
    ("prune_order", "Pruning order", ""),
    ("prune_keep_recent", "Recent window (tokens)",
     "The newest live tokens that pruning by brightness leaves alone (what the model is about to "
     "go on from); 0 = none. Never more than the prune target, so the limit still holds."),
    ("prune_when", "When to prune", ""),
)


def choice_values(field: str) -> tuple[str, ...]:
    """The allowed values of a multiple-choice field (see :data:`CHOICES`)."""
    return tuple(choice.value for choice in CHOICES[field])


def choice(field: str, value: str) -> Choice | None:
    """The :class:`Choice` of ``field`` whose value is ``value``, or None."""
    return next((c for c in CHOICES.get(field, ()) if c.value == value), None)


def choice_words(settings: Settings, field: str) -> str:
    """The short words of the chosen value of ``field``, with the fields it names filled in."""
    chosen = choice(field, settings.value(field))
    if chosen is None:
        return str(settings.value(field))
    text = chosen.short or chosen.label
    return text.format(**{name: f"{settings.value(name):,}" for name in chosen.uses})


@dataclass(frozen=True)
class Scoring:
    """What colours the chunks and what decides pruning, in words (see :func:`scoring_words`).

    ``short`` for the stats line, ``sentence`` for tooltips and the legend, ``rule`` the
    rule's own explanation, ``colour`` what a paragraph's colour means (the legend's row),
    ``order`` the prune order in force (a name in :data:`~halo_weave.rules.PRUNE_ORDERS`).
    """

    short: str
    sentence: str
    rule: str
    colour: str
    order: str


def scoring_words(settings: Settings, source: str = "server") -> Scoring:
    """The words for what colours the chunks and decides pruning under ``settings``.

    ``source`` is who measures brightness: ``"server"`` (the model's attention, by
    ``brightness_rule``), ``"reader"``/``"waiting"`` (the bundled reader's attention by
    the same rule; pruning by it only with ``proxy_pruning``) or ``"none"`` (nothing:
    :data:`~halo_weave.rules.WITHOUT_BRIGHTNESS` order).
    """
    rank = choice_words(settings, "chunk_rank")
    scale = "on today's scale, olive (read least lately) → yellow → gold (read most)"
    chosen = choice("brightness_rule", settings.brightness.brightness_rule)
    explanation = chosen.explanation if chosen else ""
    if source == "none":
        fallback = prune_order(WITHOUT_BRIGHTNESS)
        words = fallback.words(settings)
        return Scoring(f"pruning {words}",
                       "This server sends no attention: brightness is not measured (every word keeps its "
                       f"start value). Pruning: {words}.",
                       "", f"Paragraph colour: its {rank} brightness {scale}; not measured while the server "
                       f"sends no attention. The {fallback.first} paragraphs are pruned first.",
                       WITHOUT_BRIGHTNESS)
    name = settings.pruning.prune_order
    if source in ("reader", "waiting"):
        rule = "the reader's " + choice_words(settings, "brightness_rule")
        explanation += " (The bundled reader model's attention over each finished exchange, not your model's.)"
        if not settings.server.proxy_pruning:
            name = WITHOUT_BRIGHTNESS
    else:
        rule = choice_words(settings, "brightness_rule")
    order = prune_order(name)
    words = order.words(settings)
    if settings.pruning.prune_when == "for_room":
        words += ", " + choice_words(settings, "prune_when")
    sentence = f"Brightness: {rule}; a paragraph's colour is its {rank} brightness. " + order.sentence(words, rank)
    if settings.pruning.prune_when == "for_room":
        sentence += " The context keeps the model's window full; pruning makes only the room needed."
    share, budget = settings.recall.resurrection_keep_share, settings.pruning.max_context_tokens
    if share < 1 and budget > 0:
        sentence += (f" When the model's window is too small for what your message brings back, older context "
                     f"beyond the newest {int(budget * max(share, 0.0)):,} tokens is pruned "
                     f"({order.first} first) to make room for it.")
    colour = f"Paragraph colour: its {rank} brightness {scale}. " + order.colour
    return Scoring(f"☀ {rule} · {rank} · pruning {words}", sentence, explanation, colour, name)

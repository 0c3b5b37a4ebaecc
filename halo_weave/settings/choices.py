"""The multiple-choice settings in words: their allowed values, the dialog's "What
decides pruning" fields, and the sentences the window shows for the chosen rules."""

from __future__ import annotations

from dataclasses import dataclass

from ..rules import REGISTRIES, WITHOUT_BRIGHTNESS, Choice, prune_order, prune_when
from .sections import Settings


#: The multiple-choice settings and their allowed values, in the order the dialog lists
#: them, read from the rules' registries (:data:`halo_weave.rules.REGISTRIES`).  The single
#: source: loading, validation and the dialog's combo boxes all read these, so a new rule
#: added to its registry appears everywhere without a UI edit.
CHOICES: dict[str, tuple[Choice, ...]] = {
    field: tuple(rule.choice for rule in registry.values()) for field, registry in REGISTRIES.items()
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
    when = prune_when(settings.pruning.prune_when)
    if when.choice.short:
        words += ", " + choice_words(settings, "prune_when")
    sentence = f"Brightness: {rule}; a paragraph's colour is its {rank} brightness. " + order.sentence(words, rank)
    sentence += when.sentence
    share, budget = settings.recall.resurrection_keep_share, settings.pruning.max_context_tokens
    if share < 1 and budget > 0:
        sentence += (f" When the model's window is too small for what your message brings back, older context "
                     f"beyond the newest {int(budget * max(share, 0.0)):,} tokens is pruned "
                     f"({order.first} first) to make room for it.")
    colour = f"Paragraph colour: its {rank} brightness {scale}. " + order.colour
    return Scoring(f"☀ {rule} · {rank} · pruning {words}", sentence, explanation, colour, name)

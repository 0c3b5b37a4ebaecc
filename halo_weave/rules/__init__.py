"""The rules a user chooses between, each a small object in a registry.

* :mod:`.brightness_rules`: how one generated token's attention changes brightness
  (``Settings.brightness_rule``);
* :mod:`.chunk_ranks`: how a chunk's tokens make its score (``Settings.chunk_rank``);
* :mod:`.prune_orders`: which chunks go first when the context is full
  (``Settings.prune_order``).

Each rule carries its own words for the user (a :class:`~.choice.Choice`); the settings'
choices are built from the registries, so a new rule is one class in one file.  This
package sits below the settings and imports nothing of the app but the errors.
"""

from __future__ import annotations

from .brightness_rules import BRIGHTNESS_RULES, BrightnessRule, brightness_rule
from .choice import Choice
from .chunk_ranks import CHUNK_RANKS, ChunkRank, chunk_rank
from .prune_orders import PRUNE_ORDERS, WITHOUT_BRIGHTNESS, PruneOrder, prune_order

__all__ = ["BRIGHTNESS_RULES", "CHUNK_RANKS", "PRUNE_ORDERS", "WITHOUT_BRIGHTNESS", "BrightnessRule",
           "Choice", "ChunkRank", "PruneOrder", "brightness_rule", "chunk_rank", "prune_order"]

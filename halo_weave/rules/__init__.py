"""The rules a user chooses between, each a small object in a registry.

* :mod:`.brightness_rules`: how one generated token's attention changes brightness
  (``Settings.brightness_rule``);
* :mod:`.chunk_ranks`: how a chunk's tokens make its score (``Settings.chunk_rank``);
* :mod:`.prune_orders`: which chunks go first when the context is full
  (``Settings.prune_order``);
* :mod:`.prune_when`: whether pruning waits until the model's window is full
  (``Settings.prune_when``);
* :mod:`.new_token_brightness`: where a new turn's tokens start (``Settings.new_token_brightness``);
* :mod:`.resurrection_brightness`: where a paragraph that comes back starts
  (``Settings.resurrection_brightness``);
* :mod:`.resurrection_anchors`: whether a match brings its anchors whatever the room
  (``Settings.resurrection_anchors``);
* :mod:`.attention_formats`: the shape one token's attention travels in
  (``Settings.attention_format``);
* :mod:`.server_apis`: how an OpenAI-compatible server is spoken to (``Settings.server_api``).

Each rule carries its own words for the user (a :class:`~.choice.Choice`); the settings'
choices are built from the registries, so a new rule is one class in one file, and the
app asks the chosen object rather than comparing the setting's value.  This
package sits below the settings and imports nothing of the app but the errors.
"""

from __future__ import annotations

from .attention_formats import ATTENTION_FORMATS, AttentionFormat, attention_format
from .brightness_rules import BRIGHTNESS_RULES, BrightnessRule, brightness_rule
from .choice import Choice
from .server_apis import SERVER_APIS, ServerApi
from .chunk_ranks import CHUNK_RANKS, ChunkRank, chunk_rank
from .new_token_brightness import NEW_TOKEN_BRIGHTNESS, NewTokenBrightness, new_token_brightness
from .prune_orders import PRUNE_ORDERS, WITHOUT_BRIGHTNESS, PruneOrder, prune_order
from .prune_when import PRUNE_WHEN, PruneWhen, prune_when
from .resurrection_anchors import RESURRECTION_ANCHORS, ResurrectionAnchors, resurrection_anchors
from .resurrection_brightness import RESURRECTION_BRIGHTNESS, ResurrectionBrightness, resurrection_brightness

#: Every multiple-choice setting's registry by the setting's name, in the order the
#: settings dialog lists them (:data:`halo_weave.settings.CHOICES` reads it).
REGISTRIES: dict[str, dict] = {
    "brightness_rule": BRIGHTNESS_RULES,
    "new_token_brightness": NEW_TOKEN_BRIGHTNESS,
    "chunk_rank": CHUNK_RANKS,
    "prune_order": PRUNE_ORDERS,
    "prune_when": PRUNE_WHEN,
    "resurrection_brightness": RESURRECTION_BRIGHTNESS,
    "resurrection_anchors": RESURRECTION_ANCHORS,
    "attention_format": ATTENTION_FORMATS,
    "server_api": SERVER_APIS,
}

__all__ = ["ATTENTION_FORMATS", "BRIGHTNESS_RULES", "CHUNK_RANKS", "NEW_TOKEN_BRIGHTNESS", "PRUNE_ORDERS",
           "PRUNE_WHEN", "REGISTRIES", "RESURRECTION_ANCHORS", "RESURRECTION_BRIGHTNESS", "SERVER_APIS", "WITHOUT_BRIGHTNESS",
           "AttentionFormat", "BrightnessRule", "Choice", "ChunkRank", "NewTokenBrightness", "PruneOrder",
           "PruneWhen", "ResurrectionAnchors", "ResurrectionBrightness", "ServerApi", "attention_format", "brightness_rule",
           "chunk_rank", "new_token_brightness", "prune_order", "prune_when", "resurrection_anchors",
           "resurrection_brightness"]

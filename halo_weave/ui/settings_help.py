"""What each field of the settings dialog is called and the line that explains it.

One place for the words, so the dialog shows every field with its explanation (and its
unit) right under it, and a test can check that none is left unexplained.  The fields of
"What decides pruning" are declared with their rules in :data:`halo_weave.settings.PRUNING_FIELDS`;
the multiple-choice fields explain the chosen value (:data:`halo_weave.settings.CHOICES`).
"""

from __future__ import annotations

from .colors import HIGHLIGHT_LABEL

#: field -> (label, one-line explanation with the unit).
FIELDS: dict[str, tuple[str, str]] = {
    # Generation
    "temperature": ("Temperature", "How freely the next word is chosen: 0 always takes the likeliest; "
                                   "0.7 is usual, above 1.2 it wanders (no unit, 0–5)."),
    "top_p": ("Top-p", "Choose only among the likeliest words that together hold this share of the "
                       "probability (share 0–1; 1 = all of them)."),
    "top_k": ("Top-k", "Choose only among this many likeliest words (words; Off = no limit)."),
    "rep_pen": ("Repetition penalty", "Words already in the context become this many times less likely "
                                      "(factor; 1.00 = none, 1.10 usual)."),
    "max_new_tokens": ("Longest answer", "An answer stops after this many tokens (a token is about ¾ of a "
                                         "word); Chat → Continue lets it go on."),
    "sampler_seed": ("Sampler seed", "The same seed, prompt and settings give the same answer again "
                                     "(Random: a new one every time)."),
    # Context & memory
    "max_context_tokens": ("Context target", "After each answer, chunks go to the graveyard until the context "
                                             "is back under this (down to {hysteresis} of it); it may run over "
                                             "while an exchange lasts (tokens; No pruning: keep all)."),
    "min_chunk_tokens": ("Smallest chunk", "Shorter paragraphs join the next one, so what is pruned and "
                                           "recalled is at least this long (tokens)."),
    "resurrection_budget_cap": ("Recall limit per message", "At most this much is brought back from the "
                                                            "graveyard for one message (tokens; No cap: as "
                                                            "much as the context has room for)."),
    "resurrection_keep_share": ("Room recall may make", "When what a message recalls does not fit, older "
                                                        "context beyond this newest share of the context "
                                                        "target may be pruned for it (share 0–1; 1.00: never)."),
    "resurrection_brightness": ("Recalled chunks start at", ""),  # the chosen value explains itself
    "highlight_fraction": (HIGHLIGHT_LABEL, "The brightest share of all words the heatmap highlights in "
                                            "yellow (share 0–1: 0.20 the brightest fifth; 0 none)."),
    "score_current_turn": ("Score the answer being written", "Its own words gain brightness from the "
                                                             "attention the model pays them as it writes."),
    "hybrid_search": ("Hybrid search", "Recall ranks by keywords as well as by meaning: it finds names and "
                                       "numbers that meaning alone misses."),
    "proxy_attention": ("Servers without attention", "The bundled SmolLM2-135M reads each finished exchange "
                                                     "and its attention (not your model's) lights the heatmap."),
    "proxy_pruning": ("", "Off: the oldest chunks are pruned first (in our memory benchmark its attention "
                          "kept no more than that)."),
    # Server
    "server_url": ("Server URL", "The built-in server, KoboldCPP, llama-server, Ollama or any "
                                 "OpenAI-compatible server (its address, up to the port or /v1)."),
    "server_context_tokens": ("Model window", "The model's context size, for a server that does not say "
                                              "it (tokens; As the server says: 2,048 when it says nothing)."),
    "attention_format": ("Attention format", ""),  # the chosen value explains itself
    "autostart_server": ("", "When nothing answers at the default URL, the app starts its built-in server "
                             "with the bundled model."),
    "saved_caches_mb": ("Saved model caches", "Disk the built-in server keeps conversations' caches in, so "
                                              "reopening one answers at once; the least recently saved go "
                                              "first (MiB; applies when it starts)."),
    "record_attention": ("Debugging", "Writes every answer's attention to the captures folder (large "
                                      "files, for scripts/analyze_capture.py)."),
    # System prompt
    "conversation_prompt": ("This conversation", "What the model is told before this conversation's "
                                                 "messages; kept in its file, never scored or pruned."),
    "system_prompt": ("New conversations", "The system prompt new and imported conversations start with; "
                                           "each keeps its own after that."),
    "notes_tool": ("Tools", "The model may keep notes for the whole conversation (notes.json, jq commands "
                            "in tool tags); their instructions, about 190 tokens, follow every system "
                            "prompt while this is on."),
}


def label(field: str) -> str:
    return FIELDS[field][0]


def explanation(field: str, **values: str) -> str:
    """The field's line, with ``{names}`` in it filled from ``values``."""
    text = FIELDS[field][1]
    return text.format(**values) if values else text

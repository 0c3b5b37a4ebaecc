"""What each field of the settings dialog is called and the line that explains it.

One place for the words, so the dialog shows every field with its explanation (and its
unit) right under it, and a test can check that none is left unexplained.  The fields of
"What decides pruning" are declared with their rules in :data:`halo_weave.settings.PRUNING_FIELDS`;
the multiple-choice fields explain the chosen value (:data:`halo_weave.settings.CHOICES`).
"""

from __future__ import annotations

from .colors import HIGHLIGHT_LABEL

#: field -> (label, one-line explanation with the unit, or the box's suffix says it).
FIELDS: dict[str, tuple[str, str]] = {
    # Generation
    "temperature": ("Temperature", "How freely words are chosen: 0 = always the likeliest, 0.7 usual (no unit, 0–5)."),
    "top_p": ("Top-p", "Choose among the likeliest words that hold this share of probability (0–1; 1 = all)."),
    "top_k": ("Top-k", "Choose among this many likeliest words (words; Off = no limit)."),
    "rep_pen": ("Repetition penalty", "Words already in the context get less likely by this factor (1.00 = none)."),
    "max_new_tokens": ("Longest answer", "An answer stops after this many tokens (about ¾ word each); Continue goes on."),
    "sampler_seed": ("Sampler seed", "The same seed, prompt and settings give the same answer (Random: new each time)."),
    # Context & memory
    "max_context_tokens": ("Context target", "After each answer, pruned back to {hysteresis} of this; an exchange may run over it."),
    "min_chunk_tokens": ("Smallest chunk", "Shorter paragraphs join the next, so what is pruned or recalled is this long."),
    "resurrection_budget_cap": ("Recall limit per message", "The most one message brings back from the graveyard (No cap: all that fits)."),
    "resurrection_keep_share": ("Room recall may make", "Recall may prune context older than this newest share of the target (0–1; 1 = never)."),
    "resurrection_brightness": ("Recalled chunks start at", ""),  # the chosen value explains itself
    "highlight_fraction": (HIGHLIGHT_LABEL, "The share of all words highlighted in yellow, brightest first (0–1; 0 = none)."),
    "score_current_turn": ("", "The answer being written gains brightness from the model's attention to it."),
    "hybrid_search": ("Recall", "Ranks by keywords too: finds names and numbers that meaning alone misses."),
    "recall_note": ("", "The request also carries a short copy of what a message recalled, each line dated, before it (≤ 160 tokens; not saved)."),
    "recall_keep_share": ("Recall kept", "What came back is ranked by its relevance to the message; the least relevant goes back until this share of its tokens is left (0–1; 1 = all)."),
    "proxy_attention": ("Servers without attention", "The bundled SmolLM2-135M's attention (not your model's) lights the heatmap."),
    "proxy_pruning": ("", "Off: the oldest chunks go first (its attention kept no more in our benchmark)."),
    # Server
    "server_url": ("Server URL", "The built-in server, KoboldCPP, llama-server, Ollama or an OpenAI-compatible one."),
    "server_api": ("API", ""),  # the chosen value explains itself
    "server_model": ("Built-in model", "What the built-in server runs; it restarts with the one chosen here."),
    "server_gpu_layers": ("GPU layers", "Layers on a GPU (0: the CPU only); needs llama-cpp-python built for "
                          "CUDA, Metal or Vulkan (README)."),
    "server_context_tokens": ("Model window", "The model's context, for a server that does not say (As the server says: 2,048)."),
    "attention_format": ("Attention format", ""),  # the chosen value explains itself
    "autostart_server": ("", "When nothing answers at the default URL, the app starts its own server and model."),
    "saved_caches_mb": ("Saved model caches", "Disk for conversations' caches, so reopening one answers at once (at its start)."),
    "record_attention": ("Debugging", "Writes every answer's attention to the captures folder (large; for analysis)."),
    # System prompt
    "conversation_prompt": ("This conversation", "Told to the model before this conversation's messages; kept in its file."),
    "system_prompt": ("New conversations", "What new and imported conversations start with; each keeps its own after."),
    "notes_tool": ("Tools", "Notes kept with jq (notes.json); adds about 190 tokens of instructions to each prompt."),
}


def label(field: str) -> str:
    return FIELDS[field][0]


def explanation(field: str, **values: str) -> str:
    """The field's line, with ``{names}`` in it filled from ``values``."""
    text = FIELDS[field][1]
    return text.format(**values) if values else text

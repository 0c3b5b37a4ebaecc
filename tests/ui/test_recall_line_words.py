"""The line under a message that says what it recalled, in words a newcomer reads
without help: a chunk pruned again since says it is back in the graveyard (the old
"all pruned since" left readers guessing).  Qt-free: the line's text and links."""

from __future__ import annotations

from halo_weave.conversation import Conversation
from halo_weave.core import recall
from halo_weave.settings import Settings
from halo_weave.ui.recall_line import NBSP, recall_line


def _conversation() -> tuple[Conversation, int, list[int]]:
    conv = Conversation(Settings.of(min_chunk_tokens=4))
    for turn, text in enumerate(["My cat is called Mochi and she is grey", "Mochi sounds lovely indeed friend",
                                 "What is my cat called again please"]):
        pieces = text.split(" ")
        conv.add_turn("user" if turn % 2 == 0 else "assistant", list(range(len(pieces))),
                      [(" " if i else "") + p for i, p in enumerate(pieces)])
    first, _, question = list(conv.turns)
    ids = [c.id for c in conv.content_chunks(first)] + [c.id for c in conv.content_chunks(list(conv.turns)[1])]
    recall.record(conv, question, ids)
    return conv, question, ids


def test_a_recalled_chunk_pruned_again_says_it_is_back_in_the_graveyard():
    conv, question, ids = _conversation()
    text, links = recall_line(conv, question)
    assert text.startswith("Recalled for this message: 2 chunks: “My") and "graveyard" not in text
    conv.prune_chunk(ids[0])
    text, _ = recall_line(conv, question)
    assert "“My cat is called Mochi and…” (back in the graveyard)" in text.replace(NBSP, " ")
    conv.prune_chunk(ids[1])
    text, links = recall_line(conv, question)
    assert text.startswith("Recalled for this message: 2 chunks — since pruned again, all back in the "
                           "graveyard (a click shows one there): “")
    assert "pruned since" not in text and len(links) == 2

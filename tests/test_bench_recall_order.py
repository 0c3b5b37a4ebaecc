"""The recall-order benchmark's scoring: what an order keeps of a message's recall."""

import numpy as np

from bench import recall_order as ro


def _paragraph(turn, evidence, search_rank, attention, tokens=100):
    return ro.Paragraph(tokens=tokens, evidence=evidence, first=turn * 100, search_rank=search_rank,
                        attention=np.full((2, 2), attention), attention_sum=attention * tokens,
                        attention_max=attention, turn=turn)


def test_the_order_that_ranks_the_evidence_first_keeps_it_at_half_the_tokens():
    # The search ranks the evidence last; the attention ranks it first.
    recalled = [_paragraph(1, False, 0, 0.1), _paragraph(2, False, 1, 0.2), _paragraph(3, True, 3, 0.9),
                _paragraph(4, False, 2, 0.3)]
    question = ro.Question(evidence_turns=2, live_evidence={7}, recalled=recalled)
    orders = ro.orders(2)
    by_attention = ro.score([question], orders["attention (mean per token, every layer and head)"], 0.5)
    by_search = ro.score([question], orders["search"], 0.5)
    assert by_attention == {"evidence_recall": 1.0, "kept_tokens": 200.0, "auc": 1.0, "note_recall": 1.0}
    assert by_search == {"evidence_recall": 0.5, "kept_tokens": 200.0, "auc": 0.0, "note_recall": 1.0}, \
        "the evidence already live counts; the recalled one was given back (the note's four lines hold it)"
    assert ro.score([question], orders["search"], 1.0)["evidence_recall"] == 1.0, "the whole recall keeps it"


def test_a_question_that_recalled_nothing_counts_what_was_live():
    question = ro.Question(evidence_turns=4, live_evidence={1}, recalled=[])
    assert ro.score([question], ro.orders(2)["search"], 0.5) == \
        {"evidence_recall": 0.25, "kept_tokens": 0.0, "auc": None, "note_recall": 0.25}


def test_the_relevance_views_rank_the_paragraph_that_says_what_is_asked_first():
    recalled = [_paragraph(1, False, 0, 0.1), _paragraph(2, True, 1, 0.2)]
    recalled[0].text, recalled[1].text = "We walked by the sea all day.", "My cat is called Mochi."
    question = ro.Question(evidence_turns=1, live_evidence=set(), recalled=recalled, text="What is my cat called?")

    class Embedder:  # the message and the cat's line point the same way
        def encode(self, texts):
            return np.array([[1.0, 0.0] if "cat" in t else [0.0, 1.0] for t in texts], np.float32)

    ro.add_relevance([question], Embedder())
    assert recalled[1].relevance_rank == 0 and recalled[1].word_share == 1.0 and recalled[1].cosine == 1.0
    orders = ro.orders(2)
    assert ro.score([question], orders["relevance (the app's: search, cosine and words fused)"], 0.5)["evidence_recall"] == 1.0

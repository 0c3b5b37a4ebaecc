"""BM25's words: the speakers' names are too common to search by, and a word
finds its other forms ("painting" finds "painted").

Real MiniLM, a real conversation file, real pruning and resurrection.
"""

from __future__ import annotations

import pytest

from halo_weave.core import token_resurrection
from halo_weave.memory.ranking import distinctive_terms, fts_query, stem
from halo_weave.store import ConversationStore
from test_semantic_index import (chunk_with, embedder, index_all_pruned, new_conversation,  # noqa: F401
                                 tokenize, with_settings)

pytestmark = pytest.mark.slow

#: A long chat with Robin: the name is in a third of the lines, most of them short.
CHAT = [
    ("user", "Good morning, Robin! Slept badly again."),
    ("assistant", "Morning! Sorry to hear that, a calm evening routine might help."),
    ("user", "Thanks, Robin, you always know what to say."),
    ("assistant", "Happy to help. What are you up to today?"),
    ("user", "Last weekend I painted the old barn door a deep forest green, it took two coats."),
    ("assistant", "A forest green door must look great against the wood."),
    ("user", "Robin, you're the best."),
    ("assistant", "You're kind. Anything else on your mind?"),
    ("user", "My cousin is visiting from Lisbon next month and I need a plan."),
    ("assistant", "A walk by the river and a good dinner are always a safe start."),
    ("user", "Great idea, Robin!"),
    ("assistant", "Glad you like it."),
    ("user", "I signed up for a pottery class on Thursdays, the teacher is very patient."),
    ("assistant", "Pottery is a lovely way to slow down after work."),
    ("user", "Hey Robin, quick one: is it too late to plant tulips?"),
    ("assistant", "Autumn is the right time, so you still have a few weeks."),
    ("user", "Thanks a lot, Robin."),
    ("assistant", "Any time."),
    ("user", "Robin, I'm so glad we talk every day."),
    ("assistant", "Me too, it is nice to hear how your week goes."),
]


@pytest.fixture()
def chat(embedder, tmp_path):  # noqa: F811
    """The chat in a conversation file, every turn pruned and indexed."""
    store = ConversationStore.open(tmp_path / "chat.db")
    conv = new_conversation(embedder)
    for role, text in CHAT:
        store.save_turn(conv, conv.add_turn(role, *tokenize(embedder, text + "\n\n")))
    yield conv, store, index_all_pruned(store, conv, embedder)
    store.close()


def test_a_name_in_many_lines_is_not_searched_by():
    question = "What did Robin paint on the barn?"
    counts = {"robin": 30, "paint": 2, "barn": 1}.get  # entries holding each word, of 400
    assert distinctive_terms(question, counts, 400, 0.05) == ["paint", "barn"]
    assert distinctive_terms(question, counts, 400, 1.0) == ["robin", "paint", "barn"]
    # A young chat: 7 of 40 entries is over 5 %, but a handful of lines is no evidence
    # that a word is common (COMMON_TERM_MIN).
    assert "robin" in distinctive_terms(question, {"robin": 7}.get, 40, 0.05)


def test_a_word_finds_its_other_forms():
    assert stem("painting") == stem("painted") == stem("paints") == "paint"
    assert stem("uses") == "uses"  # "us" is too short a stem to search by
    assert fts_query(["painting", "cat"], True) == '"paint"* OR "cat"'
    assert fts_query(["painting"], False) == '"painting"'


def test_the_line_that_answers_comes_back_not_the_one_naming_the_speaker(chat):
    conv, store, index = chat
    question = "What has Robin's friend been painting lately?"
    door = chunk_with(conv, "painted the old barn door")
    before = with_settings(index, hybrid_common_share=1.0, hybrid_prefix_stems=False)
    assert before.search(question, limit=1)[0].chunk_id != door.id  # a short line naming Robin
    assert index.search(question, limit=1)[0].chunk_id == door.id
    ids, _ = tokenize(index.embedder, question)
    room = token_resurrection.cost(conv, door, with_anchors=False) + 2
    index.recall_for(conv, question, len(ids), conv.live_token_count() + len(ids) + 200 + room,
                        max_new_tokens=200, store=store)
    assert conv.chunks[door.id].live
    assert "forest green" in "".join(conv.chunk_text(c.id) for c in conv.live_chunks())


def test_a_word_said_often_since_the_last_search_is_no_longer_searched_by(embedder, tmp_path):  # noqa: F811
    store = ConversationStore.open(tmp_path / "robin.db")
    conv = new_conversation(embedder)
    for role, text in CHAT:
        store.save_turn(conv, conv.add_turn(role, *tokenize(embedder, text + "\n\n")))
    index = index_all_pruned(store, conv, embedder)
    question = "Where is my cousin visiting from?"
    cousin = chunk_with(conv, "cousin is visiting").id
    assert index.search(question, limit=3)[0].bm25 > 0  # "cousin" is a rare word: BM25 finds it
    # Twelve more lines about the cousin: the word is now in more than the common share.
    for n in range(12):
        store.save_turn(conv, conv.add_turn("user", *tokenize(embedder, f"My cousin called again, time {n}.\n\n")))
    store.save_chunks(conv, conv.prune_to_fit(1))
    index.index_pending(conv)
    again = {m.chunk_id: m for m in index.search(question, limit=40)}
    # The counts remembered from the first search were not reused: "cousin" is common now,
    # and only "visiting" still finds the line.
    assert again[cousin].bm25 is not None and 0 < again[cousin].bm25
    assert all(m.bm25 == 0 for c, m in again.items() if c != cousin and "visit" not in conv.chunk_text(c))
    store.close()

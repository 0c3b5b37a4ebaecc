"""Multi-hop and temporal recall: dates the message names, its parts searched
apart, neighbours of a match in the same sitting (for the best matches only), anchors paid
from what is left, the query moved towards its best matches and searched again.

Real MiniLM, a real conversation file (the store's ``turns`` table keeps each turn's
time), real pruning.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from halo_weave.core.anchors import anchors_of
from halo_weave.core import token_resurrection
from halo_weave.memory.query import date_spans, sub_queries
from halo_weave.memory.recall_plan import make_plan
from halo_weave.settings import Settings
from halo_weave.store import ConversationStore
from test_semantic_index import (chunk_with, embedder, index_all_pruned, new_conversation,  # noqa: F401
                                 tokenize, with_settings)

pytestmark = pytest.mark.slow

#: (when, user, assistant): four sittings on different days.
DIARY = [
    (datetime(2023, 5, 8, 19, 0), "I cooked a big dinner for my parents tonight, it went really well.",
     "That sounds lovely, cooking for family is a great way to spend an evening together."),
    (datetime(2023, 5, 8, 19, 1), "My sister's dog is called Pepper and she chews every shoe in the house.",
     "Pepper sounds like a handful, maybe some chew toys would save your shoes."),
    (datetime(2023, 6, 12, 18, 0), "I cooked a big dinner for my friends tonight, everyone stayed late.",
     "Sounds like a fun night with good company and good food."),
    (datetime(2023, 6, 12, 18, 1), "I finally named my sailing boat Marigold after the orange sails.",
     "Marigold is a beautiful name for a boat with orange sails."),
    (datetime(2023, 7, 3, 9, 0), "The vet called this morning about my cat Biscuit.",
     "Oh no, I hope Biscuit is alright. What did the vet say?"),
    (datetime(2023, 7, 3, 9, 1), "She said his leg needs a small operation next Tuesday.",
     "I am glad they found it early, a small operation should heal quickly."),
    (datetime(2023, 8, 20, 10, 0), "I started learning the piano, scales every evening for now.",
     "Scales are the right start; a few minutes every day adds up quickly."),
]


@pytest.fixture()
def diary(embedder, tmp_path):  # noqa: F811
    """The diary in a conversation file, every turn pruned and indexed."""
    store = ConversationStore.open(tmp_path / "diary.db")
    conv = new_conversation(embedder)
    for when, user, assistant in DIARY:
        for offset, (role, text) in enumerate((("user", user), ("assistant", assistant))):
            turn = conv.add_turn(role, *tokenize(embedder, text + "\n\n"), created_at=when.timestamp() + offset)
            store.save_turn(conv, turn)
    yield conv, store, index_all_pruned(store, conv, embedder)
    store.close()


def ranked_ids(index, question: str, limit: int, **settings) -> list[int]:
    """The chunk ids ``question`` finds, best first, with ``settings`` changed and no floor."""
    return [m.chunk_id for m in with_settings(index, min_similarity=0.0, **settings).search(question, limit=limit)]


def test_dates_the_user_writes_are_read():
    day = datetime(2023, 5, 8)
    spans = [date_spans(t) for t in ("What did I cook on 8 May, 2023?", "on the 8th of May 2023",
                                     "What happened on May 8, 2023?", "on May 8th 2023")]
    assert spans == [[(day.timestamp(), datetime(2023, 5, 9).timestamp())]] * 4
    assert date_spans("What did Tim learn in December 2023?") == [
        (datetime(2023, 12, 1).timestamp(), datetime(2024, 1, 1).timestamp())]
    assert date_spans("What did he do in 2023?") == []  # a whole year names too much
    assert date_spans("on 31 February 2023") == []


def test_a_question_about_a_date_finds_what_was_said_that_day(diary):
    conv, store, index = diary
    question = "What did I cook on 8 May, 2023?"
    dated = with_settings(index, date_weight=0.3)
    top = dated.search(question, limit=2)
    parents = chunk_with(conv, "dinner for my parents")
    assert top[0].chunk_id == parents.id
    # The turn's text never names the date: without the date both dinners look alike.
    friends = chunk_with(conv, "dinner for my friends")
    plain = [m.chunk_id for m in with_settings(index, date_weight=0.0).search(question, limit=4)]
    assert {parents.id, friends.id} <= set(plain)
    ids, _ = tokenize(index.embedder, question)
    room = token_resurrection.cost(conv, parents) + 5  # one dinner's room, with its answer's opening
    dated.recall_for(conv, question, len(ids), conv.live_token_count() + len(ids) + 200 + room,
                        max_new_tokens=200, store=store)
    assert conv.chunks[parents.id].live and not conv.chunks[friends.id].live


def test_each_part_of_a_two_part_question_is_searched(diary):
    conv, _, index = diary
    question = "What is my boat called, and what is the name of my sister's dog?"
    assert len(sub_queries(question)) == 2
    found = {m.chunk_id for m in with_settings(index, query_split=True).search(question, limit=3)}
    assert chunk_with(conv, "named my sailing boat").id in found
    assert chunk_with(conv, "sister's dog is called Pepper").id in found


def test_neighbours_of_a_match_come_from_its_own_sitting_only(diary):
    conv, _, index = diary
    near = with_settings(index, resurrect_neighbours=1, resurrection_anchors="always")
    operation = chunk_with(conv, "needs a small operation")
    match = next(m for m in index.search("When is the cat's operation?", limit=20) if m.chunk_id == operation.id)
    plan = near.plan(conv, [match], budget=10_000)
    turns = {p.match.turn_id for p in plan.taken}
    # The vet's call just before (same morning) comes with it; the piano, weeks later, not.
    assert turns == {operation.turn_id - 1, operation.turn_id, operation.turn_id + 1}
    last = chunk_with(conv, "Scales are the right start")
    match = next(m for m in index.search("learning the piano scales", limit=20) if m.chunk_id == last.id)
    assert {p.match.turn_id for p in near.plan(conv, [match], 10_000).taken} == {
        last.turn_id - 1, last.turn_id}


def test_anchors_never_keep_out_a_match_when_paid_from_what_is_left(diary):
    conv, _, index = diary
    boat = chunk_with(conv, "named my sailing boat")
    dog = chunk_with(conv, "sister's dog is called Pepper")
    matches = [m for m in index.search("my boat and my sister's dog", limit=20) if m.chunk_id in (boat.id, dog.id)]
    framing = sum(conv.chunks[f].token_count for t in (boat.turn_id, dog.turn_id)
                  for f in conv.turns[t].chunk_ids if conv.chunks[f].framing)
    budget = boat.token_count + dog.token_count + framing + 5  # room for both, not their anchors
    always = make_plan(conv, matches, budget)
    assert len(always.taken) < 2  # the anchors took the room of a match
    room = make_plan(conv, matches, budget, anchors="if_room")
    assert {p.match.chunk_id for p in room.taken} == {boat.id, dog.id} and room.tokens <= budget
    roomy = make_plan(conv, matches, 10_000, anchors="if_room")  # with room, the anchors come too
    assert sorted(roomy.anchors) == sorted(a.id for c in (boat, dog) for a in anchors_of(conv, c))
    assert roomy.tokens == make_plan(conv, matches, 10_000).tokens
    before = conv.live_token_count()
    room.apply(conv, "at_prune")
    assert conv.chunks[boat.id].live and conv.chunks[dog.id].live
    assert conv.live_token_count() - before == room.tokens


def test_only_the_best_matches_bring_their_neighbours(diary):
    conv, _, index = diary
    operation = chunk_with(conv, "needs a small operation")
    scales = chunk_with(conv, "Scales are the right start")
    matches = [next(m for m in index.search(q, limit=20) if m.chunk_id == c.id)
               for q, c in (("When is the cat's operation?", operation), ("learning the piano scales", scales))]
    every = with_settings(index, resurrect_neighbours=1, neighbour_matches=0, resurrection_anchors="always")
    first = with_settings(index, resurrect_neighbours=1, neighbour_matches=1, resurrection_anchors="always")
    assert {p.match.turn_id for p in every.plan(conv, matches, 10_000).taken} == {
        operation.turn_id - 1, operation.turn_id, operation.turn_id + 1, scales.turn_id - 1, scales.turn_id}
    # Only the operation (the first match) comes with its sitting; the scales come alone.
    assert {p.match.turn_id for p in first.plan(conv, matches, 10_000).taken} == {
        operation.turn_id - 1, operation.turn_id, operation.turn_id + 1, scales.turn_id}


def test_feedback_finds_what_the_best_matches_are_about(diary):
    conv, _, index = diary
    question = "Tell me about the pets"
    operation = chunk_with(conv, "needs a small operation").id
    boat = chunk_with(conv, "named my sailing boat").id

    # The vet's call about the cat is the best match; the question never says "operation",
    # but searching again towards the best matches puts the cat's operation above the boat.
    plain = ranked_ids(index, question, 14, query_feedback=0.0)
    moved = ranked_ids(index, question, 14, query_feedback=0.5)
    assert plain.index(boat) < plain.index(operation)
    assert moved.index(operation) < moved.index(boat)
    assert set(moved[:2]) == set(plain[:2])  # the best matches stay where they were


def test_a_message_about_one_thing_brings_back_only_what_is_about_it(diary):
    conv, _, index = diary
    question = "What is my sister's dog called?"
    every = with_settings(index, resurrect_neighbours=0, resurrection_anchors="if_room",
                          recall_relative_floor=0.0, min_similarity=0.0, recall_max_chunks=0)
    focused = with_settings(index, resurrect_neighbours=0, resurrection_anchors="if_room",
                            recall_relative_floor=0.8, min_similarity=0.0, recall_max_chunks=0)
    matches = index.search(question, limit=20)
    pepper = chunk_with(conv, "My sister's dog is called Pepper").id
    brought = [p.match.chunk_id for p in every.plan(conv, matches, 10_000).taken]
    kept = [p.match.chunk_id for p in focused.plan(conv, matches, 10_000).taken]
    assert len(brought) == len(matches)  # with room, every match found comes back
    assert kept[0] == pepper and len(kept) < len(brought) / 2


def test_at_most_the_cap_of_paragraphs_comes_back(diary):
    conv, _, index = diary
    capped = with_settings(index, resurrect_neighbours=1, neighbour_matches=0,
                           resurrection_anchors="if_room", recall_max_chunks=3)
    matches = index.search("cooking dinner and the cat's operation", limit=20)
    plan = capped.plan(conv, matches, 10_000)
    assert len(plan.chunk_ids) == 3
    before = conv.live_token_count()
    plan.apply(conv, "at_prune")
    assert conv.live_token_count() - before == plan.tokens


def test_by_default_a_message_on_another_subject_brings_nothing_back(diary):
    conv, _, index = diary
    app = Settings()
    index = with_settings(index, min_similarity=app.search.min_similarity,
                          recall_relative_floor=app.recall.recall_relative_floor,
                          recall_max_chunks=app.recall.recall_max_chunks)  # the app's recall settings
    unrelated = index.plan(conv, index.search("What is the difference between a violin and a viola?"), 10_000)
    assert unrelated.chunk_ids == []
    asked = index.plan(conv, index.search("What is my sister's dog called?"), 10_000)
    pepper = chunk_with(conv, "My sister's dog is called Pepper")
    assert asked.taken[0].match.chunk_id == pepper.id
    # The dog, its answer and their sitting's neighbour: not the whole diary.
    assert len(asked.chunk_ids) <= 4


def one_line_a_day(embedder, path, lines):  # noqa: F811
    """``lines`` (role, text), one a day from 1 May 2023, in a conversation file at
    ``path``, every turn pruned and indexed: (conversation, store, index)."""
    store = ConversationStore.open(path)
    conv = new_conversation(embedder)
    for day, (role, text) in enumerate(lines, start=1):
        turn = conv.add_turn(role, *tokenize(embedder, text + "\n\n"), created_at=datetime(2023, 5, day).timestamp())
        store.save_turn(conv, turn)
    return conv, store, index_all_pruned(store, conv, embedder)


#: Two sittings' worth of lines: who gave the bonsai, and (another day) where he is moving.
NEIGHBOUR = [
    ("user", "My neighbour Tomas gave me a bonsai tree for my birthday."),
    ("assistant", "What a thoughtful present, a bonsai needs patience and a sunny window."),
    ("user", "I went to the cinema to watch a film about space travel."),
    ("assistant", "Space films are great on a big screen."),
    ("user", "Moving house is always stressful, packing takes weeks."),
    ("assistant", "Label every box and it gets easier."),
    ("user", "Tomas told me he is moving to Lisbon next month for a new job."),
    ("assistant", "Lisbon is a lovely city, he will enjoy it."),
    ("user", "We should plan a trip to the mountains in spring."),
    ("assistant", "Spring in the mountains is beautiful."),
]


def test_a_second_hop_finds_what_the_best_match_names(embedder, tmp_path):  # noqa: F811
    conv, store, index = one_line_a_day(embedder, tmp_path / "neighbour.db", NEIGHBOUR)
    question = "Where is the person who gave me the bonsai moving to?"
    lisbon, stressful = chunk_with(conv, "moving to Lisbon").id, chunk_with(conv, "Moving house").id

    # The question never names Tomas; the bonsai line does, and the second hop looks for
    # him: the line saying where he moves comes above the one about moving in general.
    plain = ranked_ids(index, question, 6, query_hop_terms=0)
    hopped = ranked_ids(index, question, 6, query_hop_terms=4)
    assert plain.index(stressful) < plain.index(lisbon)
    assert hopped.index(lisbon) < hopped.index(stressful)
    assert hopped[0] == plain[0] == chunk_with(conv, "gave me a bonsai").id
    store.close()


#: A transcript of two people: each line opens with who said it.
TWO_SPEAKERS = [
    ("user", "Anna: I spent the whole weekend hiking in the hills with my camera."),
    ("assistant", "Ben: Nice! I mostly stayed in and read a novel about sailors."),
    ("user", "Anna: My new hobby is pottery, I took it up last month and made three bowls."),
    ("assistant", "Ben: These days I build small stools out of wood in my garage."),
    ("user", "Anna: Did you watch the match on Sunday?"),
    ("assistant", "Ben: No, I was at my cousin's wedding all day."),
]


def test_a_question_naming_a_speaker_favours_that_speakers_lines(embedder, tmp_path):  # noqa: F811
    conv, store, index = one_line_a_day(embedder, tmp_path / "speakers.db", TWO_SPEAKERS)
    question = "What new hobby has Ben taken up?"
    bens, annas = chunk_with(conv, "stools").id, chunk_with(conv, "pottery").id

    # A line is embedded with its partner line (Anna's hobby with Ben's stools), so the
    # vector cannot tell them apart; with the text search off only the speaker can.
    plain = ranked_ids(index, question, 6, hybrid_search=False, speaker_weight=0.0)
    favoured = ranked_ids(index, question, 6, hybrid_search=False, speaker_weight=0.1)
    assert plain.index(annas) < plain.index(bens)
    assert favoured.index(bens) < favoured.index(annas)
    assert favoured[0] == bens
    # Naming nobody who speaks changes nothing.
    carl = "What new hobby has Carl taken up?"
    assert ranked_ids(index, carl, 6, hybrid_search=False, speaker_weight=0.1) == \
        ranked_ids(index, carl, 6, hybrid_search=False, speaker_weight=0.0)
    store.close()

"""Semantic resurrection end to end: real MiniLM, real conversation file, real pruning.

The Chekhov's gun: a boat name suggested in turn 1 is pruned long before turn 80 asks
for it, and comes back at its original place with the question and answer openings.
"""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from halo_weave.semantic_index import SemanticIndex
from halo_weave.store import ConversationStore
from test_semantic_index import chunk_with, embedder, new_conversation, say, tokenize  # noqa: F401

pytestmark = pytest.mark.slow

MAX_CONTEXT = 2048  # the model's window
KEEP = 420  # max_context_tokens: pruned to this after every exchange
NEW_TOKENS = 200

BOAT_QUESTION = "I just bought a small sailing boat. Can you suggest a name for it and where to moor it?"
BOAT_ANSWER = (
    "Congratulations on the new boat! Here are my two suggestions, one for her name and one for "
    "a safe place to keep her.",
    "For the name, I suggest calling her Marigold Drifter, after the orange sails and the way she "
    "wanders slowly with the wind.",
    "For mooring, the marina at Port Quillan rents small berths by the month and has a slipway.",
)
TOPICS = [
    ("How do I bake sourdough bread at home?",
     "Feed your starter the night before so it is bubbly and active when you mix the dough.",
     "Bake in a preheated cast iron pot with the lid on for the first twenty minutes."),
    ("What causes the northern lights?",
     "Charged particles from the sun hit the upper atmosphere and excite oxygen and nitrogen.",
     "Green light comes from oxygen at lower altitudes, red from oxygen much higher up."),
    ("How should I start learning the Python programming language?",
     "Install a recent Python and write small scripts that automate something you do by hand.",
     "Learn lists, dictionaries and functions first, then read other people's code."),
    ("Why did the Roman Empire split into east and west?",
     "The empire was too large to govern from one capital, so administration was divided.",
     "Diocletian's tetrarchy formalised the division and Constantinople later became the eastern seat."),
    ("What is a good beginner routine at the gym?",
     "Three full-body sessions a week with squats, presses and rows build a solid base.",
     "Add a little weight each week and rest at least a day between sessions."),
    ("How do vaccines train the immune system?",
     "A vaccine shows the immune system a harmless piece or copy of a pathogen.",
     "Memory cells then recognise the real pathogen quickly and fight it off."),
    ("Which houseplants survive in low light?",
     "Snake plants, pothos and ZZ plants tolerate dim rooms and irregular watering.",
     "Let the soil dry out between waterings so the roots do not rot."),
    ("How does compound interest work?",
     "Interest is added to the principal, so each period earns interest on earlier interest.",
     "Over decades this exponential growth dominates what you contributed yourself."),
    ("What should I pack for a winter hike in the mountains?",
     "Bring layers: a base layer that wicks sweat, an insulating fleece and a waterproof shell.",
     "Carry a headlamp, a map, extra food and a warm drink in an insulated bottle."),
    ("How do I keep my cast iron pan from rusting?",
     "Dry it on the stove right after washing and wipe a thin film of oil over the surface.",
     "Avoid soaking it in water and re-season it in the oven if rust spots appear."),
    ("Can you explain how a bill becomes a law?",
     "A bill is introduced, debated and amended in committee, then voted on in both chambers.",
     "After both chambers pass the same text, the head of state signs it into law."),
    ("How do bees make honey?",
     "Worker bees collect nectar and pass it mouth to mouth, adding enzymes that break down sugar.",
     "They fan the comb with their wings until the water evaporates, then cap it with wax."),
    ("What is the difference between weather and climate?",
     "Weather is the state of the atmosphere over hours or days at a given place.",
     "Climate is the average pattern of weather over thirty years or more."),
]


def exchange(conv, store, index, embedder, question, *answer):
    """One turn pair as the app runs it: persist, attention, prune, persist, index."""
    store.save_turn(conv, say(conv, embedder, "user", question))
    turn = say(conv, embedder, "assistant", *answer)
    n = conv.live_token_count()
    for _ in range(8):  # the answer attends to the newest tokens; older ones decay
        attention = np.full(n, 0.2 / n, np.float32)
        attention[0] = 0.5
        attention[-120:] += 0.3 / 120
        conv.apply_attention(attention)
    store.save_turn(conv, turn)
    store.save_brightness(conv)
    store.save_chunks(conv, conv.prune_to_fit(KEEP))
    index.index_pending(conv)


@pytest.fixture(scope="module")
def long_chat(embedder, tmp_path_factory):  # noqa: F811
    """80 turns: the boat talk (turns 0-1), then 39 unrelated exchanges, all indexed."""
    path = tmp_path_factory.mktemp("chat") / "chat.db"
    store = ConversationStore.open(path)
    conv = new_conversation(embedder, max_context_tokens=KEEP)
    index = SemanticIndex(store.conn, conv.settings, embedder, lock=store.lock)
    exchange(conv, store, index, embedder, BOAT_QUESTION, *BOAT_ANSWER)
    pruned_by_turn_40 = None
    for i in range(39):
        question, *answer = TOPICS[i % len(TOPICS)]
        exchange(conv, store, index, embedder, question, *answer)
        if conv.next_turn_id == 40:
            pruned_by_turn_40 = not chunk_with(conv, "Marigold Drifter").live
    store.close()
    return path, conv.settings, pruned_by_turn_40


@pytest.fixture()
def chat(long_chat, embedder, tmp_path):  # noqa: F811
    """A private copy of the long chat, reopened from its file like after a restart."""
    path, settings, _ = long_chat
    copy = tmp_path / "copy.db"
    with sqlite3.connect(path) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
    store = ConversationStore.open(copy)
    conv = store.load(settings, new_conversation(embedder).framing)
    index = SemanticIndex(store.conn, settings, embedder, lock=store.lock)
    index.load()
    yield conv, store, index
    store.close()


def ask(conv, store, index, embedder, text):  # noqa: F811
    """The send path: resurrect for the message, then add it."""
    ids, _ = tokenize(embedder, text)
    return index.recall_for(conv, text, len(ids), MAX_CONTEXT, NEW_TOKENS, store=store)


def test_chekhovs_gun_comes_back_in_place(long_chat, chat, embedder):  # noqa: F811
    conv, store, index = chat
    assert long_chat[2] is True  # pruned by turn 40
    assert conv.next_turn_id == 80
    fact = chunk_with(conv, "Marigold Drifter")
    question = conv.chunk_by_key(0, 0, "user")
    opening = conv.chunk_by_key(1, 0, "assistant")
    assert not (fact.live or question.live or opening.live)
    original = conv.chunk_tokens(fact.id).token_ids.copy()
    start = fact.start

    result = ask(conv, store, index, embedder, "What name did you suggest for my boat?")

    assert fact in result.resurrected and fact.live
    assert question.live and opening.live  # with its anchors
    assert fact.start == start
    rows = conv.chunk_rows(fact)
    assert list(conv.table.position[rows]) == list(range(start, start + fact.token_count))
    assert np.array_equal(conv.table.token_id[rows], original)
    assert np.all(np.diff(conv.table.position) > 0)  # the context reads in original order
    later = [c for c in conv.live_chunks() if c.turn_id > 1]
    assert question.start < opening.start < fact.start < min(c.start for c in later)
    # persisted in the same step: a restart shows it alive with one more reference
    reopened = store.load(conv.settings, conv.framing)
    assert reopened.chunks[fact.id].live
    count = store.conn.execute("SELECT reference_count FROM semantic_entries WHERE chunk_id = ?",
                               (fact.id,)).fetchone()[0]
    assert count == 1


def test_unrelated_question_leaves_the_boat_buried(chat, embedder):  # noqa: F811
    conv, store, index = chat
    result = ask(conv, store, index, embedder, "What is the best temperature to brew green tea?")
    assert result.resurrected  # something came back...
    # ...but not the boat's facts (the whole chat is one sitting, so a match in turn 2
    # may bring the boat answer's opening as its neighbour; the facts stay buried).
    assert not chunk_with(conv, "Marigold Drifter").live
    assert not chunk_with(conv, "Port Quillan").live


@pytest.mark.parametrize("cap", [0, 30, 120])
def test_budget_is_never_exceeded(chat, embedder, cap):  # noqa: F811
    conv, store, index = chat
    index.settings = conv.settings.replace(resurrection_budget_cap=cap)
    before = conv.live_token_count()
    result = ask(conv, store, index, embedder, "Tell me again about the boat name and mooring")
    assert result.budget <= MAX_CONTEXT - before - NEW_TOKENS
    if cap:
        assert result.budget <= cap
    assert result.tokens_used == conv.live_token_count() - before <= result.budget
    assert result.tokens_used == result.plan.tokens
    if cap == 30:  # the name chunk and its anchors cost more than 30 tokens
        assert not chunk_with(conv, "Marigold Drifter").live
        assert result.plan.skipped


def test_already_live_chunks_cost_nothing(chat, embedder):  # noqa: F811
    conv, store, index = chat
    recent = max((c for c in conv.chunks.values() if c.live and not c.framing and c.role == "assistant"),
                  key=lambda c: c.start)
    matches = index.search(conv.chunk_text(recent.id))
    assert matches[0].chunk_id == recent.id or recent.id in [m.chunk_id for m in matches]
    plan = index.plan(conv, matches, budget=0)
    assert recent.id in plan.chunk_ids
    assert all(p.cost == 0 for p in plan.taken)
    before = conv.live_token_count()
    result = ask(conv, store, index, embedder, conv.chunk_text(recent.id))
    live_hits = [p for p in result.plan.taken if conv.chunks[p.match.chunk_id] is recent]
    assert live_hits and live_hits[0].cost == 0
    assert result.tokens_used == conv.live_token_count() - before


def test_shared_anchors_are_paid_once(chat, embedder):  # noqa: F811
    conv, store, index = chat
    name = chunk_with(conv, "Marigold Drifter")
    moor = chunk_with(conv, "Port Quillan")
    matches = [m for m in index.search("boat name and mooring berth", limit=50)
               if m.chunk_id in (name.id, moor.id)]
    seed = SemanticIndex(store.conn, conv.settings.replace(resurrection_anchors="always", resurrect_neighbours=0),
                         embedder, lock=store.lock)
    plan = seed.plan(conv, matches, budget=10_000)  # each match pays for its anchors
    first, second = plan.taken
    assert first.cost > second.cost  # the second pays only for itself
    assert second.cost == conv.chunks[second.match.chunk_id].token_count


def memory_state(conv):
    """What the user sees of the conversation: live tokens and every chunk's state."""
    return ({name: getattr(conv.table, name).tolist() for name in ("position", "token_id", "brightness")},
            {c.id: (c.live, c.brightness_at_prune, c.age_key) for c in conv.chunks.values()},
            {c.id: conv.chunk_tokens(c.id).brightness.tolist() for c in conv.graveyard()})


@pytest.mark.parametrize("failure", ["read-only", "locked"])
def test_a_failed_save_leaves_the_chunks_in_the_graveyard(chat, embedder, failure):  # noqa: F811
    """A write that fails (a read-only file; another process holding the write lock)
    leaves the conversation as it was: nothing shows as live that the file holds pruned.

    (A full disk cannot be staged here: resurrecting rewrites rows in place and needs
    no new page, so a tiny ``max_page_count`` does not stop it.)
    """
    conv, store, index = chat
    fact = chunk_with(conv, "Marigold Drifter")
    before = memory_state(conv)
    other = sqlite3.connect(store.path, isolation_level=None)
    if failure == "read-only":
        store.conn.execute("PRAGMA query_only = 1")
    else:
        store.conn.execute("PRAGMA busy_timeout = 0")
        other.execute("BEGIN IMMEDIATE")
    with pytest.raises(sqlite3.OperationalError, match="readonly|locked"):
        ask(conv, store, index, embedder, "What name did you suggest for my boat?")
    assert not fact.live and memory_state(conv) == before
    assert not store.conn.in_transaction

    if other.in_transaction:
        other.execute("ROLLBACK")
    other.close()
    store.conn.execute("PRAGMA query_only = 0")
    result = ask(conv, store, index, embedder, "What name did you suggest for my boat?")
    assert fact in result.resurrected
    assert store.load(conv.settings, conv.framing).chunks[fact.id].live

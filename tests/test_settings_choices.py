"""The declared choices (halo_weave.settings.CHOICES) and the words the window shows for
the score in use: the same settings always give the same, true sentence."""

from __future__ import annotations

import pytest

from halo_weave.settings import CHOICES, PRUNING_FIELDS, Settings, choice_words, scoring_words
from halo_weave.ui.settings_io import RANGES


def test_every_choice_is_explained_and_every_field_it_uses_can_be_edited():
    fields = Settings.names()
    for name, options in CHOICES.items():
        assert name in fields and Settings().value(name) in [o.value for o in options]
        for option in options:
            assert option.label and len(option.explanation) > 20, (name, option.value)
            for used in option.uses:
                assert used in fields and used in RANGES, (name, option.value, used)
    for name, label, tip in PRUNING_FIELDS:
        assert name in fields and label
        assert name in CHOICES or (name in RANGES and tip), f"{name}: a numeric field needs a range and a tooltip"


def test_a_setting_is_named_by_its_flat_name_and_a_mistyped_one_is_refused_by_name():
    settings = Settings.of(max_context_tokens=700).replace(prune_order="brightness")
    assert settings.value("max_context_tokens") == settings.pruning.max_context_tokens == 700
    assert settings.value("prune_order") == "brightness" and settings.sampling == Settings().sampling
    with pytest.raises(TypeError, match="'max_context_token'"):
        settings.replace(max_context_token=500)
    with pytest.raises(AttributeError, match="'prune_ordr'"):
        settings.value("prune_ordr")


def test_the_default_says_votes_peak_and_oldest_first():
    # docs/memory-benchmark.md (the dev-set run): oldest first is the default order.
    words = scoring_words(Settings())
    assert words.short == "☀ magnitude votes · peak · pruning oldest first"
    assert "Pruning is oldest first" in words.colour and words.order == "age"
    assert "brightness only colours the text" in words.sentence


def test_dimmest_first_is_still_said_when_chosen():
    words = scoring_words(Settings.of(prune_order="brightness"))
    assert words.short == "☀ magnitude votes · peak · pruning dimmest first"
    assert "Dim paragraphs are pruned first" in words.colour and words.order == "brightness"


@pytest.mark.parametrize(("changes", "source", "short"), [
    (dict(brightness_rule="decay", brightness_half_life=2048, prune_order="brightness"), "server",
     "☀ decayed attention mass (half-life 2,048) · peak · pruning dimmest first"),
    (dict(brightness_rule="mass", chunk_rank="topk", chunk_rank_k=8, prune_order="age"), "server",
     "☀ accumulated attention mass · top-8 mean · pruning oldest first"),
    (dict(prune_keep_recent=512, prune_order="brightness"), "server", "☀ magnitude votes · peak · pruning dimmest first (newest 512 tokens last)"),
    (dict(prune_when="for_room", prune_order="brightness"), "server",
     "☀ magnitude votes · peak · pruning dimmest first, only for room"),
    # The reader's attention goes through the rule that is set; it ranks chunks only when asked to.
    (dict(brightness_rule="decay"), "reader",
     "☀ the reader's decayed attention mass (half-life 256) · peak · pruning oldest first"),
    (dict(proxy_pruning=True, prune_order="brightness"), "reader", "☀ the reader's magnitude votes · peak · pruning dimmest first"),
    (dict(brightness_rule="decay"), "none", "pruning oldest first"),
])
def test_the_words_follow_the_rule_and_who_measures_it(changes, source, short):
    words = scoring_words(Settings().replace(**changes), source)
    assert words.short == short
    by_age = words.order == "age"
    assert by_age == short.endswith("oldest first")
    assert ("oldest first" in words.sentence) == by_age


def test_a_half_life_is_named_only_by_the_rule_that_uses_it():
    assert choice_words(Settings.of(brightness_half_life=99), "brightness_rule") == "magnitude votes"
    assert choice_words(Settings.of(brightness_rule="decay", brightness_half_life=99), "brightness_rule") == (
        "decayed attention mass (half-life 99)")


def test_the_sentence_says_when_a_message_may_prune_older_context_for_what_it_brings_back():
    # resurrection_keep_share: the heatmap's words say what decides pruning at a message too.
    words = scoring_words(Settings.of(max_context_tokens=2000, resurrection_keep_share=0.5))
    assert "older context beyond the newest 1,000 tokens is pruned (oldest first)" in words.sentence
    dimmest = scoring_words(Settings.of(max_context_tokens=2000, resurrection_keep_share=0.25,
                                        prune_order="brightness"))
    assert "beyond the newest 500 tokens is pruned (dimmest first)" in dimmest.sentence
    assert "older context" not in scoring_words(Settings.of(resurrection_keep_share=1.0)).sentence

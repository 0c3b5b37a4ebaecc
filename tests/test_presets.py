"""Presets: the built-in ones, the user's saved beside settings.ini and read back, applied
to the settings; a presets file that cannot be read is said so and never lost."""

from __future__ import annotations

import json

import pytest

from halo_weave.errors import PresetError
from halo_weave.settings import Settings
from halo_weave.settings.presets import BUILT_IN, SAMPLING_RANGES, Preset, PresetBook, presets_file


def test_preset_built_ins_are_assistant_coder_and_writer_with_their_sampling():
    book = PresetBook(presets_file())
    names = [p.name for p in book.presets[:3]]
    assert names == ["Assistant", "Coder", "Writer"]
    coder, writer = book.find("coder"), book.find("Writer")
    assert coder.sampling["temperature"] < writer.sampling["temperature"]
    assert coder.sampling["rep_pen"] == 1.0, "code repeats names and brackets on purpose"
    assert "code" in coder.system_prompt and "fiction" in writer.system_prompt
    assert all(len(p.system_prompt) > 200 for p in BUILT_IN), "a prompt that says more than the default"
    assert book.find("Assistant").settings(Settings()).sampling == Settings().sampling, \
        "Assistant is the app's default sampling"


def test_preset_file_lives_beside_settings_ini(tmp_path, monkeypatch):
    monkeypatch.setenv("HALO_WEAVE_CONFIG", str(tmp_path / "config"))
    assert presets_file() == tmp_path / "config" / "presets.json"


def test_preset_saved_is_read_back_and_applied(tmp_path):
    path = tmp_path / "presets.json"
    settings = Settings.of(temperature=1.3, top_p=0.8, top_k=12, rep_pen=1.2, max_new_tokens=300)
    words = PresetBook(path).save(Preset.of("Pirate", "You are a pirate. Answer like one.", settings))
    assert "saved" in words and str(path) in words
    book = PresetBook(path)  # a new start reads the file again
    assert book.problem is None
    pirate = book.find("pirate")
    assert pirate.system_prompt == "You are a pirate. Answer like one."
    applied = pirate.settings(Settings())
    assert (applied.sampling.temperature, applied.sampling.top_k, applied.sampling.max_new_tokens) == (1.3, 12, 300)
    assert applied.pruning == Settings().pruning, "only the sampling changes"
    assert pirate.matches("You are a pirate. Answer like one.", applied)
    assert not pirate.matches("You are a pirate. Answer like one.", Settings())

    assert "replaced" in book.save(Preset.of("PIRATE", "Arr.", Settings()))
    assert [p.name for p in PresetBook(path).own] == ["PIRATE"], "one preset per name, whatever its letters"
    book.delete("pirate")
    assert PresetBook(path).own == []


def test_preset_names_of_built_ins_and_bad_names_are_refused(tmp_path):
    book = PresetBook(tmp_path / "presets.json")
    for name, reason in (("coder", "built-in"), ("  ", "needs a name"), ("a\nb", "one line"),
                         ("x" * 81, "at most 80")):
        with pytest.raises(PresetError, match=reason):
            book.save(Preset.of(name, "prompt", Settings()))
    with pytest.raises(PresetError, match="built in"):
        book.delete("Writer")
    assert not (tmp_path / "presets.json").exists()


@pytest.mark.parametrize("content, reason", [
    ("{not json", "not valid JSON"),
    ('{"presets": []}', "not a presets file"),
    ('{"format": "halo-weave-presets", "version": 9, "presets": []}', "newer Halo Weave"),
    ('{"format": "halo-weave-presets", "version": 1, "presets": [{"name": "T", "system_prompt": "p", '
     '"sampling": {"temperature": "hot"}}]}', "temperature must be a number"),
    ('{"format": "halo-weave-presets", "version": 1, "presets": [{"name": "T", "system_prompt": "p", '
     '"sampling": {"top_p": 7}}]}', "top_p must be a number from 0 to 1"),
    ('{"format": "halo-weave-presets", "version": 1, "presets": [{"name": "T", "system_prompt": "p", '
     '"sampling": {"min_p": 0.1}}]}', "'min_p' is not a sampling setting"),
    ('{"format": "halo-weave-presets", "version": 1, "presets": [{"system_prompt": "p"}]}', "no name"),
])
def test_preset_file_that_cannot_be_read_says_why_and_loses_nothing(tmp_path, content, reason):
    path = tmp_path / "presets.json"
    path.write_text(content, encoding="utf-8")
    book = PresetBook(path)
    assert book.problem is not None and reason in book.problem and "presets.json" in book.problem
    assert [p.name for p in book.presets] == [p.name for p in BUILT_IN], "the built-in ones are still offered"
    assert path.read_text(encoding="utf-8") == content, "reading never rewrites it"
    with pytest.raises(PresetError):
        book.delete("T")
    assert path.read_text(encoding="utf-8") == content

    words = book.save(Preset.of("Mine", "My prompt.", Settings()))
    [aside] = tmp_path.glob("presets.damaged-*.json")
    assert aside.name in words, "the user is told where the old file went"
    assert aside.read_text(encoding="utf-8") == content, "the unreadable file is kept, byte for byte"
    fresh = PresetBook(path)
    assert fresh.problem is None and [p.name for p in fresh.own] == ["Mine"]


def test_preset_file_is_plain_json_a_user_can_edit(tmp_path):
    path = tmp_path / "presets.json"
    path.write_text(json.dumps({"format": "halo-weave-presets", "version": 1, "presets": [
        {"name": "Terse", "system_prompt": "Answer in one sentence.", "sampling": {"max_new_tokens": 64}}]}))
    terse = PresetBook(path).find("Terse")
    assert terse.sampling["max_new_tokens"] == 64
    assert terse.sampling["temperature"] == Settings().sampling.temperature, "what it leaves out is the default"


def test_preset_ranges_are_the_settings_dialogs():
    from halo_weave.ui.settings_io import RANGES

    assert {name: RANGES[name] for name in SAMPLING_RANGES} == SAMPLING_RANGES

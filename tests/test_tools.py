"""The model's notebook: seed 001 §12's examples, the sandbox, the continuation loop."""

from __future__ import annotations

import json
import time

import pytest

from halo_weave.tools import notebook as tools
from halo_weave.tools.jq_sandbox import SandboxError, check_program, tokenize
from halo_weave.tools.notebook import (
    MAX_ROUNDS,
    RESULT_MARKER,
    STOP_SEQUENCE,
    TOOL_PROMPT,
    ToolRunner,
    find_calls,
    new_notes,
    parse_command,
)


@pytest.fixture(scope="module")
def runner():
    r = ToolRunner(clock=lambda: "2025-01-01T00:00:00+00:00")
    yield r
    r.close()


@pytest.fixture
def notes():
    n = new_notes("2024-12-31T00:00:00+00:00")
    n["topics"] = {"cats": "like tuna"}
    n["reminders"] = ["call Bob"]
    n["field"] = "old"
    return n


def call(command: str):
    (found,) = find_calls(f"<tool>{command}</tool>")
    return found


# ---------------------------------------------------------------- seed examples
@pytest.mark.parametrize(
    "command, expected",
    [
        ("jq '.' notes.json", None),
        ("jq '.topics' notes.json", '✓ {"cats":"like tuna"}'),
        ("jq '.reminders[0]' notes.json", '✓ "call Bob"'),
        ("jq '.nothing' notes.json", "✓ null"),
    ],
)
def test_seed_reads(runner, notes, command, expected):
    result = runner.run(call(command), notes)
    assert result.ok and result.new_notes is None
    assert result.compact_text == f"{RESULT_MARKER}{command}】→ {result.message}"
    if expected:
        assert result.message == expected
    else:
        assert json.loads(result.message[2:].rstrip("…")) if len(result.message) < 300 else True


@pytest.mark.parametrize(
    "command, expected_message, check",
    [
        ("jq '.field = \"value\"' notes.json > output", '✓ .field = "value"', lambda n: n["field"] == "value"),
        ("jq '.reminders += [\"item\"]' notes.json > output", '✓ .reminders += ["item"]',
         lambda n: n["reminders"] == ["call Bob", "item"]),
        ("jq '. + {\"new\": \"field\"}' notes.json > output", '✓ .new = "field"', lambda n: n["new"] == "field"),
        ("jq 'del(.field)' notes.json > output", "✓ del(.field)", lambda n: "field" not in n),
        ("jq '.topics.dogs = {\"name\": \"Rex\"}' notes.json > output", '✓ .topics.dogs = {"name":"Rex"}',
         lambda n: n["topics"]["dogs"] == {"name": "Rex"}),
        ("jq '.topics.cats = \"like tuna\"' notes.json > output", "✓ no change", lambda n: True),
    ],
)
def test_seed_writes(runner, notes, command, expected_message, check):
    before = json.dumps(notes, sort_keys=True)
    result = runner.run(call(command), notes)
    assert result.ok, result.message
    assert result.message == expected_message
    assert result.compact_text == f"{RESULT_MARKER}{command}】→ {expected_message}"
    assert check(result.new_notes)
    assert result.new_notes["_metadata"]["last_modified"] == "2025-01-01T00:00:00+00:00"
    assert result.new_notes["_metadata"]["created"] == "2024-12-31T00:00:00+00:00"
    assert json.dumps(notes, sort_keys=True) == before  # the input document is not mutated


def test_initial_structure():
    n = new_notes()
    assert set(n) == {"_metadata", "topics", "reminders", "context", "scratch"}
    assert set(n["_metadata"]) == {"created", "last_modified", "description"}
    assert n["topics"] == {} and n["reminders"] == [] and n["context"] == {} and n["scratch"] == {}


def test_first_call_without_notes_starts_from_the_initial_structure(runner):
    result = runner.run(call("jq '.reminders += [\"x\"]' notes.json > output"), None)
    assert result.ok and result.new_notes["reminders"] == ["x"]
    assert set(result.new_notes) == {"_metadata", "topics", "reminders", "context", "scratch"}


def test_notes_round_trip_as_json(runner, notes):
    result = runner.run(call("jq '.context.unicode = \"naïve ☕\" | .scratch.n = 1.5' notes.json > output"), notes)
    assert json.loads(json.dumps(result.new_notes, ensure_ascii=False)) == result.new_notes
    again = runner.run(call("jq '.' notes.json > output"), json.loads(json.dumps(result.new_notes)))
    assert again.message == "✓ no change"


# ---------------------------------------------------------------- failed writes
@pytest.mark.parametrize(
    "command, fragment",
    [
        ("jq '.topics' notes.json > output", None),  # an object: allowed, replaces the notes
        ("jq '.reminders' notes.json > output", "must output a JSON object, got an array"),
        ("jq '1, 2' notes.json > output", "exactly one JSON object, got 2 outputs"),
        ("jq 'empty' notes.json > output", "exactly one JSON object, got 0 outputs"),
        ("jq '.reminders.x = 1' notes.json > output", "Cannot index array"),
        ("jq 'error(\"nope\")' notes.json > output", "nope"),
        ("jq '.x = (\"a\" * 70000)' notes.json > output", "delete something first"),
        ("jq '.x = ' notes.json > output", "syntax error"),
    ],
)
def test_failed_write_leaves_notes_unchanged(runner, notes, command, fragment):
    result = runner.run(call(command), notes)
    if fragment is None:
        assert result.ok and "_metadata" in result.new_notes  # metadata survives a replace
        return
    assert not result.ok and result.new_notes is None
    assert result.message.startswith("❌ ") and fragment in result.message


# ---------------------------------------------------------------- the sandbox
FORBIDDEN = [
    ("env", "env is not allowed: reads the environment"),
    ("$ENV", "$ENV is not allowed: reads the environment"),
    ("$ENV.HOME", "$ENV is not allowed"),
    ("env.HOME", "env is not allowed"),
    ("input", "input is not allowed: reads further inputs"),
    ("[inputs]", "inputs is not allowed"),
    ('import "x" as x; .', "import is not allowed: loads modules from files"),
    ('include "x"; .', "include is not allowed: loads modules from files"),
    ("input_filename", "input_filename is not allowed"),
    ("$__loc__", "$__loc__ is not allowed"),
    ("halt", "halt is not allowed: stops the process"),
    ('halt_error', "halt_error is not allowed"),
    ('"x" | halt_error(1)', "halt_error is not allowed"),
    ("stderr", "stderr is not allowed: writes to stderr"),
    ("debug", "debug is not allowed: writes to stderr"),
    ('debug("x")', "debug is not allowed"),
    ("input_line_number", "input_line_number is not allowed"),
    ("get_search_list", "get_search_list is not allowed"),
    ("modulemeta", "modulemeta is not allowed"),
    ("localtime", "localtime is not allowed in notes programs"),  # builtin, not on the allow-list
    ("_match_impl(\"a\"; null; false)", "internal function"),
    ("x::f", "module functions"),
    # obfuscation: whitespace, comments, strings, definitions, object tricks
    ("  \n\t env  ", "env is not allowed"),
    ("$\nENV", "$ENV is not allowed"),
    (". # comment\n| env", "comments (#) are not allowed"),
    ('1 # \\\n + env', "comments (#) are not allowed"),
    ('"\\(env)"', "env is not allowed"),
    ('"a\\"b\\\\\\(env)"', "env is not allowed"),
    ('"\\("\\(input)")"', "input is not allowed"),
    ('.["\\(env.HOME)"]', "env is not allowed"),
    ('@base64 "\\(env)"', "env is not allowed"),
    ("{env}", "env is not allowed"),
    ("{a: env}", "env is not allowed"),
    ("{a: if true then 1, env, 2 else 3 end}", "env is not allowed"),
    ("def env: 1; env", "env is not allowed"),
    ("def f(input): input; f(1)", "input is not allowed"),
    ("def localtime: 1; (localtime)", "localtime is not allowed"),
    ("[.[] | env]", "env is not allowed"),
    ("reduce env as $x (0; 1)", "env is not allowed"),
    ("path(..) | env", "env is not allowed"),
]


@pytest.mark.parametrize("program, message", FORBIDDEN)
def test_forbidden_constructs_are_refused_with_a_clear_message(runner, notes, program, message):
    result = runner.run(call(f"jq '{program}' notes.json"), notes)
    assert not result.ok
    assert message in result.message, result.message
    with pytest.raises(SandboxError):
        check_program(program, runner.worker.builtin_names)


@pytest.mark.parametrize(
    "program",
    [
        ".env", '."env"', '.["env"]', "{env: 1}", '{"env": .topics}', ". as {env: $x} | $x",
        '"env input halt # not a comment"', "def note(f): .topics |= f; note(.x = 1)",
        ".topics | to_entries | map(.key) | join(\", \")", "[.reminders[] | ascii_upcase]",
        "now | todate | length", '[.. | strings] | length', "label $out | 1, break $out",
        '.topics | with_entries(select(.value | test("tuna")))',
    ],
)
def test_harmless_programs_that_mention_forbidden_words_run(runner, notes, program):
    result = runner.run(call(f"jq '{program}' notes.json"), notes)
    assert result.ok, result.message


def test_worker_has_no_environment_even_if_the_checker_were_bypassed(runner, monkeypatch):
    # Defence in depth: the checker is switched off, so the worker process meets the
    # forbidden builtins itself; it must have nothing to give away.
    import halo_weave.tools.jq_sandbox as sandbox

    monkeypatch.setattr(sandbox, "check_program", lambda *a, **k: None)
    env = runner.worker.run("env", None)[0]
    assert "HOME" not in env and "PATH" not in env
    assert set(env) <= {"LC_CTYPE"}  # Python's own locale coercion, nothing inherited
    with pytest.raises(SandboxError, match="module not found"):
        runner.worker.run('include "os"; .', None)
    assert runner.worker.run("get_search_list", None) == [[]]


@pytest.mark.parametrize("program", ["[range(1e9)]", "repeat(.)", "until(false; .)", "range(1e9)",
                                     "def f: f; f", '"x" * 1000000000', "[limit(1e8; repeat(1))] | length"])
def test_runaway_programs_are_stopped_within_the_limit(runner, notes, program):
    start = time.monotonic()
    result = runner.run(call(f"jq '{program}' notes.json > output"), notes)
    elapsed = time.monotonic() - start
    assert not result.ok and result.new_notes is None
    assert "stopped" in result.message or "memory" in result.message, result.message
    assert elapsed < runner.worker.time_limit_s + 3.0  # the limit plus kill and restart
    # The runner still works afterwards (a fresh worker replaces the killed one).
    assert runner.run(call("jq '.reminders[0]' notes.json"), notes).message == '✓ "call Bob"'


def test_tokenizer_follows_strings_and_interpolation():
    texts = [t.text for t in tokenize('.a + "x\\"y\\(.b | f("z"))" | .c')]
    assert texts == [".a", "+", '"', ".b", "|", "f", "(", '"', '"', ")", '"', "|", ".c"]


# ---------------------------------------------------------------- parsing calls
@pytest.mark.parametrize(
    "command, program, write",
    [
        ("jq '.' notes.json", ".", False),
        ("jq '.a = 1' notes.json > output", ".a = 1", True),
        ("jq '.a = 1' notes.json >output", ".a = 1", True),
        ("jq '.a = 1' notes.json > notes.json", ".a = 1", True),
        ('jq ".topics" notes.json', ".topics", False),
        ("jq -c '.topics' notes.json", ".topics", False),
        ("jq '.name = \"O'\\''Brien\"' notes.json > output", '.name = "O\'Brien"', True),
        ("jq '.topics'", ".topics", False),
    ],
)
def test_parse_command(command, program, write):
    assert parse_command(command) == (program, write)


@pytest.mark.parametrize(
    "command, fragment",
    [
        ("cat notes.json", "only jq is available"),
        ("jq '.' /etc/passwd", "only notes.json exists"),
        ("jq '.' notes.json > /tmp/x", "writes go to '> output'"),
        ("jq -n 'input' notes.json", "option -n is not available"),
        ("jq '.' notes.json | sh", "no shell pipes"),
        ("jq '.a notes.json", "cannot parse the command"),
        ("jq", "no jq program"),
    ],
)
def test_bad_commands_become_error_results(runner, notes, command, fragment):
    result = runner.run(call(command), notes)
    assert not result.ok and fragment in result.message


# ---------------------------------------------------------------- the continuation loop
WRITE = "<tool>jq '.reminders += [\"milk\"]' notes.json > output</tool>"


def test_process_answer_runs_the_pending_call_and_continues(runner, notes):
    text = "I'll remember that. " + WRITE
    step = runner.process_answer(text, notes)
    assert step.continue_generation and step.rounds_used == 1
    assert step.prefix_text == ""
    assert step.result_text == f'\n{RESULT_MARKER}jq \'.reminders += ["milk"]\' notes.json > output】→ ✓ .reminders += ["milk"]\n'
    assert step.new_notes["reminders"] == ["call Bob", "milk"]
    # The next round sees the result and does not run the call again.
    text += step.result_text + "Done."
    again = runner.process_answer(text, step.new_notes)
    assert again.results == [] and not again.continue_generation and again.result_text == ""


def test_text_after_the_closing_tag_does_not_rerun_the_call(runner, notes):
    # The token that completed "</tool>" may carry more text (e.g. ">." ); the result
    # follows that, and the next round must still see the call as answered.
    text = "Noting. " + WRITE + "."
    step = runner.process_answer(text, notes)
    assert step.rounds_used == 1
    text += step.result_text + "Saved."
    assert runner.process_answer(text, step.new_notes).results == []


def test_process_answer_without_calls_finishes(runner, notes):
    step = runner.process_answer("Just an answer, <tool> mentioned but not used.", notes)
    assert not step.continue_generation and step.result_text == "" and step.new_notes is None


def test_process_answer_completes_a_stop_sequence_the_server_cut(runner, notes):
    step = runner.process_answer("Checking. <tool>jq '.topics' notes.json", notes, hit_stop=True)
    assert step.prefix_text == STOP_SEQUENCE
    assert step.results[0].message == '✓ {"cats":"like tuna"}' and step.continue_generation


def test_a_failed_call_still_continues_so_the_model_can_react(runner, notes):
    step = runner.process_answer("<tool>jq 'env' notes.json</tool>", notes)
    assert step.continue_generation and step.new_notes is None
    assert "❌ env is not allowed" in step.result_text


def test_at_most_max_rounds_calls_per_answer(runner):
    text, current = "", new_notes("t")
    for round_ in range(MAX_ROUNDS):
        text += f"Step {round_}. " + WRITE
        step = runner.process_answer(text, current)
        assert step.continue_generation and step.rounds_used == round_ + 1
        current = step.new_notes
        text += step.result_text
    assert current["reminders"] == ["milk"] * MAX_ROUNDS
    text += "One more. " + WRITE
    step = runner.process_answer(text, current)
    assert not step.continue_generation and step.new_notes is None
    assert "❌ tool limit reached: at most 5 calls per answer" in step.result_text


def test_several_calls_in_one_round_thread_the_notes(runner):
    text = WRITE + " and " + "<tool>jq '.reminders | length' notes.json</tool>"
    step = runner.process_answer(text, new_notes("t"))
    assert [r.message for r in step.results] == ['✓ .reminders += ["milk"]', "✓ 1"]
    assert step.rounds_used == 2 and step.continue_generation


def test_results_are_short_even_for_big_reads(runner, notes):
    notes["scratch"] = {f"k{i}": "x" * 50 for i in range(200)}
    step = runner.process_answer("<tool>jq '.' notes.json</tool>", notes)
    assert len(step.results[0].compact_text) <= tools.MAX_RESULT_CHARS
    assert step.results[0].compact_text.endswith("…")


def test_tool_prompt_teaches_the_syntax_the_parser_accepts():
    calls = find_calls(TOOL_PROMPT)
    assert len(calls) == 4 and all(c.error is None for c in calls)
    assert [c.write for c in calls] == [False, True, True, True]
    assert STOP_SEQUENCE in TOOL_PROMPT and "> output" in TOOL_PROMPT


def test_result_marker_detection():
    assert tools.looks_like_tool_result("\n⚙️【jq '.' notes.json】→ ✓ {}")
    assert not tools.looks_like_tool_result("ordinary text")


# ---------------------------------------------------------------- persistence
def test_notes_survive_reopening_the_store_and_export_import(runner, tmp_path):
    from halo_weave.store import ConversationStore
    from halo_weave.exchange.transfer import export_conversation, import_conversation

    path = tmp_path / "notes-test.sqlite"
    with ConversationStore.open(path) as store:
        assert store.load_tool_data(tools.NOTES_NAME) is None  # a new conversation has none yet
        step = runner.process_answer(
            "<tool>jq '.topics.tea = \"oolong, no sugar\" | .reminders += [\"ask about Lisbon\"]' "
            "notes.json > output</tool>",
            store.load_tool_data(tools.NOTES_NAME),
        )
        store.save_tool_data(tools.NOTES_NAME, step.new_notes)
    saved = step.new_notes

    with ConversationStore.open(path, create=False) as store:  # "restart"
        reopened = store.load_tool_data(tools.NOTES_NAME)
    assert reopened == saved
    read = runner.run(call("jq '.topics.tea' notes.json"), reopened)
    assert read.message == '✓ "oolong, no sugar"'

    exported = tmp_path / "export.json"
    export_conversation(path, exported)
    imported = import_conversation(exported, tmp_path / "imported")
    with ConversationStore.open(imported, create=False) as store:
        assert store.load_tool_data(tools.NOTES_NAME) == saved

"""The model's notes tool against deeply nested programs and results."""

from __future__ import annotations

import pytest

from halo_weave.tools import notebook as tools
from halo_weave.tools.json_depth import MAX_DEPTH, depth


@pytest.fixture(scope="module")
def runner():
    runner = tools.ToolRunner()
    yield runner
    runner.close()


def call(program: str, write: bool) -> tools.ToolCall:
    return tools.ToolCall(command=program, program=program, write=write, start=0, end=0)


@pytest.mark.parametrize("write", [False, True])
def test_600_deep_nesting_is_a_clear_error_not_a_crash(runner, write):
    notes = tools.new_notes("2026-01-01T00:00:00+00:00")
    program = (".user.deep = " if write else "") + "[" * 600 + "1" + "]" * 600
    result = runner.run(call(program, write), notes)
    assert not result.ok and result.new_notes is None
    assert f"nested more than {MAX_DEPTH} levels deep" in result.message
    if write:
        assert "notes unchanged" in result.message


def test_deep_string_interpolation_within_the_length_limit_runs(runner):
    program = '"\\(' * 399 + "1" + ')"' * 399  # 1,996 characters: the most the limit allows
    result = runner.run(call(program, False), None)
    assert result.ok and result.message == '✓ "1"'


def test_notes_at_the_depth_limit_are_written(runner):
    notes = tools.new_notes("2026-01-01T00:00:00+00:00")
    program = ".user.deep = " + "[" * (MAX_DEPTH - 3) + "1" + "]" * (MAX_DEPTH - 3)
    result = runner.run(call(program, True), notes)
    assert result.ok and depth(result.new_notes) == MAX_DEPTH - 1

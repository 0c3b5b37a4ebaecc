"""Every way a session can end leaves a saved cache the next start reads back: after a
branch made, after switching back to another branch, after flipping an answer's version.
The real window, server, model and embedder; the app is closed and started again on the
same data folder, and another client's chat takes the server's cache meanwhile, as a
restart's empty cache would be."""

from __future__ import annotations

import pytest

from halo_weave.kobold_client import KoboldClient
from test_app import TURN_TIMEOUT_MS, make_app  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow


def _warmed(app) -> dict:
    """The next warm-up's answer (after a switch or a flip), once it has ended."""
    c = app.controller
    app.qtbot.waitUntil(lambda: c.ahead.last_warm_up is not None and not c.ahead.warming_up,
                        timeout=TURN_TIMEOUT_MS)
    return c.ahead.last_warm_up


def _change_and_wait_warm(app, act) -> dict:
    c = app.controller
    before = c.ahead.last_warm_up
    act()
    app.qtbot.waitUntil(lambda: c.ahead.last_warm_up is not before and not c.ahead.warming_up,
                        timeout=TURN_TIMEOUT_MS)
    return c.ahead.last_warm_up


def _answered(app, act) -> None:
    c = app.controller
    with app.qtbot.wait_signal(c.signals.turn_finished, timeout=TURN_TIMEOUT_MS):
        assert act()
    app.qtbot.waitUntil(lambda: not c.gate.busy, timeout=10_000)


def _restart(app, make_app, server) -> dict:
    """Close the app, let another client's chat take the server's cache, start the app again
    (the last conversation opens); the warm-up's answer."""
    app.close()
    with KoboldClient(server.url) as other:
        other.model_info()
        other.conversation = "another-client"
        other.prepare([i for i, _ in other.tokenize("<|im_start|>user\n" + "Name three rivers. " * 30)])
    again = make_app(max_new_tokens=8).start()
    return again, _warmed(again)


def _read_back(warm: dict, context: int) -> None:
    # All but the last answer's closing framing (the server held it unread).
    assert warm["restored"] >= context - 4 and warm["ran"] <= 4, warm


def test_a_branch_made_then_left_for_the_first_is_read_back_at_the_next_start(make_app, qtbot, server):
    app = make_app(max_new_tokens=8).start()
    c = app.controller
    for question in ("Name a fruit.", "Name a river.", "Name a colour.", "Name a tree."):
        app.say(question)
    first_key = c.session.server.cache_key()
    second = list(c.conv.turns)[2]
    _answered(app, lambda: c.actions.edit_message(second, "Name a mountain."))
    assert c.session.server.cache_key() != first_key  # the branch's cache is kept apart

    edited, branch_context = list(c.conv.turns)[2], len(c.conv.live_input_ids())
    again, warm = _restart(app, make_app, server)  # the branch just made: read back
    _read_back(warm, branch_context)

    c = again.controller
    warm = _change_and_wait_warm(again, lambda: c.actions.switch_branch(edited, -1))
    assert c.session.server.cache_key() == first_key
    context = len(c.conv.live_input_ids())
    _read_back(warm, context)  # switching back reads the first branch's cache, not its tail

    again, warm = _restart(again, make_app, server)
    _read_back(warm, context)
    again.say("Thanks!")
    kv = again.controller.turn.last_done.raw["kv"]
    assert kv["rerun"] == 0 and kv["reused"] >= context and kv["appended"] < 20, kv


def test_a_flipped_answer_version_is_read_back_at_the_next_start(make_app, qtbot, server):
    app = make_app(max_new_tokens=24, temperature=1.0).start()
    c = app.controller
    app.say("Name a fruit.")
    app.say("Describe the sea in one sentence.")
    _answered(app, c.actions.regenerate)
    warm = _change_and_wait_warm(app, lambda: c.actions.show_answer_version(-1))
    context = len(c.conv.live_input_ids())
    assert warm["ran"] + warm["reused"] + warm["restored"] >= context - 4, warm  # the version shown, at the server

    again, warm = _restart(app, make_app, server)
    _read_back(warm, context)

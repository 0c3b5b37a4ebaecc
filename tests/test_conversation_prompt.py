"""Each conversation's own system prompt: kept in its file, the settings' one only the
default for new conversations, the notebook's instructions added only while the tool is
on; files from before (no prompt of their own) keep the one they were framed with.
Real SQLite files in ``tmp_path``; the pieces of a framed prompt are written as the
window writes them once the server has tokenized them."""

from __future__ import annotations

from halo_weave.session import ChatSession
from halo_weave.settings import Settings
from halo_weave.store import ConversationStore, new_conversation_path
from halo_weave.tools.notebook import TOOL_PROMPT


def _open(path, **settings) -> ChatSession:
    session = ChatSession(Settings.of(**settings))
    session.open(ConversationStore.open(path))
    return session


def _frame(session) -> None:
    """What the window does when the prompt the model should read is not the framed one."""
    if session.prompt.framed_text() is not None:
        prompt = session.prompt.effective()
        words = prompt.split(" ")
        session.prompt.apply(prompt, [(100 + i, (" " if i else "") + w) for i, w in enumerate(words)])


def test_a_conversation_keeps_its_own_prompt_when_the_default_changes(tmp_path):
    french = new_conversation_path(tmp_path)
    session = _open(french, system_prompt="You are a helpful assistant.")
    assert session.prompt.own() == "You are a helpful assistant.", "a new one starts with the default"
    session.prompt.set_own("You answer in French.")
    _frame(session)
    assert session.conv.system.text == "You answer in French."
    session.store.close()

    # The default changes: the conversation keeps its prompt, a new one takes the new default.
    again = _open(french, system_prompt="Be terse.")
    assert again.prompt.own() == "You answer in French."
    assert again.prompt.framed_text() is None, "nothing to frame again: the model reads the same prompt"
    again.store.close()
    fresh = _open(new_conversation_path(tmp_path), system_prompt="Be terse.")
    _frame(fresh)
    assert fresh.conv.system.text == "Be terse."
    fresh.store.close()


def test_the_notebook_instructions_follow_the_prompt_only_while_the_tool_is_on(tmp_path):
    path = new_conversation_path(tmp_path)
    session = _open(path, system_prompt="You are a helpful assistant.", notes_tool=True)
    _frame(session)
    assert session.conv.system.text.endswith(TOOL_PROMPT)
    session.store.close()
    off = _open(path, notes_tool=False)
    assert off.prompt.own() == "You are a helpful assistant."
    _frame(off)
    assert off.conv.system.text == "You are a helpful assistant.", "the instructions are gone"
    off.store.close()


def test_a_file_from_before_prompts_per_conversation_keeps_its_prompt(tmp_path):
    path = new_conversation_path(tmp_path)
    with ConversationStore.open(path) as store:  # as an older version left it: no prompt of its own
        conv = store.load(Settings())
        old = "Be brief.\n\n" + TOOL_PROMPT
        conv.set_system_prompt(old, [1, 2], ["Be", " brief."])
        store.save_system_prompt(conv)
        store.save_turn(conv, conv.add_turn("user", [5, 6], ["Hello", " there"]))
        assert store.get_meta("prompt") is None
    session = _open(path, system_prompt="You are a helpful assistant.", notes_tool=False)
    assert session.prompt.own() == "Be brief."
    assert session.prompt.effective() == "Be brief."
    session.store.close()


def test_an_export_carries_the_conversations_own_prompt(tmp_path):
    from halo_weave.exchange import transfer

    path = new_conversation_path(tmp_path)
    session = _open(path)
    session.prompt.set_own("You answer in French.")
    _frame(session)
    session.store.save_turn(session.conv, session.conv.add_turn("user", [5, 6], ["Bonjour", " !"]))
    session.store.close()
    exported = tmp_path / "french.json"
    transfer.export_conversation(path, exported)
    imported = transfer.import_conversation(exported, tmp_path / "elsewhere")
    again = _open(imported, system_prompt="Be terse.")
    assert again.prompt.own() == "You answer in French."
    assert again.prompt.framed_text() is None, "the model reads the prompt it read before the export"
    again.store.close()

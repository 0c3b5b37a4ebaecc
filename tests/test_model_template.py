"""The model's own chat template: rendered in a sandbox around sentinel messages, the
text between them becomes each role's framing; hostile or unrepresentable templates fall
back to a built-in one with a sentence saying why."""

from __future__ import annotations

import pytest

from halo_weave.backends import model_template
from halo_weave.backends.model_template import resolve
from halo_weave.core.chat_template import CHATML, LLAMA3

# Written for these tests in the shape of the templates the models publish.
QWEN25 = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if message.role != 'system' %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
LLAMA_3 = (
    "{{- bos_token }}{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}")
MISTRAL_INST = (
    "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}"
    "{%- set loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}{%- endif %}"
    "{{- bos_token }}{%- for message in loop_messages %}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant') }}{%- endif %}"
    "{%- if message['role'] == 'user' %}{%- if loop.first and system_message is defined %}"
    "{{- '[INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}"
    "{%- else %}{{- '[INST] ' + message['content'] + ' [/INST]' }}{%- endif %}"
    "{%- elif message['role'] == 'assistant' %}{{- ' ' + message['content'] | trim + eos_token }}{%- endif %}"
    "{%- endfor %}")
PHI3 = (
    "{% for message in messages %}{% if message['role'] == 'system' %}{{ '<|system|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% elif message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% elif message['role'] == 'assistant' %}{{ '<|assistant|>\\n' + message['content'] + '<|end|>\\n' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}")
GEMMA = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}")
DEEPSEEK = (
    "{% set ns = namespace(system='') %}{% for m in messages %}{% if m['role'] == 'system' %}"
    "{% set ns.system = m['content'] %}{% endif %}{% endfor %}{{ bos_token }}{{ ns.system }}"
    "{% for m in messages %}{% if m['role'] == 'user' %}{{ '<｜User｜>' + m['content'] }}"
    "{% elif m['role'] == 'assistant' %}{{ '<｜Assistant｜>' + m['content'] + '<｜end▁of▁sentence｜>' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<｜Assistant｜>' }}{% endif %}")


def framing(template) -> dict:
    return {role: (template.prefix_for(role), template.suffix_for(role)) for role in ("system", "user", "assistant")}


def test_a_chatml_template_gives_chatml_framing_from_the_model():
    used = resolve(QWEN25, origin="GGUF")
    assert used.problem == ""
    assert framing(used.template) == framing(CHATML)
    assert used.template.source == "from GGUF"
    assert used.template.stops == CHATML.stops, "the built-in it equals, by name and stop strings"
    assert used.words == "Template: ChatML (from GGUF)"


def test_llama3_framing_matches_the_built_in_one():
    used = resolve(LLAMA_3, origin="llama-server /props")
    assert framing(used.template) == framing(LLAMA3)
    assert used.template.name == "llama3" and used.template.stops[0] == "<|eot_id|>"


def test_mistral_without_a_system_turn_frames_the_system_prompt_as_an_acknowledged_message():
    used = resolve(MISTRAL_INST, eos_token="</s>")
    t = used.template
    assert used.problem == ""
    assert t.prefix_for("user") == "[INST] " and t.suffix_for("user") == " [/INST]"
    assert t.prefix_for("assistant") == " " and t.suffix_for("assistant") == "</s>"
    assert t.wrap("system", "Be brief.") == "[INST] Be brief. [/INST] Understood.</s>"
    assert set(t.stops) >= {"</s>", "[INST]"}


def test_phi3_end_of_sequence_after_the_last_message_is_not_framing():
    used = resolve(PHI3, eos_token="<|endoftext|>", origin="GGUF")
    t = used.template
    assert used.words == "Template: The model's own (from GGUF)"
    assert t.stops == ("<|end|>", "<|user|>", "<|endoftext|>")
    assert framing(t) == {"system": ("<|system|>\n", "<|end|>\n"), "user": ("<|user|>\n", "<|end|>\n"),
                          "assistant": ("<|assistant|>\n", "<|end|>\n")}


def test_gemma_refusing_a_system_role_gets_it_as_a_user_turn():
    t = resolve(GEMMA, bos_token="").template
    assert t.prefix_for("assistant") == "<start_of_turn>model\n"
    assert t.wrap("user", "hi") == "<start_of_turn>user\nhi<end_of_turn>\n"
    assert t.wrap("system", "S") == ("<start_of_turn>user\nS<end_of_turn>\n<start_of_turn>model\n"
                                     "Understood.<end_of_turn>\n")


def test_deepseek_system_text_has_no_markers_of_its_own():
    t = resolve(DEEPSEEK).template
    assert framing(t) == {"system": ("", ""), "user": ("<｜User｜>", ""),
                          "assistant": ("<｜Assistant｜>", "<｜end▁of▁sentence｜>")}
    assert t.preview(system="S", user="U", answer="A") == "S<｜User｜>U<｜Assistant｜>A<｜end▁of▁sentence｜>"


def test_a_template_with_braces_formats_safely():
    braces = "{% for m in messages %}{{ '{' + m['role'] + '} ' + m['content'] + '\\n' }}{% endfor %}" \
             "{% if add_generation_prompt %}{{ '{assistant} ' }}{% endif %}"
    t = resolve(braces).template
    assert t.wrap("user", "x") == "{user} x\n"


@pytest.mark.parametrize("hostile, words", [
    ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "sandbox refused"),
    ("{{ 'x' * 100000000 }}", "too large"),
    ("{% for i in range(100000) %}{{ 'abcdefghij' * 100 }}{% endfor %}", "too large"),
    ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "recurses"),
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "was stopped"),
    ("{% for m in messages %}", "does not compile"),
])
def test_a_hostile_template_falls_back_with_a_sentence(hostile, words):
    used = resolve(hostile + "<|im_start|>")
    assert used.template.prefix_for("user") == CHATML.prefix_for("user")
    assert used.template.source == "built-in fallback"
    assert words in used.problem and "Using the built-in ChatML template instead" in used.problem


def test_a_template_that_rewrites_messages_falls_back():
    upper = "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] | upper + '<|im_end|>\\n' }}{% endfor %}"
    used = resolve(upper)
    assert used.template.label == "ChatML" and "appear once" in used.problem


def test_a_template_that_frames_one_turn_apart_falls_back():
    first = ("{% for m in messages %}{% if loop.index0 == 3 %}{{ '### first\\n' }}{% endif %}"
             "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
             "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    used = resolve(first)
    assert used.problem and used.template.source == "built-in fallback"


def test_ollama_go_templates_are_matched_by_markers_not_run():
    go = "{{- if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}<|im_start|>user\n{{ .Prompt }}"
    used = resolve(go, origin="Ollama /api/show")
    assert used.template.label == "ChatML"
    assert "Go template" in used.template.source


def test_no_published_template_and_a_choice():
    assert resolve(None, origin="LM Studio").template.source == "built-in fallback: LM Studio publishes no template"
    chosen = resolve(QWEN25, "llama3").template
    assert chosen.label == "Llama 3" and chosen.source == "chosen in Settings"


def test_the_renderer_runs_once_per_template_text():
    model_template._cache.clear()
    resolve(QWEN25)
    assert len(model_template._cache) == 1
    resolve(QWEN25)
    assert len(model_template._cache) == 1


def test_a_template_without_a_generation_prompt_takes_the_opening_from_past_answers():
    bare = "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    used = resolve(bare)
    assert used.problem == "" and framing(used.template) == framing(CHATML)


def test_the_same_template_from_two_servers_names_each():
    assert resolve(QWEN25, origin="GGUF").words == "Template: ChatML (from GGUF)"
    assert resolve(QWEN25, origin="llama-server /props").words == "Template: ChatML (from llama-server /props)"

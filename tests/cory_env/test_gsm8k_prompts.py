"""GSM8K prompts: plain and chat-template pioneer / observer templates, brace escaping, env compatibility."""

from __future__ import annotations

import copy

import pytest

from cory_env.tasks import gsm8k_prompts
from cory_env.tasks.gsm8k_prompts import build_observer_template, build_pioneer_template

SIMPLE_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
# A template emitting literal braces, e.g. a JSON-ish system header.
BRACE_CHAT_TEMPLATE = "{{ '{\"system\": 1}' }}\n" + SIMPLE_CHAT_TEMPLATE


@pytest.fixture()
def chat_tok(tiny_tok):
    tok = copy.deepcopy(tiny_tok)
    tok.chat_template = SIMPLE_CHAT_TEMPLATE
    return tok


def test_plain_pioneer_template(tiny_tok):
    template = build_pioneer_template(tiny_tok)
    text = template.format(query="How many?")
    assert text.endswith("Question: How many?\nAnswer:")
    assert gsm8k_prompts.ONE_SHOT_QUESTION in text and "The answer is 12." in text
    assert template.count("{query}") == 1
    zero_shot = build_pioneer_template(tiny_tok, one_shot=False).format(query="How many?")
    assert gsm8k_prompts.ONE_SHOT_QUESTION not in zero_shot and zero_shot.startswith(gsm8k_prompts.DEFAULT_INSTRUCTION)


def test_plain_observer_template(tiny_tok):
    template = build_observer_template(tiny_tok)
    text = template.format(query="How many?", response="3 + 4 = 7. The answer is 7.")
    assert text.index("Question: How many?") < text.index("Reference solution: 3 + 4 = 7.") < text.index("Answer:")
    assert text.endswith("Answer:")


def test_chat_templates_use_the_tokenizer_template(chat_tok):
    pioneer = build_pioneer_template(chat_tok).format(query="How many?")
    assert pioneer.startswith("<|user|>") and pioneer.endswith("<|user|>Question: How many?<|end|>\n<|assistant|>")
    assert f"<|assistant|>{gsm8k_prompts.ONE_SHOT_ANSWER}<|end|>" in pioneer
    observer = build_observer_template(chat_tok).format(query="Q?", response="R.")
    assert observer.endswith("Question: Q?\n\nReference solution: R.<|end|>\n<|assistant|>")


def test_literal_braces_survive_format(tiny_tok, chat_tok):
    brace_tok = copy.deepcopy(chat_tok)
    brace_tok.chat_template = BRACE_CHAT_TEMPLATE
    text = build_pioneer_template(brace_tok, instruction="Use {curly} braces.").format(query="Q?")
    assert text.startswith('{"system": 1}') and "Use {curly} braces." in text
    observer = build_observer_template(tiny_tok, instruction="a {b}").format(query="Q?", response="{x}")
    assert observer.startswith("a {b}") and "Reference solution: {x}" in observer


def test_use_chat_template_flags(tiny_tok, chat_tok):
    with pytest.raises(ValueError, match="no chat_template"):
        build_pioneer_template(tiny_tok, use_chat_template=True)
    plain = build_pioneer_template(chat_tok, use_chat_template=False)
    assert plain == build_pioneer_template(tiny_tok)


def test_chat_templates_are_valid_env_templates(chat_tok):
    from cory_env.prompts import PromptTemplate

    brace_tok = copy.deepcopy(chat_tok)
    brace_tok.chat_template = BRACE_CHAT_TEMPLATE
    for tok in (chat_tok, brace_tok):
        pioneer = PromptTemplate(build_pioneer_template(tok), tok)
        observer = PromptTemplate(build_observer_template(tok), tok, required=("query", "response"))
        query, response = tok.encode("Q?"), tok.encode("R.")
        assert tok.decode(pioneer.build(query)) == build_pioneer_template(tok).format(query="Q?")
        assert tok.decode(observer.build(query, response)) == build_observer_template(tok).format(
            query="Q?", response="R.")

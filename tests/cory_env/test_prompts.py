"""Knowledge-transfer templates: token-level splicing and placeholder checks."""

from __future__ import annotations

import pytest

from cory_env.prompts import PromptTemplate, parse_template
from cory_env.tasks.imdb import OBSERVER_TEMPLATE as IMDB_OBSERVER_TEMPLATE


def test_observer_prompt_splices_exact_token_ids(tiny_tok):
    tpl = PromptTemplate(IMDB_OBSERVER_TEMPLATE, tiny_tok, required=("query", "response"))
    query, response = [276, 355], [10, 11, 12]  # arbitrary ids: no decode/re-encode round trip
    head = tiny_tok.encode('I can make this sentence "', add_special_tokens=False)
    middle = tiny_tok.encode('" more positive: ', add_special_tokens=False)
    assert tpl.build(query, response) == head + query + response + middle + query
    assert (tpl.query_count, tpl.response_count) == (2, 1)
    assert tpl.literal_len == len(head) + len(middle)
    assert tpl.prompt_len(2, 3) == len(tpl.build(query, response))


def test_pioneer_template_and_literal_braces(tiny_tok):
    assert PromptTemplate("{query}", tiny_tok).build([1, 2]) == [1, 2]
    tpl = PromptTemplate("{{x}} {query}", tiny_tok)
    assert tiny_tok.decode(tpl.build(tiny_tok.encode("hi"))) == "{x} hi"


@pytest.mark.parametrize(("template", "match"), [
    ("{query", "not a valid format string"),
    ("{}", r"uses the placeholder \{\}"),
    ("{query:>5}{response}", "format spec or conversion"),
    ("{query!r}{response}", "format spec or conversion"),
    ("{response}", r"lacks the placeholder\(s\) \{query\}"),
])
def test_bad_templates(template, match):
    with pytest.raises(ValueError, match=match):
        parse_template(template, required=("query", "response"))


def test_template_must_be_text():
    with pytest.raises(TypeError, match="must be a str"):
        parse_template(None, required=("query",))

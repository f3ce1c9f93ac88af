"""Prompt templates for the two seats, spliced at the token level (knowledge transfer).

A template is a `str.format`-style string with the placeholders `{query}` and (observer only) `{response}`.
`PromptTemplate` tokenizes the literal text between placeholders once (``add_special_tokens=False``) and builds
each prompt by concatenating those ids with the query's and the pioneer response's *exact* token ids. So the
observer's prompt ends with exactly the query tokens the pioneer saw, and contains exactly the pioneer's tokens
(no decode/re-encode round trip, which can merge or split tokens at the boundaries).

Source: CORY (arXiv 2410.06101) §3 "knowledge transfer"; the IMDB template is the official code's.

Example:
    >>> from agents.tiny import tiny_tokenizer
    >>> tok = tiny_tokenizer()
    >>> tpl = PromptTemplate(IMDB_OBSERVER_TEMPLATE, tok, required=("query", "response"))
    >>> q, a = tok.encode("The movie"), tok.encode(" was fine")
    >>> tok.decode(tpl.build(q, a))
    'I can make this sentence "The movie was fine" more positive: The movie'
"""

from __future__ import annotations

import string
from collections.abc import Sequence

__all__ = ["IMDB_OBSERVER_TEMPLATE", "OBSERVER_REQUIRED", "PIONEER_TEMPLATE", "PLACEHOLDERS", "PromptTemplate",
           "parse_template"]

#: The official code's IMDB knowledge-transfer template (paper §1 step 3): it ends with q, so the observer writes
#: its own continuation of q after reading the pioneer's.
IMDB_OBSERVER_TEMPLATE = 'I can make this sentence "{query}{response}" more positive: {query}'
#: Default pioneer template: the query alone.
PIONEER_TEMPLATE = "{query}"
#: Placeholders a template may use.
PLACEHOLDERS = ("query", "response")
#: Placeholders a knowledge-transfer (observer) template must use: the pioneer's answer. The query is optional, so
#: a task may keep it private to the pioneer (`cory_env.tasks.relay`).
OBSERVER_REQUIRED = ("response",)


def parse_template(template: str, *, required: Sequence[str], name: str = "template") -> list[tuple[str, str]]:
    """Split a template into (literal text, placeholder) pairs, checking its placeholders.

    Args:
        template: e.g. ``'I can make this sentence "{query}{response}" more positive: {query}'``. Literal braces
            are written ``{{`` and ``}}``.
        required: placeholders that must occur at least once, e.g. ``("query", "response")``.
        name: the template's name in error messages (e.g. the config field).

    Returns:
        ``[(literal, placeholder), ...]`` in order; ``placeholder`` is ``""`` after the trailing literal.

    Raises:
        TypeError: if `template` is not a str.
        ValueError: for an unknown or positional placeholder, a format spec/conversion, unbalanced braces, or a
            missing required placeholder.
    """
    if not isinstance(template, str):
        raise TypeError(f"{name} must be a str, got {type(template).__name__}: {template!r}")
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"{name} {template!r} is not a valid format string ({exc}); write literal braces as "
                         "'{{' and '}}'") from exc
    pairs: list[tuple[str, str]] = []
    for literal, field_name, spec, conversion in parts:
        if field_name is not None and field_name not in PLACEHOLDERS:
            raise ValueError(f"{name} {template!r} uses the placeholder {{{field_name}}}; only {{query}} and "
                             "{response} are allowed (write literal braces as '{{' and '}}')")
        if spec or conversion:
            raise ValueError(f"{name} {template!r}: placeholder {{{field_name}}} has a format spec or "
                             "conversion; remove it (placeholders are spliced as token ids)")
        pairs.append((literal, field_name or ""))
    used = {p for _, p in pairs}
    missing = [p for p in required if p not in used]
    if missing:
        placeholders = ", ".join("{" + p + "}" for p in missing)
        raise ValueError(f"{name} {template!r} lacks the placeholder(s) {placeholders}; add them, e.g. "
                         f"{IMDB_OBSERVER_TEMPLATE!r}")
    return pairs


class PromptTemplate:
    """A template whose literal segments are tokenized once, filled by splicing token ids.

    Args:
        template: the template string (see `parse_template`).
        tokenizer: a Hugging Face tokenizer; literal segments are encoded with ``add_special_tokens=False``.
        required: placeholders that must occur.
        name: the template's name in error messages.

    Raises:
        TypeError, ValueError: from `parse_template`.
    """

    def __init__(self, template: str, tokenizer, *, required: Sequence[str] = ("query",),
                 name: str = "template") -> None:
        pairs = parse_template(template, required=required, name=name)
        self.template = template
        self.name = name
        segments: list[tuple[int, ...] | str] = []
        for literal, placeholder in pairs:
            if literal:
                segments.append(tuple(tokenizer.encode(literal, add_special_tokens=False)))
            if placeholder:
                segments.append(placeholder)
        self._segments = tuple(segments)
        #: Number of tokens of literal text (excluding placeholders).
        self.literal_len = sum(len(s) for s in segments if isinstance(s, tuple))
        #: Occurrences of {query} in the template.
        self.query_count = sum(1 for s in segments if s == "query")
        #: Occurrences of {response} in the template.
        self.response_count = sum(1 for s in segments if s == "response")

    def prompt_len(self, query_len: int, response_len: int = 0) -> int:
        """Length in tokens of the built prompt for a query of `query_len` and a response of `response_len`."""
        return self.literal_len + self.query_count * query_len + self.response_count * response_len

    def build(self, query_ids: Sequence[int], response_ids: Sequence[int] = ()) -> list[int]:
        """Fill the template with token ids.

        Args:
            query_ids: the query's token ids (Q,).
            response_ids: the pioneer's response ids without its trailing EOS (T,); ignored when the template has
                no {response}.

        Returns:
            The prompt's token ids, length ``prompt_len(Q, T)``.
        """
        out: list[int] = []
        for seg in self._segments:
            if seg == "query":
                out.extend(query_ids)
            elif seg == "response":
                out.extend(response_ids)
            else:
                out.extend(seg)
        return out

    def __repr__(self) -> str:
        return f"PromptTemplate({self.template!r})"

"""Prompt templates of the seats, spliced at the token level (knowledge transfer).

A template is a `str.format`-style string with the placeholders `{query}`, `{response}` (the responses of the seats it
reads, concatenated in seat order) and `{<seat name>}` (one read seat's response); which a seat's template must use is
the seating's rule (`cory_env.seating.check_template`). `PromptTemplate` tokenizes the literal text between placeholders
once (``add_special_tokens=False``) and builds each prompt by concatenating those ids with the query's and the read
responses' *exact* token ids. So the observer's prompt ends with exactly the query tokens the pioneer saw, and contains
exactly the pioneer's tokens (no decode/re-encode round trip, which can merge or split tokens at the boundaries).

Source: CORY (arXiv 2410.06101) §3 "knowledge transfer". Each task brings its templates (`cory_env.tasks`).

Example:
    >>> from agents.tiny import tiny_tokenizer
    >>> tok = tiny_tokenizer()
    >>> tpl = PromptTemplate(EXAMPLE_OBSERVER_TEMPLATE, tok, required=("query", "response"))
    >>> q, a = tok.encode("The movie"), tok.encode(" was fine")
    >>> tok.decode(tpl.build(q, a))
    'Read "The movie was fine", then answer: The movie'
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence

__all__ = ["EXAMPLE_OBSERVER_TEMPLATE", "OBSERVER_REQUIRED", "PIONEER_TEMPLATE", "PLACEHOLDERS", "PromptTemplate",
           "parse_template"]

#: An example knowledge-transfer template, for messages (each task has its own: `cory_env.tasks.imdb`'s is the
#: official code's).
EXAMPLE_OBSERVER_TEMPLATE = 'Read "{query}{response}", then answer: {query}'
#: Default pioneer template: the query alone.
PIONEER_TEMPLATE = "{query}"
#: Placeholders every template may use (plus the names of the seats it reads).
PLACEHOLDERS = ("query", "response")
#: Placeholders a knowledge-transfer (observer) template must use: the query and the earlier seats' answers.
OBSERVER_REQUIRED = ("query", "response")


def parse_template(template: str, *, required: Sequence[str], name: str = "template",
                   extra: Sequence[str] = ()) -> list[tuple[str, str]]:
    """Split a template into (literal text, placeholder) pairs, checking its placeholders.

    Args:
        template: e.g. ``'I can make this sentence "{query}{response}" more positive: {query}'``. Literal braces
            are written ``{{`` and ``}}``.
        required: placeholders that must occur at least once, e.g. ``("query", "response")``.
        name: the template's name in error messages (e.g. the config field).
        extra: further allowed placeholders (the names of the seats the template's seat reads).

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
        if field_name is not None and field_name not in PLACEHOLDERS and field_name not in extra:
            allowed = ", ".join("{" + p + "}" for p in (*PLACEHOLDERS, *extra))
            raise ValueError(f"{name} {template!r} uses the placeholder {{{field_name}}}; only {allowed} are allowed "
                             "here (a seat's name only for a seat it reads; write literal braces as '{{' and '}}')")
        if spec or conversion:
            raise ValueError(f"{name} {template!r}: placeholder {{{field_name}}} has a format spec or "
                             "conversion; remove it (placeholders are spliced as token ids)")
        pairs.append((literal, field_name or ""))
    used = {p for _, p in pairs}
    missing = [p for p in required if p not in used]
    if missing:
        placeholders = ", ".join("{" + p + "}" for p in missing)
        raise ValueError(f"{name} {template!r} lacks the placeholder(s) {placeholders}; add them, e.g. "
                         f"{EXAMPLE_OBSERVER_TEMPLATE!r}")
    return pairs


class PromptTemplate:
    """A template whose literal segments are tokenized once, filled by splicing token ids.

    Args:
        template: the template string (see `parse_template`).
        tokenizer: a Hugging Face tokenizer; literal segments are encoded with ``add_special_tokens=False``.
        required: placeholders that must occur.
        reads: the seats whose responses the template may show by name (``{pioneer}``); ``{response}`` stands for
            all of them, concatenated in this order.
        name: the template's name in error messages.

    Raises:
        TypeError, ValueError: from `parse_template`.
    """

    def __init__(self, template: str, tokenizer, *, required: Sequence[str] = ("query",), reads: Sequence[str] = (),
                 name: str = "template") -> None:
        pairs = parse_template(template, required=required, name=name, extra=reads)
        self.template = template
        self.name = name
        self.reads = tuple(reads)
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
        #: Responses the built prompt holds: each {response} holds one per read seat (one when `reads` is empty),
        #: each {<seat>} one.
        self.response_slots = self.response_count * max(1, len(self.reads)) + sum(
            1 for s in segments if isinstance(s, str) and s not in PLACEHOLDERS)

    def prompt_len(self, query_len: int, response_len: int = 0) -> int:
        """Length in tokens of the built prompt for a query of `query_len` tokens and responses of `response_len`
        tokens each."""
        return self.literal_len + self.query_count * query_len + self.response_slots * response_len

    def build(self, query_ids: Sequence[int], response_ids: Sequence[int] = (), *,
              seat_responses: Mapping[str, Sequence[int]] | None = None) -> list[int]:
        """Fill the template with token ids.

        Args:
            query_ids: the query's token ids (Q,).
            response_ids: what {response} holds: the read seats' responses, concatenated, each without its trailing
                EOS; ignored when the template has no {response}.
            seat_responses: read seat -> its response ids (without EOS), for {<seat>} placeholders.

        Returns:
            The prompt's token ids.
        """
        out: list[int] = []
        for seg in self._segments:
            if seg == "query":
                out.extend(query_ids)
            elif seg == "response":
                out.extend(response_ids)
            elif isinstance(seg, str):
                out.extend(seat_responses[seg])
            else:
                out.extend(seg)
        return out

    def __repr__(self) -> str:
        return f"PromptTemplate({self.template!r})"

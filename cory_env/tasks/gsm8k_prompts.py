"""GSM8K prompts: the pioneer's (1-shot) and the observer's knowledge-transfer templates.

The pioneer gets an instruction, an optional 1-shot worked example in the authors' evaluation format
(`Question: ... Answer: ...`) and the question; the observer gets the question and the pioneer's solution as a
reference that may be wrong (our wording: the paper does not publish its GSM8K template, docs/paper.md §1). With a
tokenizer chat template the same content is rendered as chat turns. Templates are `str.format`-style strings with
`{query}` (and `{response}`) placeholders, the form `cory_env.prompts.PromptTemplate` splices at token level.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DEFAULT_INSTRUCTION", "DEFAULT_OBSERVER_INSTRUCTION", "ONE_SHOT_ANSWER", "ONE_SHOT_QUESTION",
           "build_observer_template", "build_pioneer_template"]

DEFAULT_INSTRUCTION = (
    'Solve the math problem step by step. Finish with a line "The answer is N." where N is a number.'
)
DEFAULT_OBSERVER_INSTRUCTION = (
    "Solve the math problem step by step. A reference solution written by another student is given; it may contain "
    'mistakes, so check it and write your own solution. Finish with a line "The answer is N." where N is a number.'
)
#: Our own 1-shot example, in the format of the authors' evaluation prompt
#: (``Question: ... Answer: ...``).
ONE_SHOT_QUESTION = ("A baker makes 3 trays of 12 cookies each. He sells 20 cookies and gives 4 to a friend. "
                     "How many cookies does he have left?")
ONE_SHOT_ANSWER = (
    "The baker makes 3 * 12 = 36 cookies. He sells 20 and gives away 4, so 20 + 4 = 24 cookies are gone. "
    "He has 36 - 24 = 12 cookies left. The answer is 12."
)

# Sentinels stand for the placeholders while a chat template renders (they contain no braces).
_QUERY_SENTINEL = "\x00CORY_QUERY\x00"
_RESPONSE_SENTINEL = "\x00CORY_RESPONSE\x00"


def _escape(text: str) -> str:
    """Double literal braces so `str.format`-style placeholders survive."""
    return text.replace("{", "{{").replace("}", "}}")


def _finish(rendered: str) -> str:
    return _escape(rendered).replace(_QUERY_SENTINEL, "{query}").replace(_RESPONSE_SENTINEL, "{response}")


def _render(tokenizer: Any, messages: list[dict[str, str]], plain: str, use_chat_template: bool | None) -> str:
    has_template = getattr(tokenizer, "chat_template", None) is not None
    if use_chat_template is None:
        use_chat_template = has_template
    if use_chat_template and not has_template:
        raise ValueError("use_chat_template=True but the tokenizer has no chat_template; pass None or False")
    if not use_chat_template:
        return _finish(plain)
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    for sentinel in (_QUERY_SENTINEL, _RESPONSE_SENTINEL):
        if any(sentinel in m["content"] for m in messages) and rendered.count(sentinel) != 1:
            raise ValueError(f"the chat template dropped or repeated the {sentinel.strip(chr(0))} placeholder")
    return _finish(rendered)


def build_pioneer_template(tokenizer: Any, *, one_shot: bool = True, instruction: str = DEFAULT_INSTRUCTION,
                           use_chat_template: bool | None = None) -> str:
    """The pioneer's prompt template, with a `{query}` placeholder for the question.

    Plain text (no chat template): the instruction, the optional 1-shot `Question: ... Answer: ...` example, then
    `Question: {query}` and `Answer:`. With a chat template: the same as user/assistant turns, rendered with
    `add_generation_prompt=True`. Literal braces elsewhere are doubled, so `template.format(query=...)` is safe.

    Args:
        tokenizer: a Hugging Face tokenizer; its `chat_template` (if any) is used.
        one_shot: include the 1-shot worked example (as in the authors' evaluation prompt).
        instruction: the task instruction placed first.
        use_chat_template: None = use it when the tokenizer has one; True = require it; False = plain text.

    Raises:
        ValueError: if `use_chat_template` is True and the tokenizer has no chat template.
    """
    question = f"Question: {_QUERY_SENTINEL}"
    if one_shot:
        example_q = f"Question: {ONE_SHOT_QUESTION}"
        plain = f"{instruction}\n\n{example_q}\nAnswer: {ONE_SHOT_ANSWER}\n\n{question}\nAnswer:"
        messages = [{"role": "user", "content": f"{instruction}\n\n{example_q}"},
                    {"role": "assistant", "content": ONE_SHOT_ANSWER}, {"role": "user", "content": question}]
    else:
        plain = f"{instruction}\n\n{question}\nAnswer:"
        messages = [{"role": "user", "content": f"{instruction}\n\n{question}"}]
    return _render(tokenizer, messages, plain, use_chat_template)


def build_observer_template(tokenizer: Any, *, instruction: str = DEFAULT_OBSERVER_INSTRUCTION,
                            use_chat_template: bool | None = None) -> str:
    """The observer's knowledge-transfer template, with `{query}` and `{response}` (the pioneer's answer).

    Our own wording (the paper does not publish its GSM8K template): the instruction, the question, the pioneer's
    solution as a reference that may be wrong, then `Answer:`. No 1-shot example (the reference shows the format and
    keeps the prompt short). Braces are escaped as in `build_pioneer_template`.

    Arguments as `build_pioneer_template`'s (`instruction`: the task instruction placed first).

    Raises:
        ValueError: if `use_chat_template` is True and the tokenizer has no chat template.
    """
    body = f"{instruction}\n\nQuestion: {_QUERY_SENTINEL}\n\nReference solution: {_RESPONSE_SENTINEL}"
    plain = f"{body}\n\nAnswer:"
    messages = [{"role": "user", "content": body}]
    return _render(tokenizer, messages, plain, use_chat_template)

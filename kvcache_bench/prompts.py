"""Task prompts at parity with LongBench, and turning an example into context and question token ids.

The prompt is split in two: the *context part* (everything up to where the question appears) and the
*question part*. In question-aware mode the press sees both; in question-agnostic mode it compresses
the context part alone and the question part is appended afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

# LongBench's config/dataset2prompt.json and dataset2maxlen.json (THUDM/LongBench, v1).
LONGBENCH_PROMPTS = {
    "qasper": (
        "You are given a scientific article and a question. Answer the question as concisely as you can, "
        "using a single phrase or sentence if possible. If the question cannot be answered based on the "
        'information in the article, write "unanswerable". If the question is a yes/no question, answer '
        '"yes", "no", or "unanswerable". Do not provide any explanation.\n\nArticle: {context}\n\n Answer the '
        "question based on the above article as concisely as you can, using a single phrase or sentence if "
        'possible. If the question cannot be answered based on the information in the article, write '
        '"unanswerable". If the question is a yes/no question, answer "yes", "no", or "unanswerable". Do not '
        "provide any explanation.\n\nQuestion: {input}\n\nAnswer:"
    ),
}
LONGBENCH_MAX_NEW_TOKENS = {"qasper": 128}

# The offline demo's synthetic task: a qasper-style instruction over a synthetic document.
SYNTHETIC_PROMPTS = {
    "synthetic_qa": "read the document and answer the question .\n\ndocument : {context}\n\nquestion : {input}\nanswer :",
}
SYNTHETIC_MAX_NEW_TOKENS = {"synthetic_qa": 8}

PROMPTS = {**LONGBENCH_PROMPTS, **SYNTHETIC_PROMPTS}
MAX_NEW_TOKENS = {**LONGBENCH_MAX_NEW_TOKENS, **SYNTHETIC_MAX_NEW_TOKENS}
KNOWN_TASKS = frozenset(PROMPTS)


@dataclass(frozen=True)
class PromptTokens:
    context_ids: list[int]  # compressed by the press in both question modes
    question_ids: list[int]  # seen by the press only in question-aware mode
    truncated: bool
    original_tokens: int


def max_new_tokens_for(task: str, override: int | None = None) -> int:
    return int(override) if override else MAX_NEW_TOKENS[task]


def split_prompt(task: str, context: str, question: str) -> tuple[str, str]:
    """(context part, question part) of the task's prompt; their concatenation is the full prompt."""
    template = PROMPTS[task]
    if "{input}" in template:
        head, tail = template.split("{input}", 1)
        return head.format(context=context), question + tail.format(context=context)
    return template.format(context=context), ""


def truncate_middle(ids: list[int], max_tokens: int) -> list[int]:
    """LongBench's truncation: keep the first and the last half of the budget, drop the middle."""
    if len(ids) <= max_tokens:
        return ids
    half = max_tokens // 2
    return ids[:half] + ids[len(ids) - (max_tokens - half) :]


def build_prompt_tokens(tokenizer, task: str, context: str, question: str, max_context_tokens: int) -> PromptTokens:
    """Tokenise an example, wrapping it in the model's chat template when it has one.

    The chat template is applied to the whole user turn and then cut where the question begins, so
    both question modes see byte-identical prompts. Over-long prompts lose the middle of the context.
    """
    context_text, question_text = split_prompt(task, context, question)
    if getattr(tokenizer, "chat_template", None):
        marker = "\u2063KVBENCH_SPLIT\u2063"
        wrapped = tokenizer.apply_chat_template(
            [{"role": "user", "content": context_text + marker + question_text}],
            add_generation_prompt=True,
            tokenize=False,
        )
        context_text, question_text = wrapped.split(marker)
        add_bos = False  # the template already carries it
    else:
        add_bos = tokenizer.bos_token is not None
    context_ids = tokenizer.encode(context_text, add_special_tokens=False)
    if add_bos:
        context_ids = [tokenizer.bos_token_id] + context_ids
    question_ids = tokenizer.encode(question_text, add_special_tokens=False) if question_text else []
    original = len(context_ids) + len(question_ids)
    budget = max_context_tokens - len(question_ids)
    if budget < 2:
        raise ValueError(f"max_context_tokens={max_context_tokens} leaves no room for the context")
    truncated = len(context_ids) > budget
    return PromptTokens(truncate_middle(context_ids, budget), question_ids, truncated, original)

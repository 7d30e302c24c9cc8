"""Task prompts at parity with LongBench (and RULER), and turning an example into context and question token ids.

The prompt is split in two: the *context part* (everything up to where the question appears) and the
*question part*. In question-aware mode the press sees both (but the prompt's last token); in
question-agnostic mode it compresses the context part alone and the question part is appended afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

# LongBench v1's config/dataset2prompt.json and dataset2maxlen.json (THUDM/LongBench), English tasks.
# Kept verbatim, quirks included ("asconcisely", the space before " Answer" in qasper, the trailing
# spaces after "is:"), because a changed prompt is a different benchmark.
LONGBENCH_PROMPTS = {
    "narrativeqa": (
        "You are given a story, which can be either a novel or a movie script, and a question. Answer the question "
        "asconcisely as you can, using a single phrase if possible. Do not provide any explanation.\n\nStory: "
        "{context}\n\nNow, answer the question based on the story asconcisely as you can, using a single phrase if "
        "possible. Do not provide any explanation.\n\nQuestion: {input}\n\nAnswer:"
    ),
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
    "multifieldqa_en": (
        "Read the following text and answer briefly.\n\n{context}\n\nNow, answer the following question based on "
        "the above text, only give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:"
    ),
    "hotpotqa": (
        "Answer the question based on the given passages. Only give me the answer and do not output any other "
        "words.\n\nThe following are given passages.\n{context}\n\nAnswer the question based on the given passages. "
        "Only give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:"
    ),
    "gov_report": (
        "You are given a report by a government agency. Write a one-page summary of the report.\n\nReport:\n"
        "{context}\n\nNow, write a one-page summary of the report.\n\nSummary:"
    ),
    "qmsum": (
        "You are given a meeting transcript and a query containing a question or instruction. Answer the query in "
        "one or more sentences.\n\nTranscript:\n{context}\n\nNow, answer the query based on the above meeting "
        "transcript in one or more sentences.\n\nQuery: {input}\nAnswer:"
    ),
    "multi_news": (
        "You are given several news passages. Write a one-page summary of all news. \n\nNews:\n{context}\n\n"
        "Now, write a one-page summary of all the news.\n\nSummary:"
    ),
    "trec": "Please determine the type of the question below. Here are some examples of questions.\n\n{context}\n{input}",
    "triviaqa": (
        "Answer the question based on the given passage. Only give me the answer and do not output any other "
        "words. The following are some examples.\n\n{context}\n\n{input}"
    ),
    "samsum": "Summarize the dialogue into a few short sentences. The following are some examples.\n\n{context}\n\n{input}",
    "passage_count": (
        "There are some paragraphs below sourced from Wikipedia. Some of them may be duplicates. Please carefully "
        "read these paragraphs and determine how many unique paragraphs there are after removing duplicates. In "
        "other words, how many non-repeating paragraphs are there in total?\n\n{context}\n\nPlease enter the final "
        "count of unique paragraphs after removing duplicates. The output format should only contain the number, "
        "such as 1, 2, 3, and so on.\n\nThe final answer is: "
    ),
    "passage_retrieval_en": (
        "Here are 30 paragraphs from Wikipedia, along with an abstract. Please determine which paragraph the "
        "abstract is from.\n\n{context}\n\nThe following is an abstract.\n\n{input}\n\nPlease enter the number of "
        'the paragraph that the abstract is from. The answer format must be like "Paragraph 1", "Paragraph 2", '
        "etc.\n\nThe answer is: "
    ),
    "lcc": "Please complete the code given below. \n{context}Next line of code:\n",
    "repobench-p": "Please complete the code given below. \n{context}{input}Next line of code:\n",
}
# 2wikimqa and musique share hotpotqa's template in LongBench.
LONGBENCH_PROMPTS["2wikimqa"] = LONGBENCH_PROMPTS["hotpotqa"]
LONGBENCH_PROMPTS["musique"] = LONGBENCH_PROMPTS["hotpotqa"]

LONGBENCH_MAX_NEW_TOKENS = {
    "narrativeqa": 128,
    "qasper": 128,
    "multifieldqa_en": 64,
    "hotpotqa": 32,
    "2wikimqa": 32,
    "musique": 32,
    "gov_report": 512,
    "qmsum": 512,
    "multi_news": 512,
    "trec": 64,
    "triviaqa": 32,
    "samsum": 128,
    "passage_count": 32,
    "passage_retrieval_en": 32,
    "lcc": 64,
    "repobench-p": 64,
}
LONGBENCH_TASKS = tuple(LONGBENCH_MAX_NEW_TOKENS)

# LongBench's pred.py sends these few-shot and code tasks to the model without the chat template
# (the examples in the context already show the answer format).
RAW_PROMPT_TASKS = frozenset({"trec", "triviaqa", "samsum", "lcc", "repobench-p"})
# ... and stops samsum at the first newline after at least one new token (its few-shot answers are one line).
NEWLINE_STOP_TASKS = frozenset({"samsum"})

# RULER's 13 subtasks as kvpress's evaluation stores them (dataset simonjegou/ruler): the row's
# context and question concatenate to RULER's input; answer_prefix starts the model's answer.
RULER_MAX_NEW_TOKENS = {
    "niah_single_1": 128,
    "niah_single_2": 128,
    "niah_single_3": 128,
    "niah_multikey_1": 128,
    "niah_multikey_2": 128,
    "niah_multikey_3": 128,
    "niah_multivalue": 128,
    "niah_multiquery": 128,
    "vt": 30,
    "cwe": 120,
    "fwe": 50,
    "qa_1": 32,
    "qa_2": 32,
}
RULER_TASKS = tuple(RULER_MAX_NEW_TOKENS)
RULER_PROMPTS = {task: "{context}{input}" for task in RULER_TASKS}

# The offline demo's synthetic task: a qasper-style instruction over a synthetic document.
SYNTHETIC_PROMPTS = {
    "synthetic_qa": "read the document and answer the question .\n\ndocument : {context}\n\nquestion : {input}\nanswer :",
}
SYNTHETIC_TASK = "synthetic_qa"  # the offline demo's task (kvcache_bench.data writes it; the canary trains on it)
SYNTHETIC_MAX_NEW_TOKENS = {SYNTHETIC_TASK: 8}

PROMPTS = {**LONGBENCH_PROMPTS, **RULER_PROMPTS, **SYNTHETIC_PROMPTS}
MAX_NEW_TOKENS = {**LONGBENCH_MAX_NEW_TOKENS, **RULER_MAX_NEW_TOKENS, **SYNTHETIC_MAX_NEW_TOKENS}
KNOWN_TASKS = frozenset(PROMPTS)


@dataclass(frozen=True)
class PromptTokens:
    context_ids: list[int]  # compressed by the press in both question modes
    question_ids: list[int]  # seen by the press only in question-aware mode
    truncated: bool
    original_tokens: int
    chat_template: bool = False

    @property
    def length(self) -> int:
        return len(self.context_ids) + len(self.question_ids)


def max_new_tokens_for(task: str, override: int | None = None) -> int:
    return int(override) if override else MAX_NEW_TOKENS[task]


def uses_chat_template(tokenizer, task: str) -> bool:
    return bool(getattr(tokenizer, "chat_template", None)) and task not in RAW_PROMPT_TASKS


def split_prompt(task: str, context: str, question: str) -> tuple[str, str]:
    """(context part, question part) of the task's prompt; their concatenation is the full prompt."""
    template = PROMPTS[task]
    if "{input}" in template:
        head, tail = template.split("{input}", 1)
        return head.format(context=context), question + tail.format(context=context)
    head, tail = template.split("{context}", 1)
    return head + context, tail


def truncate_middle(ids: list[int], max_tokens: int) -> list[int]:
    """LongBench's truncation: keep the first and the last half of the budget, drop the middle."""
    if len(ids) <= max_tokens:
        return ids
    half = max_tokens // 2
    return ids[:half] + ids[len(ids) - (max_tokens - half) :]


def build_prompt_tokens(
    tokenizer, task: str, context: str, question: str, max_context_tokens: int, answer_prefix: str = ""
) -> PromptTokens:
    """Tokenise an example, wrapping it in the model's chat template when it has one.

    The chat template is applied to the whole user turn and then cut where the question begins, so
    both question modes see byte-identical prompts. ``answer_prefix`` (RULER) opens the assistant's
    turn. Over-long prompts lose the middle of the context (LongBench cuts the middle of the whole
    prompt; the middle of the context is the same tokens whenever the context dominates, and the
    question and instructions are never cut).
    """
    context_text, question_text = split_prompt(task, context, question)
    chat = uses_chat_template(tokenizer, task)
    if chat:
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
    question_text += answer_prefix
    context_ids = tokenizer.encode(context_text, add_special_tokens=False)
    if add_bos:
        context_ids = [tokenizer.bos_token_id] + context_ids
    question_ids = tokenizer.encode(question_text, add_special_tokens=False) if question_text else []
    original = len(context_ids) + len(question_ids)
    budget = max_context_tokens - len(question_ids)
    if budget < 2:
        raise ValueError(f"max_context_tokens={max_context_tokens} leaves no room for the context")
    truncated = len(context_ids) > budget
    return PromptTokens(truncate_middle(context_ids, budget), question_ids, truncated, original, chat)


def extra_stop_ids(tokenizer, task: str) -> set[int]:
    """Task-specific stops beyond the model's end-of-turn tokens (LongBench stops samsum at a newline)."""
    if task in NEWLINE_STOP_TASKS:
        return set(tokenizer.encode("\n", add_special_tokens=False)[-1:])
    return set()

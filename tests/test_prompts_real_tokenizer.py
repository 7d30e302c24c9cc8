"""Prompts through a real byte-level BPE tokenizer with a chat template (SmolLM2-135M-Instruct's).

The spec is LongBench's pred.py and kvpress's pipeline, written out here step by step as the references:
the engine's prompt ids must equal tokenising the whole prompt once, truncation must be pred.py's, and the
press must never see the chat template's generation suffix.
"""

import copy

import pytest

from kvcache_bench.study.prompt_tokens import build_prompt_tokens, uses_chat_template
from kvcache_bench.study.prompts import LONGBENCH_PROMPTS, PROMPTS, RAW_PROMPT_TASKS, RULER_TASKS

ARTICLE = (
    "The committee met on Tuesday to review the budget. Dr. Alvarez proposed moving the archive to the "
    "north wing; the proposal passed 7-2.\n\nSection 2: Results\nAccuracy rose from 81.5% to 86.0% (see Table 3), "
    "while latency fell — remarkably — by a third.\n"
)
CODE = "import os\n\n\nclass Loader:\n    def __init__(self, root):\n        self.root = root\n\n    def files(self):\n        return os.listdir(self.root)\n"
QUESTION = "What did the committee decide about the archive?"
ANSWER_PREFIX = " Answer: The special magic word for Paris mentioned in the provided text is"


def example_for(task):
    if task in ("lcc", "repobench-p"):
        return CODE, "def load(path):\n    "
    return ARTICLE, QUESTION


def whole_prompt_ids(tokenizer, task, context, question, answer_prefix=""):
    """The reference: the whole prompt rendered and tokenised in ONE go, as pred.py and kvpress do."""
    raw = PROMPTS[task].format(context=context, input=question)
    if uses_chat_template(tokenizer, task):
        text = tokenizer.apply_chat_template([{"role": "user", "content": raw}], add_generation_prompt=True, tokenize=False)
        return tokenizer(text + answer_prefix, add_special_tokens=False)["input_ids"]
    return tokenizer(raw + answer_prefix)["input_ids"]


def pred_py_ids(tokenizer, task, context, question, max_length):
    """LongBench v1 pred.py's steps, verbatim in order: tokenise the raw prompt, keep the first and last
    int(max_length/2) tokens decoded, then the chat template (this project applies the model's own
    template, encoded without a second BOS as kvpress does)."""
    prompt = PROMPTS[task].format(context=context, input=question)
    tokenized_prompt = tokenizer(prompt, truncation=False)["input_ids"]
    if len(tokenized_prompt) > max_length:
        half = int(max_length / 2)
        prompt = tokenizer.decode(tokenized_prompt[:half], skip_special_tokens=True) + tokenizer.decode(
            tokenized_prompt[-half:], skip_special_tokens=True
        )
    if uses_chat_template(tokenizer, task):
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False)
        return tokenizer(prompt, add_special_tokens=False)["input_ids"]
    return tokenizer(prompt)["input_ids"]


@pytest.fixture(scope="module")
def raw_tokenizer(smollm2_tokenizer):
    """The same tokenizer without its chat template: the path of base models."""
    plain = copy.deepcopy(smollm2_tokenizer)
    plain.chat_template = None
    return plain


@pytest.mark.parametrize("task", sorted(LONGBENCH_PROMPTS) + sorted(RULER_TASKS))
@pytest.mark.parametrize("with_chat_template", [True, False], ids=["chat", "raw"])
def test_prompt_ids_equal_tokenising_the_whole_prompt(smollm2_tokenizer, raw_tokenizer, task, with_chat_template):
    tokenizer = smollm2_tokenizer if with_chat_template else raw_tokenizer
    context, question = example_for(task)
    prefix = ANSWER_PREFIX if task in RULER_TASKS else ""
    prompt = build_prompt_tokens(tokenizer, task, context, question, 100_000, answer_prefix=prefix)
    assert prompt.context_ids + prompt.question_ids == whole_prompt_ids(tokenizer, task, context, question, prefix)
    assert prompt.chat_template == (with_chat_template and task not in RAW_PROMPT_TASKS)
    assert not prompt.truncated and prompt.original_tokens == len(tokenizer(PROMPTS[task].format(context=context, input=question))["input_ids"])
    if "{input}" in PROMPTS[task]:  # question-agnostic compression never sees a piece of the question
        assert QUESTION.split()[0] not in tokenizer.decode(prompt.context_ids[-3:]) or task in ("lcc", "repobench-p")


def test_the_question_keeps_its_leading_space_after_question_colon(smollm2_tokenizer):
    prompt = build_prompt_tokens(smollm2_tokenizer, "qasper", ARTICLE, QUESTION, 100_000)
    # Tokenised in two pieces, "Question: " would end in a lone space token and "What" lose its space.
    assert smollm2_tokenizer.convert_ids_to_tokens(prompt.context_ids[-2:]) == ["Question", ":"]
    assert smollm2_tokenizer.convert_ids_to_tokens(prompt.question_ids[:1]) == ["ĠWhat"]


@pytest.mark.parametrize("task", ["qasper", "hotpotqa", "gov_report", "triviaqa", "lcc"])
def test_truncation_is_longbench_pred_py(smollm2_tokenizer, task):
    context, question = example_for(task)
    long_context = "\n".join([context] * 40)
    budget = 1000
    prompt = build_prompt_tokens(smollm2_tokenizer, task, long_context, question, budget)
    assert prompt.truncated
    assert prompt.original_tokens == len(smollm2_tokenizer(PROMPTS[task].format(context=long_context, input=question))["input_ids"])
    assert prompt.context_ids + prompt.question_ids == pred_py_ids(smollm2_tokenizer, task, long_context, question, budget)
    # the question and the instructions after it survive the cut whole
    tail = smollm2_tokenizer.decode(prompt.question_ids, skip_special_tokens=True)
    assert tail.lstrip().startswith(question.strip() if "{input}" in PROMPTS[task] else PROMPTS[task].split("{context}")[1].strip()[:20])


def test_the_generation_suffix_and_answer_prefix_are_held_back_never_the_users_words(smollm2_tokenizer):
    prompt = build_prompt_tokens(smollm2_tokenizer, "qasper", ARTICLE, QUESTION, 100_000)
    held_back = prompt.question_ids[-prompt.held_back_tokens :]
    assert smollm2_tokenizer.decode(held_back) == "<|im_end|>\n<|im_start|>assistant\n"
    assert smollm2_tokenizer.decode(prompt.question_ids[: -prompt.held_back_tokens]).endswith("Answer:")

    ruler = build_prompt_tokens(smollm2_tokenizer, "niah_single_1", ARTICLE, QUESTION, 100_000, answer_prefix=ANSWER_PREFIX)
    assert smollm2_tokenizer.decode(ruler.question_ids[-ruler.held_back_tokens :]) == (
        "<|im_end|>\n<|im_start|>assistant\n" + ANSWER_PREFIX
    )


def test_raw_prompts_hold_back_only_the_answer_prefix(raw_tokenizer):
    assert build_prompt_tokens(raw_tokenizer, "qasper", ARTICLE, QUESTION, 100_000).held_back_tokens == 0
    ruler = build_prompt_tokens(raw_tokenizer, "niah_single_1", ARTICLE, QUESTION, 100_000, answer_prefix=ANSWER_PREFIX)
    assert raw_tokenizer.decode(ruler.question_ids[-ruler.held_back_tokens :]) == ANSWER_PREFIX

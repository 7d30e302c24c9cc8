"""Prompts at parity with LongBench: its templates and lengths, chat template, middle truncation."""

import pytest

from kvcache_bench.data.demo_model import build_word_tokenizer
from kvcache_bench.data.synthetic import synthetic_vocabulary
from kvcache_bench.study.prompt_tokens import build_prompt_tokens, extra_stop_ids
from kvcache_bench.study.prompts import (
    LONGBENCH_MAX_NEW_TOKENS,
    LONGBENCH_PROMPTS,
    PROMPTS,
    RAW_PROMPT_TASKS,
    max_new_tokens_for,
    split_prompt,
)

CHAT_TEMPLATE = (
    "{% for m in messages %}<s> user : {{ m['content'] }} </s>{% endfor %}"
    "{% if add_generation_prompt %} assistant :{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer():
    return build_word_tokenizer(synthetic_vocabulary() + ["user", "assistant", "x", "y"])


@pytest.fixture(scope="module")
def chat_tokenizer():
    tokenizer = build_word_tokenizer(synthetic_vocabulary() + ["user", "assistant", "x", "y"])
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def test_every_english_longbench_task_has_its_template_and_length():
    assert set(LONGBENCH_PROMPTS) == set(LONGBENCH_MAX_NEW_TOKENS) == {
        "narrativeqa", "qasper", "multifieldqa_en", "hotpotqa", "2wikimqa", "musique", "gov_report", "qmsum",
        "multi_news", "trec", "triviaqa", "samsum", "passage_count", "passage_retrieval_en", "lcc", "repobench-p",
    }
    # LongBench's dataset2maxlen.json
    assert LONGBENCH_MAX_NEW_TOKENS == {
        "narrativeqa": 128, "qasper": 128, "multifieldqa_en": 64, "hotpotqa": 32, "2wikimqa": 32, "musique": 32,
        "gov_report": 512, "qmsum": 512, "multi_news": 512, "trec": 64, "triviaqa": 32, "samsum": 128,
        "passage_count": 32, "passage_retrieval_en": 32, "lcc": 64, "repobench-p": 64,
    }


def test_longbench_quirks_are_kept_verbatim():
    assert "Answer the question asconcisely as you can" in LONGBENCH_PROMPTS["narrativeqa"]
    assert "{context}\n\n Answer the question based on the above article" in LONGBENCH_PROMPTS["qasper"]
    assert 'write "unanswerable"' in LONGBENCH_PROMPTS["qasper"] and LONGBENCH_PROMPTS["qasper"].endswith("Answer:")
    assert LONGBENCH_PROMPTS["passage_count"].endswith("The final answer is: ")
    assert LONGBENCH_PROMPTS["lcc"] == "Please complete the code given below. \n{context}Next line of code:\n"
    assert max_new_tokens_for("qasper") == 128 and max_new_tokens_for("qasper", 16) == 16


@pytest.mark.parametrize("task", sorted(PROMPTS))
def test_context_part_and_question_part_make_the_whole_prompt(task):
    context_part, question_part = split_prompt(task, "CONTEXT", "QUESTION")
    assert context_part + question_part == PROMPTS[task].format(context="CONTEXT", input="QUESTION")
    assert "QUESTION" not in context_part  # question-agnostic compression must not see the question


def test_chat_template_wraps_the_turn_and_the_split_is_exact(chat_tokenizer):
    prompt = build_prompt_tokens(chat_tokenizer, "synthetic_qa", "the city is old .", "what is the founder of city ?", 10_000)
    full = chat_tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPTS["synthetic_qa"].format(context="the city is old .", input="what is the founder of city ?")}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert prompt.chat_template
    assert prompt.context_ids + prompt.question_ids == chat_tokenizer.encode(full, add_special_tokens=False)
    assert chat_tokenizer.decode(prompt.question_ids).endswith("assistant :")


def test_fewshot_and_code_tasks_skip_the_chat_template_like_longbench(chat_tokenizer):
    assert RAW_PROMPT_TASKS == {"trec", "triviaqa", "samsum", "lcc", "repobench-p"}
    prompt = build_prompt_tokens(chat_tokenizer, "triviaqa", "x y", "x ?", 10_000)
    assert not prompt.chat_template
    assert prompt.context_ids[0] == chat_tokenizer.bos_token_id
    assert "assistant" not in chat_tokenizer.decode(prompt.question_ids)


def test_answer_prefix_opens_the_answer_after_the_question(chat_tokenizer):
    prompt = build_prompt_tokens(chat_tokenizer, "vt", "the city . ", "what is x ?", 10_000, answer_prefix=" answer : y")
    assert chat_tokenizer.decode(prompt.question_ids).endswith("assistant : answer : y")


def test_over_long_prompt_loses_the_middle_of_the_context_and_says_so(tokenizer):
    context = " ".join(["the"] * 50 + ["city"] * 100 + ["river"] * 50)
    prompt = build_prompt_tokens(tokenizer, "synthetic_qa", context, "what is the founder of city ?", 120)
    assert prompt.truncated and prompt.original_tokens > 200
    assert prompt.length <= 121  # pred.py's 2 x 60 tokens, re-encoded (the word tokenizer glues the two halves' edge words)
    words = tokenizer.decode(prompt.context_ids).split()
    assert words[:3] == ["<s>", "read", "the"] and words[-2:] == ["question", ":"]
    assert words.count("city") < 100  # the middle went
    assert tokenizer.decode(prompt.question_ids).startswith("what is the founder of city ?")  # the question never does
    untouched = build_prompt_tokens(tokenizer, "synthetic_qa", context, "what is the founder of city ?", 10_000)
    assert not untouched.truncated and untouched.length == untouched.original_tokens


def test_samsum_also_stops_at_a_newline():
    class NewlineTokenizer:  # the one method extra_stop_ids uses: "\n" is token 13, as in Llama 2
        def encode(self, text, add_special_tokens=False):
            return [29871, 13] if text == "\n" else [99]

    assert extra_stop_ids(NewlineTokenizer(), "qasper") == set()
    assert extra_stop_ids(NewlineTokenizer(), "samsum") == {13}


def test_a_token_id_beyond_the_models_vocabulary_is_named_not_an_index_error():
    """A tokenizer of a larger vocabulary than the model's once ended in torch's "index out of range in self"."""
    from kvcache_bench.study.prompt_tokens import PromptTokens, vocabulary_problem

    prompts = [PromptTokens([1, 5, 9], [3]), PromptTokens([2, 700], [4])]
    assert vocabulary_problem(prompts, ["a", "b"], 701, "models/m") is None
    problem = vocabulary_problem(prompts, ["a", "b"], 512, "models/m")
    assert problem.startswith("example 'b': its prompt holds token id 700, but the model has embeddings for ids 0..511 only")
    assert "the tokenizer in 'models/m' is not this model's" in problem

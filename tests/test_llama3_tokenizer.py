"""Llama 3.1's prompts, checked offline against Meta's own reference encoder (PyPI llama-models 0.3.0).

The real study runs Llama-3.1-8B-Instruct. Its tokenizer here is built from the tokenizer.model file
Meta's package ships (kvcache_bench.data.llama3_tokenizer); the spec is Meta's ``Tokenizer.encode`` and
``ChatFormat.encode_dialog_prompt`` on the same dialog, with real-length text (the Python documentation's
prose and the standard library's code, tens of thousands of tokens), and LongBench's pred.py truncation.
"""

import sysconfig
from pathlib import Path

import pytest

# Meta's reference encoder (llama-models + tiktoken, requirements-no-deps.txt / requirements-dev.txt)
from llama_models.datatypes import RawMessage
from llama_models.llama3.chat_format import ChatFormat
from llama_models.llama3.tokenizer import Tokenizer as MetaTokenizer

from kvcache_bench.data.llama3_tokenizer import GENERATION_HEADER, SPECIAL_TOKENS, stop_token_ids
from kvcache_bench.study.prompt_tokens import build_prompt_tokens
from kvcache_bench.study.prompts import LONGBENCH_PROMPTS, PROMPTS, RAW_PROMPT_TASKS

MAX_CONTEXT_TOKENS = 127_500  # the schema's default: LongBench's budget for 128k-token models
# Meta's Tokenizer.encode cuts its input every 400,000 characters (a guard against a tiktoken panic);
# a piece straddling that seam is split there. The hub's tokenizer and this one do not cut.
META_ENCODE_SEAM = 400_000
QUESTION = "Which statement evaluates the expressions and assigns the result to the target list?"
CODE_INPUT = "def load(path):\n    "
RULER_QUESTION = "What is the special magic number for glorious-baboon mentioned in the provided text?"
RULER_ANSWER_PREFIX = " Answer: The special magic number for glorious-baboon mentioned in the provided text is"


@pytest.fixture(scope="module")
def meta():
    return MetaTokenizer.get_instance()


@pytest.fixture(scope="module")
def prose():
    from pydoc_data.topics import topics

    return "".join(topics[name] for name in sorted(topics))


@pytest.fixture(scope="module")
def code():
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return "".join((stdlib / name).read_text(encoding="utf-8") for name in ("argparse.py", "typing.py", "dataclasses.py"))


def metas_prompt_ids(meta, task, context, question, answer_prefix=""):
    """Meta's encoding of the prompt: BOS + the raw text, or the one-user-turn dialog (+ the answer prefix)."""
    raw = PROMPTS[task].format(context=context, input=question)
    if task in RAW_PROMPT_TASKS:
        return meta.encode(raw + answer_prefix, bos=True, eos=False)
    dialog = ChatFormat(meta).encode_dialog_prompt([RawMessage(role="user", content=raw)]).tokens
    return dialog + meta.encode(answer_prefix, bos=False, eos=False)


def pred_py_prompt(tokenizer, task, context, question, max_length):
    """LongBench v1 pred.py's truncation, in its order: tokenise the raw prompt, keep the first and last
    int(max_length/2) tokens, decoded without special tokens. Returns the (cut) raw prompt text."""
    prompt = PROMPTS[task].format(context=context, input=question)
    tokenized_prompt = tokenizer(prompt, truncation=False)["input_ids"]
    if len(tokenized_prompt) > max_length:
        half = int(max_length / 2)
        prompt = tokenizer.decode(tokenized_prompt[:half], skip_special_tokens=True) + tokenizer.decode(
            tokenized_prompt[-half:], skip_special_tokens=True
        )
    return prompt


def assert_equal_but_at_one_seam(tokenizer, ours, metas, seam_char):
    """Equal ids, or ids that differ only in a few tokens spelling the same text across ``seam_char``."""
    if ours == metas:
        return
    same_head = next(i for i, (a, b) in enumerate(zip(ours, metas)) if a != b)
    same_tail = next(i for i, (a, b) in enumerate(zip(reversed(ours), reversed(metas))) if a != b)
    our_window, metas_window = ours[same_head : len(ours) - same_tail], metas[same_head : len(metas) - same_tail]
    assert tokenizer.decode(our_window) == tokenizer.decode(metas_window)
    assert len(our_window) <= 4 and len(metas_window) <= 4, (our_window, metas_window)
    window_start = len(tokenizer.decode(ours[:same_head]))
    assert window_start <= seam_char < window_start + len(tokenizer.decode(our_window))


def example_for(task, prose, code, tokens_wanted_chars, offset):
    if task in ("lcc", "repobench-p"):
        return code[offset : offset + tokens_wanted_chars], CODE_INPUT
    return prose[offset : offset + tokens_wanted_chars], QUESTION


@pytest.mark.parametrize("task", sorted(LONGBENCH_PROMPTS))
def test_longbench_prompt_ids_equal_metas_encoder_at_tens_of_thousands_of_tokens(llama3_tokenizer, meta, prose, code, task):
    offset = 7_919 * sorted(LONGBENCH_PROMPTS).index(task)  # a different stretch of text for each template
    context, question = example_for(task, prose, code, 120_000, offset)
    prompt = build_prompt_tokens(llama3_tokenizer, task, context, question, MAX_CONTEXT_TOKENS)
    metas = metas_prompt_ids(meta, task, context, question)
    assert prompt.context_ids + prompt.question_ids == metas
    assert prompt.length > 20_000 and not prompt.truncated
    assert prompt.chat_template == (task not in RAW_PROMPT_TASKS)
    assert prompt.original_tokens == len(meta.encode(PROMPTS[task].format(context=context, input=question), bos=True, eos=False))


def test_ruler_prompt_ids_equal_metas_dialog_then_the_answer_prefix(llama3_tokenizer, meta, prose):
    context = prose[200_000:330_000]
    prompt = build_prompt_tokens(llama3_tokenizer, "niah_single_1", context, RULER_QUESTION, MAX_CONTEXT_TOKENS, answer_prefix=RULER_ANSWER_PREFIX)
    assert prompt.context_ids + prompt.question_ids == metas_prompt_ids(meta, "niah_single_1", context, RULER_QUESTION, RULER_ANSWER_PREFIX)
    assert prompt.length > 25_000 and prompt.chat_template
    held_back = llama3_tokenizer.decode(prompt.question_ids[-prompt.held_back_tokens :])
    assert held_back == "<|eot_id|>" + GENERATION_HEADER + RULER_ANSWER_PREFIX


def test_an_over_long_prompt_is_cut_as_pred_py_cuts_it_then_encoded_as_meta_encodes_it(llama3_tokenizer, meta, prose):
    context = prose + prose[: len(prose) // 3]  # about 140k tokens: over the 127,500-token budget
    prompt = build_prompt_tokens(llama3_tokenizer, "qasper", context, QUESTION, MAX_CONTEXT_TOKENS)
    raw = PROMPTS["qasper"].format(context=context, input=QUESTION)
    assert prompt.truncated and prompt.original_tokens == len(llama3_tokenizer(raw)["input_ids"]) > MAX_CONTEXT_TOKENS

    cut = pred_py_prompt(llama3_tokenizer, "qasper", context, QUESTION, MAX_CONTEXT_TOKENS)
    rendered = llama3_tokenizer.apply_chat_template([{"role": "user", "content": cut}], add_generation_prompt=True, tokenize=False)
    ours = prompt.context_ids + prompt.question_ids
    assert ours == llama3_tokenizer(rendered, add_special_tokens=False)["input_ids"]
    assert abs(len(ours) - MAX_CONTEXT_TOKENS) < 16  # the cut's two decoded halves re-encode to about the budget
    assert llama3_tokenizer.decode(prompt.question_ids, skip_special_tokens=True).lstrip().startswith(QUESTION)

    metas = ChatFormat(meta).encode_dialog_prompt([RawMessage(role="user", content=cut)]).tokens
    user_header = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
    assert len(cut) > META_ENCODE_SEAM  # so Meta's encoder cuts this content once, at its 400,000th character
    assert_equal_but_at_one_seam(llama3_tokenizer, ours, metas, len(user_header) + META_ENCODE_SEAM)


def test_the_held_back_suffix_is_the_end_of_turn_and_the_assistant_header_never_the_users_words(llama3_tokenizer, prose):
    prompt = build_prompt_tokens(llama3_tokenizer, "qasper", prose[:40_000], QUESTION, MAX_CONTEXT_TOKENS)
    held_back = prompt.question_ids[-prompt.held_back_tokens :]
    # kvpress's pipeline holds back the same "<|eot_id|>" + header (its question_suffix for Llama 3.1).
    assert llama3_tokenizer.convert_ids_to_tokens(held_back) == ["<|eot_id|>", "<|start_header_id|>", "assistant", "<|end_header_id|>", "ĊĊ"]
    assert llama3_tokenizer.decode(held_back).endswith(GENERATION_HEADER)
    assert llama3_tokenizer.decode(prompt.question_ids[: -prompt.held_back_tokens]).endswith(QUESTION + "\n\nAnswer:")


def test_stop_ids_are_metas_end_of_turn_end_of_text_and_end_of_message(llama3_tokenizer, meta):
    assert stop_token_ids(llama3_tokenizer) == meta.stop_tokens
    assert set(llama3_tokenizer.convert_ids_to_tokens(meta.stop_tokens)) == {"<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"}
    assert llama3_tokenizer.eos_token == "<|eot_id|>" and llama3_tokenizer.pad_token_id == meta.pad_id


def test_the_256_special_tokens_have_metas_ids_and_the_vocabulary_its_size(llama3_tokenizer, meta):
    assert len(SPECIAL_TOKENS) == 256
    assert {token: llama3_tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS} == meta.special_tokens
    assert len(llama3_tokenizer) == meta.n_words == 128_256
    # a raw encode starts with BOS, as LongBench's pred.py encodes base-model prompts
    assert llama3_tokenizer("Hello world")["input_ids"] == meta.encode("Hello world", bos=True, eos=False)

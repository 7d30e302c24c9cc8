"""Parity for the press library: greedy ids equal kvpress's own pipeline on SmolLM2 (fp32, CPU) for one
method of each kind beyond the five of tests/test_kvpress_parity.py, at one ratio, question-aware.

Question-aware only and 6 new tokens, to keep CI time small; the question-agnostic path is the same engine
code for every press (tests/test_kvpress_parity.py covers it).
"""

import pytest
from test_kvpress_parity import ANSWER_PREFIX, QUESTION, haystack, kvpress_answer_ids, kvpress_pipeline, smollm2  # noqa: F401

from kvcache_bench.generation.loading import stop_token_ids
from kvcache_bench.generation.single_decode import generate_one
from kvcache_bench.methods.registry import build_press
from kvcache_bench.study.prompts import build_prompt_tokens
from kvcache_bench.study.question_modes import QuestionMode

NEW_TOKENS = 6
# One method per way of compressing (masking per head, critical rescoring, blocks, chunks, key channels,
# composition, context replay, merging) and the registry's changed name; the other offline methods share
# their engine path with one of these.
# (critical_adakv_snapkv, keydiff, snap_think and compactor passed too, and were left out for CI time.)
LIBRARY_METHODS = ["adakv_snapkv", "critical_snapkv", "block_keydiff", "chunkkv", "expected_attention", "think", "kvzip", "merging_snapkv"]


@pytest.mark.parametrize("method", LIBRARY_METHODS)
def test_greedy_ids_equal_kvpress_pipeline_for_the_library(smollm2, kvpress_pipeline, method):  # noqa: F811
    model, tokenizer = smollm2
    context = haystack(14, needle_at=5)
    prompt = build_prompt_tokens(tokenizer, "niah_single_1", context, QUESTION, 100_000, answer_prefix=ANSWER_PREFIX)
    theirs, _ = kvpress_answer_ids(kvpress_pipeline, context + QUESTION, "", build_press(method, 0.5, seed=0))
    ours = generate_one(model, prompt, build_press(method, 0.5, seed=0), QuestionMode.QUESTION_AWARE, NEW_TOKENS, stop_token_ids(model, tokenizer))
    assert ours.token_ids == theirs[:NEW_TOKENS], (tokenizer.decode(ours.token_ids), tokenizer.decode(theirs))

"""Why the check rule refuses eviction at batch size > 1: the padding collapse, reproduced.

A published run batched 4 left-padded prompts; SnapKV at 50% fell from 48.3 to 15.7 F1. kvpress's
presses rank every cache position, pads included. Here a random 2-layer, 64-wide Llama (no trained
model needed) runs the padded batch directly (``generate_padded_batch`` bypasses the check) and the
test shows pads surviving compression and outputs parting from batch 1, while the full cache matches.
"""

import pytest
from transformers import DynamicCache

from kvcache_bench.engine.decoders.one_by_one import generate_one
from kvcache_bench.engine.decoders.padded_batch import generate_padded_batch
from kvcache_bench.engine.greedy import Decoding
from kvcache_bench.methods.registry import build_press
from kvcache_bench.study.cell import CellRun
from kvcache_bench.study.cell_checks import Cell, ConfigCheckError, check_cell, check_setting
from kvcache_bench.study.prompt_tokens import PromptTokens
from kvcache_bench.study.question_modes import QuestionMode
from tests.fixtures.tiny_models import random_prompt_ids, tiny_llama

LENGTHS = (300, 220, 150, 90)  # row 0 is unpadded; rows 1-3 carry 80, 150 and 210 pads
PAD_ID, STOP_IDS, NEW_TOKENS = 0, {2}, 8


@pytest.fixture(scope="module")
def setting():
    model = tiny_llama(vocab_size=256, seed=0)
    prompts = [PromptTokens(random_prompt_ids(n, seed=10 + i), []) for i, n in enumerate(LENGTHS)]
    return model, prompts


@pytest.fixture(scope="module")
def full_cache_run(setting):
    return run_batch(*setting, None)


def run_batch(model, prompts, press):
    caches = []

    def make_cache():
        caches.append(DynamicCache())
        return caches[-1]

    generations = generate_padded_batch(Decoding(model, press, QuestionMode.QUESTION_AWARE, NEW_TOKENS, STOP_IDS, make_cache=make_cache, pad_token_id=PAD_ID), prompts)
    return generations, caches[0]


def pads_kept(full_cache, cache, kept: int) -> list[int]:
    """Pad positions among the compressed prompt entries of layer 0, KV head 0, per row.

    Every pad sits at RoPE position 0 with the same token, so in layer 0 all pads share one key.
    """
    pad_key = full_cache.layers[0].keys[1, 0, 0]  # row 1 starts with a pad
    keys = cache.layers[0].keys[:, 0, :kept]
    return [int((keys[row] - pad_key).abs().amax(-1).lt(1e-6).sum()) for row in range(keys.shape[0])]


def batch_one(model, prompts, press):
    return [generate_one(Decoding(model, press, QuestionMode.QUESTION_AWARE, NEW_TOKENS, STOP_IDS), p).token_ids for p in prompts]


def test_full_cache_left_padded_batch_matches_batch_one(setting, full_cache_run):
    model, prompts = setting
    generations, _ = full_cache_run
    assert [g.token_ids for g in generations] == batch_one(model, prompts, None)


def test_snapkv_keeps_pad_positions_and_changes_the_answers(setting, full_cache_run):
    model, prompts = setting
    press = build_press("snapkv", 0.5)
    generations, cache = run_batch(model, prompts, press)
    kept = int(generations[0].kept_tokens)
    assert kept == max(LENGTHS) // 2  # the press compressed the padded width, pads included
    counts = pads_kept(full_cache_run[1], cache, kept)
    assert counts[0] == 0  # the unpadded row has none to keep
    assert sum(counts[1:]) > 0, counts  # pads were ranked alongside the text and survived
    outputs = [g.token_ids for g in generations]
    assert any(a != b for a, b in list(zip(outputs, batch_one(model, prompts, press)))[1:])


def test_streaming_llm_keeps_the_pads_as_its_attention_sinks(setting, full_cache_run):
    model, prompts = setting
    press = build_press("streaming_llm", 0.5)
    generations, cache = run_batch(model, prompts, press)
    counts = pads_kept(full_cache_run[1], cache, int(generations[0].kept_tokens))
    assert counts[0] == 0
    assert all(count >= press.n_sink for count in counts[1:]), counts  # the "sinks" are pads
    outputs = [g.token_ids for g in generations]
    assert any(a != b for a, b in list(zip(outputs, batch_one(model, prompts, press)))[1:])


def test_the_check_rule_refuses_what_this_file_reproduces():
    for method in ("snapkv", "streaming_llm"):
        with pytest.raises(ConfigCheckError, match="padding"):
            check_cell(Cell("d", "qasper", "m", method, "question_aware", 0.5, 4))
    check_cell(Cell("d", "qasper", "m", "full_cache", "question_aware", 1.0, 4))


def test_the_generate_job_refuses_it_from_its_run_alone():
    # engine.cell_runner.run_cell checks the CellRun it was given before loading anything
    for method in ("snapkv", "streaming_llm"):
        run = CellRun("qasper", None, method, 0.5, "question_aware", max_new_tokens=8, seed=0, batch_size=4)
        target = f"qasper/{method}/question_aware/retention-0.50_batch-4_decode-1"
        with pytest.raises(ConfigCheckError, match=f"refused target {target}:\n.*padding"):
            check_setting(run)
    check_setting(CellRun("qasper", None, "full_cache", 1.0, "question_aware", max_new_tokens=8, seed=0, batch_size=4))

"""cuDNN's per-length attention plans are built before a cell is timed (about 80 ms per new prompt length on an H200:
a decode-32 cell ran 3.7 ex/s in a fresh worker, 5.05 in one that had met its prompts). The plan cache is keyed on
the calls' shapes, strides, dtype and arguments, so the calls made ahead must be the cell's own, length for length."""

from __future__ import annotations

import pytest
import torch

from kvcache_bench.engine import attention_plans, warm_ups
from kvcache_bench.engine.attention_plans import (
    TensorLayout,
    build_plans,
    prompt_calls,
    recording_prompt_attention,
)
from kvcache_bench.engine.prefill import prefill_example
from kvcache_bench.methods.registry import build_press
from kvcache_bench.study.prompt_tokens import PromptTokens
from kvcache_bench.study.question_modes import QuestionMode
from tests.fixtures.tiny_models import random_prompt_ids, tiny_llama


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab_size=256, seed=0)


def _prompt(length: int) -> PromptTokens:
    return PromptTokens(random_prompt_ids(length, seed=length), random_prompt_ids(9, seed=2))


@pytest.fixture
def attention_calls(monkeypatch):
    """Every attention call (shapes, strides, dtype, mask or not, arguments), in order."""
    seen, original = [], torch.nn.functional.scaled_dot_product_attention

    def spying(query, key, value, attn_mask=None, *args, **kwargs):
        seen.append(
            (
                tuple((t.shape, t.stride(), t.dtype) for t in (query, key, value)),
                attn_mask is None,
                tuple(sorted(kwargs.items())),
            )
        )
        return original(query, key, value, attn_mask, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spying)
    return seen


def _prefill(model, length):
    prefill_example(model, _prompt(length), build_press("snapkv", 0.5, seed=0), QuestionMode.QUESTION_AWARE)


def test_the_calls_made_ahead_are_the_prompt_passs_own_at_each_length(model, attention_calls):
    """A call with other strides or arguments than the cell's would build a plan the cell never uses."""
    calls = set()
    with recording_prompt_attention(calls):
        _prefill(model, 150)
    assert len(calls) == 1  # every layer's prompt pass makes the same call; the held-back tokens' pass has a mask
    (call,) = calls
    attention_calls.clear()
    _prefill(model, 181)  # a prompt of another length, as the cell will run it
    pressed = 181 + 9 - 1  # context + question, but the held-back last token
    own = {c for c in attention_calls if c[1] and c[0][0][0][-2] == pressed}
    assert len(own) == 1
    attention_calls.clear()
    call.run(pressed, "cpu")
    assert set(attention_calls) == own


def test_a_layout_an_empty_tensor_cannot_reproduce_is_not_recorded():
    """A query sliced out of a fused projection (Phi-3's qkv_proj) has strides no empty tensor of its shape has."""
    fused = torch.randn(1, 40, 3 * 64).view(1, 40, 3, 4, 16)
    query = fused[:, :, 0].transpose(1, 2)
    assert TensorLayout.of(query) is None
    plain = torch.randn(1, 40, 4, 16).transpose(1, 2)
    assert TensorLayout.of(plain) is not None and TensorLayout.of(plain).empty(40, "cpu").stride() == plain.stride()


def test_each_new_length_is_built_once_per_worker_and_only_on_a_gpu(model, attention_calls, monkeypatch):
    with recording_prompt_attention(prompt_calls(model)):
        _prefill(model, 150)
    attention_calls.clear()
    assert build_plans(model, [100, 120]) == 0.0 and attention_calls == []  # the CPU has no plans to build
    monkeypatch.setattr(attention_plans, "PLANNED_DEVICES", ("cuda", "cpu"))
    assert build_plans(model, [100, 120, 100]) > 0
    assert sorted(c[0][0][0][-2] for c in attention_calls) == [100, 120]
    attention_calls.clear()
    assert build_plans(model, [120, 130]) > 0
    assert [c[0][0][0][-2] for c in attention_calls] == [130]  # 120 is built already in this worker
    attention_calls.clear()
    assert build_plans(model, [100, 130]) == 0.0 and attention_calls == []


def test_switched_off_the_cell_builds_its_plans_in_its_timed_passes_and_says_so(model, attention_calls, monkeypatch):
    """``KVCACHE_BENCH_ATTENTION_PLANS=0`` measures what a cold cell pays: nothing is built ahead, and the records'
    ``attention_plans`` tells that run from one that built them ahead."""
    with recording_prompt_attention(prompt_calls(model)):
        _prefill(model, 150)
    assert attention_plans.plans_mode(model) == "none"  # the CPU builds no plans
    monkeypatch.setattr(attention_plans, "PLANNED_DEVICES", ("cuda", "cpu"))
    assert attention_plans.plans_mode(model) == "ahead"
    monkeypatch.setenv("KVCACHE_BENCH_ATTENTION_PLANS", "0")
    assert attention_plans.plans_mode(model) == "in_cell"
    attention_calls.clear()
    assert build_plans(model, [140, 160]) == 0.0 and attention_calls == []


def test_a_cell_builds_its_prompt_lengths_before_it_is_timed_and_answers_the_same(demo_model, monkeypatch):
    """The plans are paid in warmup_seconds, never in an example's seconds, and change no answer."""
    from kvcache_bench.data.longbench import normalise_rows
    from kvcache_bench.data.synthetic import make_synthetic_rows
    from kvcache_bench.engine.cell_runner import run_cell
    from kvcache_bench.engine.loading import ModelSettings, load_for_settings
    from kvcache_bench.study.cell import CellRun

    rows = normalise_rows(make_synthetic_rows(3, seed=7, min_words=60, max_words=90), "synthetic_qa", None)
    settings = ModelSettings(path=demo_model, dtype="float32", device="cpu", max_context_tokens=2048)
    run = CellRun(
        task="synthetic_qa",
        model_settings=settings,
        method="snapkv",
        retention=0.5,
        question_mode="question_aware",
        max_new_tokens=6,
        seed=0,
        decode_batch_size=3,
    )
    plain = list(run_cell(rows, run, loaded=load_for_settings(settings), progress=False))
    monkeypatch.setattr(warm_ups, "WARM_UP_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(attention_plans, "PLANNED_DEVICES", ("cuda", "cpu"))
    built = []
    original = attention_plans.build_plans

    def counting(model, lengths):
        seconds = original(model, lengths)
        built.append((sorted(set(lengths)), seconds))
        return seconds

    monkeypatch.setattr("kvcache_bench.engine.cell_runner.build_plans", counting)
    loaded = load_for_settings(settings)
    planned = list(run_cell(rows, run, loaded=loaded, progress=False))
    again = list(run_cell(rows, run, loaded=loaded, progress=False))
    assert [(r["prediction"], r["kept_tokens"]) for r in planned] == [(r["prediction"], r["kept_tokens"]) for r in plain]
    (lengths, seconds), (_, seconds_again) = built
    assert len(lengths) == 3 and seconds > 0 and seconds_again == 0.0  # a worker's later cell meets them built
    assert planned[0]["warmup_seconds"] > seconds and again[0]["warmup_seconds"] == 0.0
    assert prompt_calls(loaded.model)  # recorded in the warm-up's prompt pass
    assert {r["attention_plans"] for r in plain} == {"none"} and {r["attention_plans"] for r in planned} == {"ahead"}

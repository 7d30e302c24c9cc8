"""The performance pass: what it times, what it counts, and what it refuses to compare."""

from __future__ import annotations

import math
import sys
import time
import types

import numpy as np
import pandas as pd
import pytest
import torch

from kvcache_bench.engine.decoders.one_by_one import generate_one
from kvcache_bench.engine.greedy import Decoding
from kvcache_bench.methods.registry import build_press
from kvcache_bench.perf import hardware as perf_hardware
from kvcache_bench.perf import plan
from kvcache_bench.perf import runs as perf
from kvcache_bench.perf import tables as perf_tables
from kvcache_bench.study.cell_checks import ConfigCheckError
from kvcache_bench.study.prompt_tokens import PromptTokens
from kvcache_bench.study.question_modes import QuestionMode

LAYERS, KV_HEADS, HEAD_DIM = 2, 2, 16


@pytest.fixture(scope="module")
def tiny_model():
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS, num_attention_heads=4,
        num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, vocab_size=300, eos_token_id=2, bos_token_id=1,
    )
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa").eval()


def context(length=96, seed=0):
    return perf.filler_context_ids(length, 300, seed)


@pytest.mark.parametrize("method,retention", [("full_cache", 1.0), ("snapkv", 0.5), ("streaming_llm", 0.25)])
def test_timed_tokens_equal_the_engine_without_stopping(tiny_model, method, retention):
    """Same greedy tokens as engine.generate_one with no stop tokens: positions after eviction continue
    at the original prompt length, and every run generates exactly new_tokens."""
    ids = context()
    kwargs = {"window_size": 8} if method == "snapkv" else None
    press = build_press(method, retention, kwargs)
    timing = perf.timed_generation(tiny_model, torch.tensor([ids]), press, 12)
    reference = generate_one(Decoding(tiny_model, press, QuestionMode.QUESTION_AWARE, 12, set()), PromptTokens(ids, []))
    assert timing.token_ids == [reference.token_ids]
    assert timing.generated_tokens == 12 and len(timing.itl_s) == 11
    assert timing.kept_tokens == pytest.approx(reference.kept_tokens)


def test_eos_does_not_shorten_a_run(tiny_model):
    ids = context()
    first = perf.timed_generation(tiny_model, torch.tensor([ids]), None, 3).token_ids[0][0]
    tiny_model.generation_config.eos_token_id = first  # the very first token is now "end of sequence"
    try:
        timing = perf.timed_generation(tiny_model, torch.tensor([ids]), None, 10)
    finally:
        tiny_model.generation_config.eos_token_id = 2
    assert len(timing.token_ids[0]) == 10 and timing.token_ids[0][0] == first


def test_kv_cache_bytes_are_what_the_cache_holds_after_compression(tiny_model):
    ids = context(100)
    full = perf.timed_generation(tiny_model, torch.tensor([ids]), None, 2)
    knorm = perf.timed_generation(tiny_model, torch.tensor([ids]), build_press("knorm", 0.25), 2)
    per_token = LAYERS * 2 * KV_HEADS * HEAD_DIM * 4  # keys + values, float32
    assert full.kv_cache_bytes == 100 * per_token
    assert knorm.kv_cache_bytes == 25 * per_token
    assert knorm.kv_cache_bytes_final == (25 + 1) * per_token  # one decode step appended a position


def test_records_carry_every_metric_and_the_fake_backend(tiny_model):
    cells = [perf.PerfCell("tiny", "full_cache", 1.0, 64), perf.PerfCell("tiny", "knorm", 0.5, 64)]
    settings = perf.PerfSettings(new_tokens=5, warmup=1, repeats=2, seed=3)
    records = perf.measure_cells(tiny_model, cells, {64: context(64)}, settings, perf_hardware.FakeHardware())
    assert len(records) == 4 and sorted(r["order_index"] for r in records) == [0, 1, 2, 3]
    for record in records:
        assert record["hardware_backend"] == "fake" and record["generated_tokens"] == 5
        assert record["itl_p50_s"] <= record["itl_p95_s"]
        assert record["ttft_s"] > 0 and record["tokens_per_s"] == pytest.approx(5 / record["wall_s"])
        assert 0 <= record["harness_overhead_fraction"] < 1 and record["forward_s"] <= record["wall_s"]
        assert record["energy_per_token_j"] == pytest.approx(record["energy_j"] / 5)
        # the fake backend's constant power, integrated over the sampler's window, which holds the timed run: never
        # less than power x wall (a ratio to wall alone failed under CPU contention, the window's edges taking longer)
        assert record["power_mean_w"] == pytest.approx(perf_hardware.FAKE_POWER_WATTS)
        assert record["energy_j"] >= perf_hardware.FAKE_POWER_WATTS * record["wall_s"] * (1 - 1e-9)
        assert record["architecture"]["num_key_value_heads"] == KV_HEADS
    summary = perf_tables.summarize_perf(records)
    assert list(summary["method"]) == ["full_cache", "knorm"] and list(summary["repeats"]) == [2, 2]


def test_eviction_with_batch_above_one_is_refused_and_full_cache_batches(tiny_model):
    settings = perf.PerfSettings(new_tokens=3, warmup=0, repeats=1)
    with pytest.raises(ConfigCheckError, match="padding collapse"):
        perf.measure_cells(tiny_model, [perf.PerfCell("tiny", "snapkv", 0.5, 64, 2)], {64: context(64)}, settings, perf_hardware.FakeHardware())
    timing = perf.timed_generation(tiny_model, torch.tensor([context(64)] * 3), None, 4)
    assert timing.generated_tokens == 12 and timing.token_ids[0] == timing.token_ids[1] == timing.token_ids[2]


def test_measurement_order_is_a_seeded_shuffle_of_every_run():
    cells = [perf.PerfCell("m", "knorm", r, c) for r in (0.5, 0.1) for c in (64, 128)]
    order = perf.measurement_order(cells, 3, seed=7)
    assert sorted(order, key=str) == sorted([(c, r) for c in cells for r in range(3)], key=str)
    assert order == perf.measurement_order(cells, 3, seed=7)
    assert order != perf.measurement_order(cells, 3, seed=8)
    assert order != [(c, r) for c in cells for r in range(3)]


def test_power_sampler_integrates_power_and_prefers_the_energy_counter():
    with perf_hardware.PowerSampler(lambda: 50.0, lambda: 123, hz=50) as sampler:
        time.sleep(0.3)
    result = sampler.result()
    assert result["energy_source"] == "integrated_power_samples"
    assert result["energy_j"] == pytest.approx(15.0, rel=0.1)
    assert result["power_sample_hz"] >= 10 and result["driver_peak_memory_bytes"] == 123

    counter = iter([1_000_000, 1_004_000])  # mJ
    with perf_hardware.PowerSampler(lambda: 50.0, lambda: 0, read_energy_mj=lambda: next(counter), hz=20) as sampler:
        time.sleep(0.05)
    assert sampler.result()["energy_j"] == pytest.approx(4.0)
    assert sampler.result()["energy_source"] == "nvml_energy_counter"
    with pytest.raises(ValueError, match="10 Hz"):
        perf_hardware.PowerSampler(lambda: 0.0, lambda: 0, hz=5)


def test_percentile_matches_numpy():
    values = [0.3, 0.1, 0.7, 0.2, 0.9, 0.4]
    for q in (50, 95, 0, 100):
        assert perf_tables.percentile(values, q) == pytest.approx(np.percentile(values, q))


def _record(method, retention, backend="nvml", gpu="NVIDIA H200", **extra):
    base = dict(model="m", method=method, retention=retention, context_tokens=4096, batch_size=1, new_tokens=64,
                hardware_backend=backend, gpu_name=gpu, ttft_s=0.5, itl_mean_s=0.02, itl_p50_s=0.02, itl_p95_s=0.03,
                torch_peak_memory_bytes=2**34, driver_peak_memory_bytes=2**34, energy_per_token_j=1.0)
    return {**base, **extra}


@pytest.mark.parametrize(
    "other", [_record("knorm", 0.5, backend="fake", gpu="none (fake backend)"), _record("knorm", 0.5, gpu="NVIDIA A100-SXM4-80GB")]
)
def test_tables_and_figures_refuse_to_mix_hardware(other):
    from kvcache_bench.perf.plots import perf_vs_retention

    records = [_record("full_cache", 1.0), other]
    with pytest.raises(perf_tables.MixedHardwareError, match="mix hardware"):
        perf_tables.summarize_perf(records)
    with pytest.raises(perf_tables.MixedHardwareError):
        perf_tables.markdown_table(pd.DataFrame(records))
    with pytest.raises(perf_tables.MixedHardwareError):
        perf_vs_retention(pd.DataFrame(records), "itl")


def test_figures_draw_one_hardware_and_name_it():
    from kvcache_bench.perf.plots import perf_vs_retention

    summary = perf_tables.summarize_perf([_record("full_cache", 1.0), _record("knorm", 0.5, itl_mean_s=0.01), _record("knorm", 0.1, itl_mean_s=0.005)])
    figure = perf_vs_retention(summary, "itl")
    assert "NVIDIA H200" in figure._suptitle.get_text()
    ax = figure.axes[0]
    knorm = [line for line in ax.get_lines() if line.get_label() == "Knorm"][0]
    assert list(knorm.get_xdata()) == [10.0, 50.0] and list(knorm.get_ydata()) == pytest.approx([5.0, 10.0])


def test_contexts_have_exactly_the_requested_length(tmp_path):
    from kvcache_bench.canary.train import canary_tokenizer
    from kvcache_bench.data.synthetic import make_synthetic_rows

    tokenizer = canary_tokenizer()
    rows = make_synthetic_rows(3, seed=1, min_words=50, max_words=80)
    ids = perf.dataset_context_ids(tokenizer, "synthetic_qa", rows, 500, seed=1)  # longer than all documents
    assert len(ids) == 500 and ids[0] == tokenizer.bos_token_id
    assert tokenizer.decode(ids[-6:]).endswith("answer :")
    assert perf.filler_context_ids(4096, 128256, 5) == perf.filler_context_ids(4096, 128256, 5)
    assert len(perf.filler_context_ids(4096, 128256, 5)) == 4096 and min(perf.filler_context_ids(4096, 128256, 5)) >= 4


# ----------------------------------------------------------------------------- plan


def _job(stage="perf", method="snapkv", retention=0.5, runs=4, prompt=4096, new=64, output="results/x.jsonl"):
    return dict(stage=stage, output=output, model="llama-3.1-8b-instruct", method=method, retention=retention,
                batch_size=1, runs=runs, prompt_tokens=prompt, max_context_tokens=127500, new_tokens=new)


def plan_stats(text: str) -> dict[str, tuple[int, float]]:
    """The plan's 'Job stats' table: {stage: (jobs, GPU-hours)}."""
    table = text.split("Job stats (the study's jobs):\n", 1)[1].split("\n")[1:]
    stats = {}
    for line in table:
        cells = line.split()
        if len(cells) < 3 or not cells[1].isdigit():
            break
        stats[cells[0]] = (int(cells[1]), float(cells[2]))
    return stats


def plan_line(text: str, method: str, retention: float = 0.5) -> dict[str, str]:
    """One job's line of the plan, by its header's columns."""
    lines = text.splitlines()
    header = lines[0]
    columns = header.split()
    for line in lines[1:]:
        cells = line.split(None, len(columns) - 1)
        if len(cells) == len(columns) and cells[2] == method and cells[4] == f"{retention * 100:.0f}%":
            return dict(zip(columns, cells))
    raise AssertionError(f"no line for {method} {retention}")


def test_plan_uses_stated_defaults_without_records_and_lists_the_opt_in_perf_pass_apart():
    defaults = {"load_s": 30.0, "prefill_tokens_per_s": 4096.0, "decode_s_per_token": 0.02, "prompt_tokens": 8192}
    text = plan.plan_report([_job(), _job(stage="generate", runs=200, prompt=None)], [], defaults=defaults, exists=lambda p: False)
    perf_hours = (30 + 4 * (1.0 + 63 * 0.02)) / 3600
    generate_hours = (30 + 200 * (2.0 + 63 * 0.02)) / 3600
    stats = plan_stats(text)
    assert stats == {"generate": (1, pytest.approx(generate_hours, abs=5e-4)), "total": (1, pytest.approx(generate_hours, abs=5e-4))}
    assert f"Opt-in, not in the total: perf 1 jobs, {perf_hours:.3f} GPU-hours (snakemake perf_all)." in text
    line = plan_line(text, "snapkv")
    assert line["tokens"] in ("4096", "~8192") and line["estimate"] == "unmeasured: defaults"
    assert "~8192" in text and "1 jobs, " in text.split("Job stats")[1]  # the defaults' share, said in the table


def test_plan_estimates_from_measured_records_of_a_same_shaped_model():
    records = [
        _record("snapkv", 0.5, model="llama-shape", context_tokens=4096, ttft_s=0.4, itl_mean_s=0.025),
        _record("snapkv", 0.5, model="llama-shape", context_tokens=16384, ttft_s=2.0, itl_mean_s=0.03),
        _record("full_cache", 1.0, model="llama-shape", context_tokens=4096, ttft_s=0.5, itl_mean_s=0.04),
    ]
    jobs = [_job(stage="generate", prompt=8000, output="a"), _job(stage="generate", method="knorm", retention=0.1, output="b"),
            _job(stage="generate", output="done")]
    text = plan.plan_report(jobs, records, same_cost_as={"llama-3.1-8b-instruct": "llama-shape"}, defaults={"load_s": 0},
                            exists=lambda path: path == "done")
    snapkv_hours = 4 * (0.4 * 8000 / 4096 + 63 * 0.025) / 3600  # nearest measured context: 4096
    knorm_hours = 4 * (0.5 + 63 * 0.04) / 3600  # no knorm record: the model's full cache
    snap = plan_line(text, "snapkv")
    assert (snap["GPU-h"], snap["estimate"]) == (f"{snapkv_hours:.4f}", "measured llama-shape on NVIDIA H200")
    assert plan_line(text, "knorm", 0.1)["estimate"] == "measured llama-shape on NVIDIA H200 (full cache)"
    assert "Already done (not counted): 1" in text
    assert plan_stats(text)["total"] == (2, pytest.approx(snapkv_hours + knorm_hours, abs=5e-4))


def test_an_eager_attention_job_is_priced_from_eager_records_or_said_unpriced_never_from_sdpa_ones():
    sdpa = [_record("snapkv", 0.5, model="llama-shape", ttft_s=0.4, itl_mean_s=0.025)]
    h2o = {**_job(stage="generate", method="h2o", output="h"), "attention": "eager"}
    snap = {**_job(stage="generate", output="s"), "attention": "sdpa"}
    text = plan.plan_report([h2o, snap], sdpa, same_cost_as={"llama-3.1-8b-instruct": "llama-shape"}, defaults={"load_s": 0},
                            exists=lambda p: False)
    line = plan_line(text, "h2o")
    assert line["GPU-h"] == "-" and line["attention"] == "eager"
    assert line["estimate"] == "cannot price: llama-shape was measured with sdpa attention only, not eager"
    assert plan_stats(text)["total"] == (2, pytest.approx(4 * (0.4 + 63 * 0.025) / 3600, abs=5e-4))  # h2o's hours left out
    assert "Not priced: 1 jobs" in text and "h2o (eager attention, batch 1 decode 1) on llama-3.1-8b-instruct" in text
    exact = sdpa + [_record("h2o", 0.5, model="llama-shape", ttft_s=0.9, itl_mean_s=0.05)]  # an h2o record ran eager
    text = plan.plan_report([h2o], exact, same_cost_as={"llama-3.1-8b-instruct": "llama-shape"}, defaults={"load_s": 0},
                            exists=lambda p: False)
    assert plan_line(text, "h2o")["GPU-h"] == f"{4 * (0.9 + 63 * 0.05) / 3600:.4f}"


def test_a_measured_model_at_an_unmeasured_batch_size_is_said_unpriced_not_guessed_from_the_defaults():
    records = [_record("full_cache", 1.0, model="llama-shape")]
    batch_4 = {**_job(stage="generate", method="full_cache", retention=1.0, output="f"), "batch_size": 4}
    text = plan.plan_report([batch_4], records, same_cost_as={"llama-3.1-8b-instruct": "llama-shape"}, exists=lambda p: False)
    assert plan_line(text, "full_cache", 1.0)["estimate"] == "cannot price: llama-shape was measured at batch 1 decode 1 only, not batch 4 decode 1"


def test_the_plans_columns_line_up_whatever_the_method_names():
    jobs = [_job(stage="generate", method=m, output=m) for m in ("knorm", "plain_expected_attention", "critical_adakv_expected_attention")]
    lines = plan.plan_report(jobs, [], exists=lambda p: False).splitlines()
    header, rows = lines[0], lines[1:4]
    for column in ("attention", "kept", "GPU-h", "estimate"):
        ends = {line.index(cell) + len(cell) if column in ("kept", "GPU-h") else line.index(cell)
                for line, cell in [(header, column)] + [(row, row.split()[header.split().index(column)]) for row in rows]}
        assert len(ends) == 1, (column, lines[:4])  # every row's cell starts (text) or ends (numbers) where its header does


def test_plan_wants_one_gpu_model_and_prefers_real_records():
    real = _record("snapkv", 0.5, ttft_s=1.0)
    fake = _record("snapkv", 0.5, backend="fake", gpu="none (fake backend)", ttft_s=9.0)
    assert plan.choose_estimate_hardware([real, fake]) == [real]
    other = _record("snapkv", 0.5, gpu="NVIDIA A100-SXM4-80GB")
    with pytest.raises(perf_tables.MixedHardwareError, match="gpu_name"):
        plan.choose_estimate_hardware([real, other])
    assert plan.choose_estimate_hardware([real, other], gpu_name="NVIDIA A100-SXM4-80GB") == [other]


# ----------------------------------------------------------------------------- NVML backend, against a stand-in


def test_nvml_backend_reads_power_energy_memory_and_clocks(monkeypatch):
    """The NVML calls the GPU run depends on, checked against a stand-in module (no GPU here)."""
    calls = []

    class NVMLError(Exception):
        pass

    memory = types.SimpleNamespace(total=141 * 2**30, used=20 * 2**30)
    energy = iter(range(10_000, 10**9, 500))
    fake = types.SimpleNamespace(
        NVMLError=NVMLError, NVML_CLOCK_SM=0, NVML_CLOCK_MEM=1,
        nvmlInit=lambda: calls.append("init"),
        nvmlDeviceGetHandleByPciBusId=lambda bus: calls.append(bus) or "handle",
        nvmlDeviceGetHandleByIndex=lambda i: "handle",
        nvmlDeviceGetTotalEnergyConsumption=lambda h: next(energy),
        nvmlDeviceGetName=lambda h: b"NVIDIA H200",
        nvmlSystemGetDriverVersion=lambda: "570.86.15",
        nvmlDeviceGetMemoryInfo=lambda h: memory,
        nvmlDeviceGetMaxClockInfo=lambda h, kind: 1980 if kind == 0 else 3201,
        nvmlDeviceGetClockInfo=lambda h, kind: 1755,
        nvmlDeviceGetEnforcedPowerLimit=lambda h: 700_000,
        nvmlDeviceGetPowerUsage=lambda h: 350_000,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(pci_bus_id=0x19, pci_domain_id=0, pci_device_id=0))
    hardware = perf_hardware.NvmlHardware(torch.device("cuda", 0))
    assert "00000000:19:00.0" in calls and hardware.has_energy_counter
    described = hardware.describe()
    assert described["gpu_name"] == "NVIDIA H200" and described["driver_version"] == "570.86.15"
    assert described["sm_clock_max_mhz"] == 1980 and described["power_limit_w"] == 700.0
    with hardware.sampler(20) as sampler:
        time.sleep(0.12)
    result = sampler.result()
    assert result["energy_source"] == "nvml_energy_counter" and result["energy_j"] == pytest.approx(0.5)
    assert result["power_mean_w"] == pytest.approx(350.0) and result["sm_clock_mean_mhz"] == 1755
    assert result["driver_peak_memory_bytes"] == 20 * 2**30


def test_auto_hardware_is_fake_without_a_gpu():
    assert perf_hardware.pick_hardware("auto", torch.device("cpu")).describe()["hardware_backend"] == "fake"
    with pytest.raises(perf_hardware.HardwareUnavailableError):
        perf_hardware.pick_hardware("nvml", torch.device("cpu"))
    assert not math.isnan(perf_tables.percentile([1.0], 95))


def test_decode_batched_generate_jobs_are_planned_from_records_at_their_decode_batch():
    records = [
        _record("snapkv", 0.5, model="llama-shape", context_tokens=4096, ttft_s=0.4, itl_mean_s=0.025),
        {**_record("snapkv", 0.5, model="llama-shape", context_tokens=5000, ttft_s=0.25, itl_mean_s=0.0), "decode_batch_size": 32},
    ]
    batched = {**_job(stage="generate", prompt=5000, output="a"), "decode_batch_size": 32}
    other_method = {**batched, "method": "knorm", "output": "b"}
    alone = {**_job(stage="generate", method="tova", prompt=4096, output="c"), "decode_batch_size": 1}
    text = plan.plan_report([batched, other_method, alone], records, same_cost_as={"llama-3.1-8b-instruct": "llama-shape"},
                            defaults={"load_s": 0}, exists=lambda path: False)
    snap = plan_line(text, "snapkv")
    assert (snap["GPU-h"], snap["estimate"]) == (f"{4 * 0.25 / 3600:.4f}", "measured llama-shape on NVIDIA H200 at decode batch 32")
    assert plan_line(text, "knorm")["estimate"] == "measured llama-shape on NVIDIA H200 (snapkv 50%) at decode batch 32"
    # one at a time, a cell is priced from its own method's record or the full cache's, not another press's
    assert plan_line(text, "tova")["estimate"] == "cannot price: no record of tova or the full cache on llama-shape at batch 1 decode 1"


def test_the_plan_counts_one_load_per_model_worker_not_per_cell():
    defaults = {"load_s": 30.0, "prefill_tokens_per_s": 4096.0, "decode_s_per_token": 0.02, "prompt_tokens": 4096}
    cells = [_job(stage="generate", method=m, runs=10, prompt=None, output=m) for m in ("snapkv", "knorm", "h2o")]
    for cell, worker in zip(cells, ("m (sdpa attention)", "m (sdpa attention)", "m (eager attention)")):
        cell["worker"] = worker
    text = plan.plan_report(cells, [], defaults=defaults, exists=lambda p: False)
    work = 3 * 10 * (1.0 + 63 * 0.02)
    assert plan_stats(text)["generate"] == (3, pytest.approx((work + 2 * 30) / 3600, abs=5e-4))  # two workers, two loads
    assert "one per model worker (2:" in text


def test_a_press_that_compresses_while_decoding_is_refused_by_the_perf_pass(tiny_model):
    """The perf pass times a press over the prompt: a decoding-time press would be timed as the full cache."""
    settings = perf.PerfSettings(new_tokens=3, warmup=0, repeats=1)
    with pytest.raises(ValueError, match="decoding_knorm compresses while decoding"):
        perf.measure_cells(tiny_model, [perf.PerfCell("tiny", "decoding_knorm", 1.0, 64, 1)], {64: context(64)}, settings, perf_hardware.FakeHardware())

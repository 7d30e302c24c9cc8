"""The performance pass's timed runs: latency, memory and KV-cache bytes of one method at one context length.

What keeps these numbers about the method rather than the harness:
  * every run generates exactly ``new_tokens`` tokens (greedy, end-of-sequence ignored), so methods are
    compared on the same amount of decoding;
  * positions after eviction continue at the ORIGINAL prompt length, as ``engine.generate_one`` does;
  * the decode loop never reads a token back to the host (nothing to check when EOS is ignored), so CUDA
    launches stay asynchronous; time is taken with CUDA events on the GPU timeline;
  * each cell gets an unmeasured warm-up, measured runs are repeated and ordered by a seeded shuffle;
  * the harness's own overhead (wall time outside the model's forward calls) is recorded for every run;
  * records carry the hardware they came from (``perf_hardware``); ``perf_tables`` summarises them.

Needs torch: the perf rule runs in envs/generate.yaml. Tables, figures and the plan read records without it.
"""

from __future__ import annotations

import contextlib
import random
import time
from dataclasses import asdict, dataclass, field

import torch

from kvcache_bench.engine.example_clock import DeviceClock
from kvcache_bench.perf.hardware import pick_hardware
from kvcache_bench.perf.tables import percentile

# ----------------------------------------------------------------------------- contexts


def filler_context_ids(length: int, vocab_size: int, seed: int, reserved: int = 4) -> list[int]:
    """Seeded random token ids (skipping the first ``reserved`` ids, where special tokens usually live)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(reserved, vocab_size, (length,), generator=generator).tolist()


def dataset_context_ids(tokenizer, task: str, rows: list[dict], length: int, seed: int) -> list[int]:
    """Exactly ``length`` tokens: the task prompt's question part, after documents of the dataset
    (seeded order, concatenated, cut to fit). The press sees all of it (question-aware)."""
    from kvcache_bench.study.prompts import split_prompt

    if not rows:
        raise ValueError("no dataset rows to build a context from")
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    _, question_text = split_prompt(task, "", rows[order[0]]["input"])
    question_ids = tokenizer.encode(question_text, add_special_tokens=False) if question_text else []
    head = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    budget = length - len(head) - len(question_ids)
    if budget < 1:
        raise ValueError(f"context length {length} leaves no room for a document after the question")
    documents: list[int] = []
    while len(documents) < budget:
        before = len(documents)
        for index in order:
            documents += tokenizer.encode(" " + rows[index]["context"], add_special_tokens=False)
            if len(documents) >= budget:
                break
        if len(documents) == before:
            raise ValueError("the dataset's documents tokenise to nothing")
    return head + documents[:budget] + question_ids


# ----------------------------------------------------------------------------- one timed run


def cache_bytes(cache) -> int:
    """Bytes of keys + values the cache holds, summed over layers (what compression actually saved)."""
    total = 0
    for layer in cache.layers:
        for tensor in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(tensor, torch.Tensor):
                total += tensor.numel() * tensor.element_size()
    return total


@dataclass
class RunTiming:
    ttft_s: float
    itl_s: list[float]
    wall_s: float
    forward_s: float
    kv_cache_bytes: int  # right after prefill + compression
    kv_cache_bytes_final: int  # after the last decode step
    kept_tokens: float  # mean over layers of prompt positions kept after compression
    generated_tokens: int
    token_ids: list[list[int]] = field(default_factory=list)  # per row, read back only after timing


@torch.inference_mode()
def timed_generation(model, input_ids: torch.Tensor, press, new_tokens: int) -> RunTiming:
    """Prefill (compressing with ``press``) then exactly ``new_tokens`` greedy tokens per row.

    ``input_ids`` is (batch, prompt_length) with no padding: perf contexts have one controlled length.
    """
    from transformers import DynamicCache

    from kvcache_bench.engine.caches import mean_cache_length

    if new_tokens < 1:
        raise ValueError("new_tokens must be >= 1")
    device = input_ids.device
    clock = DeviceClock(device)  # CUDA events on a GPU: read without a sync until the run ends
    batch, prompt_length = input_ids.shape
    # Positions continue at the original prompt length whatever the press kept; built once, on device.
    positions = torch.arange(prompt_length, prompt_length + new_tokens, device=device).unsqueeze(0).expand(batch, -1)
    cache = DynamicCache()
    forward_spans = []
    clock.finish()
    wall_start = time.perf_counter()
    start = clock.mark()
    # As the engine (prefill.prefill_example): the press sees the prompt but its last token, which then runs
    # on the compressed cache, so the first token is timed and chosen the way the quality runs choose it.
    with press(model) if press is not None else contextlib.nullcontext():
        before = clock.mark()
        model(input_ids=input_ids[:, :-1], past_key_values=cache, use_cache=True, logits_to_keep=1)
        forward_spans.append((before, clock.mark()))
    kept = mean_cache_length(cache)
    before = clock.mark()
    last_position = torch.full((batch, 1), prompt_length - 1, device=device)
    outputs = model(input_ids=input_ids[:, -1:], past_key_values=cache, position_ids=last_position, use_cache=True)
    forward_spans.append((before, clock.mark()))
    next_token = outputs.logits[:, -1].argmax(dim=-1, keepdim=True)
    token_marks = [clock.mark()]
    tokens = [next_token]
    kv_after_prefill = cache_bytes(cache)
    for step in range(1, new_tokens):
        before = clock.mark()
        outputs = model(
            input_ids=next_token, past_key_values=cache, position_ids=positions[:, step - 1 : step], use_cache=True
        )
        forward_spans.append((before, clock.mark()))
        next_token = outputs.logits[:, -1].argmax(dim=-1, keepdim=True)
        token_marks.append(clock.mark())
        tokens.append(next_token)
    clock.finish()
    wall = time.perf_counter() - wall_start
    return RunTiming(
        ttft_s=clock.seconds(start, token_marks[0]),
        itl_s=[clock.seconds(a, b) for a, b in zip(token_marks, token_marks[1:])],
        wall_s=wall,
        forward_s=sum(clock.seconds(a, b) for a, b in forward_spans),
        kv_cache_bytes=kv_after_prefill,
        kv_cache_bytes_final=cache_bytes(cache),
        kept_tokens=kept,
        generated_tokens=new_tokens * batch,
        token_ids=torch.cat(tokens, dim=1).tolist(),
    )


# ----------------------------------------------------------------------------- cells and runs


@dataclass(frozen=True)
class PerfCell:
    model: str
    method: str
    retention: float
    context_tokens: int
    batch_size: int = 1


@dataclass
class PerfSettings:
    new_tokens: int = 64
    warmup: int = 1
    repeats: int = 3
    seed: int = 0
    power_sample_hz: float = 20.0
    task: str = "qasper"  # the check judges the cell as this task's (question-aware) cell
    method_kwargs: dict = field(default_factory=dict)


def check_perf_cell(cell: PerfCell, task: str) -> None:
    """The generation check (eviction + batch > 1 refused, retention rules): the same code, question-aware."""
    from kvcache_bench.study.cell_checks import Cell, check_cell

    check_cell(Cell("perf", task, cell.model, cell.method, "question_aware", cell.retention, cell.batch_size))


def measurement_order(cells: list[PerfCell], repeats: int, seed: int) -> list[tuple[PerfCell, int]]:
    """Every (cell, repeat) once, in a seeded shuffle: drift (clocks, temperature) spreads over methods."""
    runs = [(cell, repeat) for cell in cells for repeat in range(repeats)]
    random.Random(seed).shuffle(runs)
    return runs


def model_architecture(model) -> dict:
    config = model.config
    return {
        "model_type": getattr(config, "model_type", None),
        "hidden_size": getattr(config, "hidden_size", None),
        "num_hidden_layers": getattr(config, "num_hidden_layers", None),
        "num_attention_heads": getattr(config, "num_attention_heads", None),
        "num_key_value_heads": getattr(config, "num_key_value_heads", None),
        "intermediate_size": getattr(config, "intermediate_size", None),
        "vocab_size": getattr(config, "vocab_size", None),
        "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
        "parameters": sum(p.numel() for p in model.parameters()),
        "parameter_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
    }


def _software_versions() -> dict:
    from kvcache_bench.manifest import package_versions

    return {
        name: version
        for name, version in package_versions().items()
        if name in ("python", "torch", "transformers", "kvpress", "nvidia-ml-py")
    }


def _measure_once(model, input_ids, press, settings: PerfSettings, hardware) -> dict:
    cuda = input_ids.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(input_ids.device)
        torch.cuda.reset_peak_memory_stats(input_ids.device)
    with hardware.sampler(settings.power_sample_hz) as sampler:
        timing = timed_generation(model, input_ids, press, settings.new_tokens)
    power = sampler.result()
    itl = timing.itl_s
    decode_seconds = sum(itl)
    return {
        "ttft_s": timing.ttft_s,
        "itl_mean_s": decode_seconds / len(itl) if itl else None,
        "itl_p50_s": percentile(itl, 50) if itl else None,
        "itl_p95_s": percentile(itl, 95) if itl else None,
        "tokens_per_s": timing.generated_tokens / timing.wall_s,
        "decode_tokens_per_s": len(itl) * input_ids.shape[0] / decode_seconds if itl else None,
        "wall_s": timing.wall_s,
        "forward_s": timing.forward_s,
        "harness_overhead_s": max(0.0, timing.wall_s - timing.forward_s),
        "harness_overhead_fraction": max(0.0, 1.0 - timing.forward_s / timing.wall_s),
        "generated_tokens": timing.generated_tokens,
        "kv_cache_bytes": timing.kv_cache_bytes,
        "kv_cache_bytes_final": timing.kv_cache_bytes_final,
        "kept_tokens": timing.kept_tokens,
        "torch_peak_memory_bytes": int(torch.cuda.max_memory_allocated(input_ids.device)) if cuda else None,
        **power,
        "energy_per_token_j": power["energy_j"] / timing.generated_tokens,
    }


def measure_cells(
    model,
    cells: list[PerfCell],
    context_ids: dict[int, list[int]],
    settings: PerfSettings,
    hardware,
    *,
    progress=None,
) -> list[dict]:
    """Warm up every cell once (unmeasured), then run all (cell, repeat) pairs in a seeded shuffle.

    Returns one record per measured run. ``context_ids`` maps a context length to its token ids.
    """
    from kvcache_bench.engine.decoders.press_while_decoding import presses_while_decoding
    from kvcache_bench.methods.registry import build_press

    for cell in cells:
        check_perf_cell(cell, settings.task)
        if len(context_ids[cell.context_tokens]) != cell.context_tokens:
            raise ValueError(f"context for {cell.context_tokens} tokens has {len(context_ids[cell.context_tokens])}")
    device = next(model.parameters()).device
    presses = {
        cell: build_press(cell.method, cell.retention, settings.method_kwargs.get(cell.method), seed=settings.seed)
        for cell in cells
    }
    for cell, press in presses.items():
        if presses_while_decoding(press) is not None:
            raise ValueError(
                f"{cell.method} compresses while decoding, and the perf pass times a press over the prompt only: it "
                "would time the full cache under the method's name. Leave decoding-time presses out of perf.methods."
            )
    inputs = {cell: torch.tensor([context_ids[cell.context_tokens]] * cell.batch_size, device=device) for cell in cells}
    describe = hardware.describe()
    architecture = model_architecture(model)
    software = _software_versions()
    torch.manual_seed(settings.seed)
    for cell in cells:
        for _ in range(settings.warmup):
            timed_generation(model, inputs[cell], presses[cell], settings.new_tokens)
    records = []
    for order_index, (cell, repeat) in enumerate(measurement_order(cells, settings.repeats, settings.seed)):
        measured = _measure_once(model, inputs[cell], presses[cell], settings, hardware)
        record = {
            **asdict(cell),
            "repeat": repeat,
            "order_index": order_index,
            "new_tokens": settings.new_tokens,
            "warmup_runs": settings.warmup,
            "question_mode": "question_aware",
            "seed": settings.seed,
            **measured,
            **describe,
            "device": str(device),
            "architecture": architecture,
            "software": software,
            "method_kwargs": settings.method_kwargs.get(cell.method, {}),
        }
        records.append(record)
        if progress:
            progress(record)
    return records


def run_perf_job(
    cell: PerfCell,
    *,
    loaded,
    settings: PerfSettings,
    context_source: str,
    rows: list[dict] | None,
    hardware: str = "auto",
) -> tuple[list[dict], dict]:
    """The ``perf`` rule's work on the model its job loaded (``runtime.gpu_job``): build the context,
    measure one cell.

    Returns the records and the job's own accounting: load time, total time, and the share of the
    measured runs' wall time spent outside the model's forward calls.
    """
    job_start = time.perf_counter() - loaded.load_seconds
    check_perf_cell(cell, settings.task)
    torch.manual_seed(settings.seed)
    model = loaded.model
    backend = pick_hardware(hardware, loaded.device)
    if context_source == "dataset":
        context = dataset_context_ids(loaded.tokenizer, settings.task, rows or [], cell.context_tokens, settings.seed)
    elif context_source == "filler":
        context = filler_context_ids(cell.context_tokens, model.config.vocab_size, settings.seed + cell.context_tokens)
    else:
        raise ValueError(f"unknown context_source {context_source!r}; use dataset or filler")
    loaded = time.perf_counter()
    records = measure_cells(model, [cell], {cell.context_tokens: context}, settings, backend)
    for record in records:
        record["context_source"] = context_source
    finished = time.perf_counter()
    measured_wall = sum(r["wall_s"] for r in records)
    accounting = {
        "load_s": loaded - job_start,
        "job_s": finished - job_start,
        "measured_wall_s": measured_wall,
        "measured_forward_s": sum(r["forward_s"] for r in records),
        "harness_overhead_fraction": 1.0 - sum(r["forward_s"] for r in records) / measured_wall,
        "hardware_backend": backend.backend,
    }
    return records, accounting

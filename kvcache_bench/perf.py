"""The performance pass: latency, memory, KV-cache bytes and energy of one method at one context length.

What keeps these numbers about the method rather than the harness:
  * every run generates exactly ``new_tokens`` tokens (greedy, end-of-sequence ignored), so methods are
    compared on the same amount of decoding;
  * positions after eviction continue at the ORIGINAL prompt length, as ``engine.generate_one`` does;
  * the decode loop never reads a token back to the host (nothing to check when EOS is ignored), so CUDA
    launches stay asynchronous; time is taken with CUDA events on the GPU timeline;
  * each cell gets an unmeasured warm-up, measured runs are repeated and ordered by a seeded shuffle;
  * the harness's own overhead (wall time outside the model's forward calls) is recorded for every run;
  * records carry the hardware they came from; tables and figures refuse to mix hardware
    (``MixedHardwareError``): a fake backend (CPU, or no NVML) is never compared with a real GPU, nor one
    GPU model with another.

Command line (``python -m kvcache_bench.perf ...``):
  table RECORDS.jsonl...   the Markdown table the README shows for reference records.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import random
import resource
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

PERF_CELL_KEYS = ["model", "method", "retention", "context_tokens", "batch_size"]
HARDWARE_KEYS = ["hardware_backend", "gpu_name"]
FAKE_POWER_WATTS = 100.0  # the fake backend's constant "power draw", so energy columns exist on CPU
SUMMARY_METRICS = [
    "ttft_s",
    "itl_mean_s",
    "itl_p50_s",
    "itl_p95_s",
    "tokens_per_s",
    "decode_tokens_per_s",
    "wall_s",
    "harness_overhead_fraction",
    "torch_peak_memory_bytes",
    "driver_peak_memory_bytes",
    "kv_cache_bytes",
    "kept_tokens",
    "energy_j",
    "energy_per_token_j",
    "power_mean_w",
    "sm_clock_mean_mhz",
]


class MixedHardwareError(ValueError):
    """Records from different hardware (fake vs real, or two GPU models) were about to share a table or figure."""


class HardwareUnavailableError(RuntimeError):
    pass


# ----------------------------------------------------------------------------- hardware backends


class PowerSampler:
    """A thread sampling power (W), device memory in use (bytes) and SM clock (MHz) at ``hz``.

    Energy comes from the driver's cumulative counter when the backend has one (exact), otherwise from
    integrating the sampled power over the run (trapezoids, edges held at the nearest sample).
    """

    def __init__(self, read_power_w, read_memory_bytes, read_sm_clock_mhz=None, read_energy_mj=None, hz: float = 20.0):
        if hz < 10:
            raise ValueError(f"power sampling below 10 Hz misses short runs; got {hz} Hz")
        self._read_power_w = read_power_w
        self._read_memory_bytes = read_memory_bytes
        self._read_sm_clock_mhz = read_sm_clock_mhz
        self._read_energy_mj = read_energy_mj
        self._period = 1.0 / hz
        self._stop = threading.Event()
        self._samples: list[tuple[float, float, float, float | None]] = []
        self._thread = threading.Thread(target=self._loop, name="power-sampler", daemon=True)

    def _sample(self) -> None:
        clock = self._read_sm_clock_mhz() if self._read_sm_clock_mhz else None
        self._samples.append((time.perf_counter(), self._read_power_w(), self._read_memory_bytes(), clock))

    def _loop(self) -> None:
        while not self._stop.wait(self._period):
            self._sample()

    def __enter__(self):
        # The thread starts (and, on exit, stops) outside the measured window: at milliseconds per run,
        # thread start-up would otherwise count as energy the run did not use.
        self._thread.start()
        self._energy_start = self._read_energy_mj() if self._read_energy_mj else None
        self._start = time.perf_counter()
        self._sample()
        return self

    def __exit__(self, *exc_info):
        self._sample()
        self._end = time.perf_counter()
        self._energy_end = self._read_energy_mj() if self._read_energy_mj else None
        self._stop.set()
        self._thread.join()
        self._samples = [s for s in self._samples if s[0] <= self._end]  # the thread may sample once more
        return False

    def result(self) -> dict:
        times = [s[0] for s in self._samples]
        watts = [s[1] for s in self._samples]
        integrated = watts[0] * (times[0] - self._start) + watts[-1] * (self._end - times[-1])
        integrated += sum((t1 - t0) * (w0 + w1) / 2 for t0, t1, w0, w1 in zip(times, times[1:], watts, watts[1:]))
        duration = max(self._end - self._start, 1e-12)
        clocks = [s[3] for s in self._samples if s[3] is not None]
        counter = None
        if self._energy_start is not None and self._energy_end is not None:
            counter = (self._energy_end - self._energy_start) / 1000.0
        return {
            "energy_j": counter if counter is not None else integrated,
            "energy_source": "nvml_energy_counter" if counter is not None else "integrated_power_samples",
            "energy_integrated_j": integrated,
            "power_mean_w": integrated / duration,
            "power_samples": len(self._samples),
            "power_sample_hz": (len(self._samples) - 1) / duration,
            "driver_peak_memory_bytes": max(s[2] for s in self._samples),
            "sm_clock_mean_mhz": sum(clocks) / len(clocks) if clocks else None,
        }


class FakeHardware:
    """Lets the pipeline run without a GPU. Its numbers are the CPU's time and the process's peak RSS,
    and a constant 100 W: they show the plumbing works, never what a GPU costs."""

    backend = "fake"

    def describe(self) -> dict:
        return {
            "hardware_backend": self.backend,
            "gpu_name": "none (fake backend)",
            "driver_version": None,
            "cuda_version": None,
            "gpu_memory_total_bytes": None,
            "sm_clock_max_mhz": None,
            "memory_clock_max_mhz": None,
            "power_limit_w": None,
        }

    def sampler(self, hz: float) -> PowerSampler:
        # ru_maxrss is KiB on Linux: the process's peak resident memory, the nearest thing to a device peak.
        return PowerSampler(lambda: FAKE_POWER_WATTS, lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, hz=hz)


class NvmlHardware:
    """A real NVIDIA GPU read through NVML (nvidia-ml-py): power, energy counter, memory, clocks."""

    backend = "nvml"

    def __init__(self, device: torch.device):
        try:
            import pynvml
        except ImportError as error:
            raise HardwareUnavailableError(f"nvidia-ml-py is not installed: {error}") from error
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as error:
            raise HardwareUnavailableError(f"NVML did not initialise: {error}") from error
        self.nvml = pynvml
        self.handle = self._handle_for(device)
        try:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
            self.has_energy_counter = True
        except pynvml.NVMLError:
            self.has_energy_counter = False

    def _handle_for(self, device: torch.device):
        """NVML numbers GPUs physically; CUDA_VISIBLE_DEVICES renumbers them: match by PCI bus id."""
        index = device.index if device.index is not None else torch.cuda.current_device()
        properties = torch.cuda.get_device_properties(index)
        bus = getattr(properties, "pci_bus_id", None)
        if bus is not None:
            bus_id = f"{getattr(properties, 'pci_domain_id', 0):08X}:{bus:02X}:{getattr(properties, 'pci_device_id', 0):02X}.0"
            with contextlib.suppress(self.nvml.NVMLError):
                return self.nvml.nvmlDeviceGetHandleByPciBusId(bus_id)
        return self.nvml.nvmlDeviceGetHandleByIndex(index)

    @staticmethod
    def _text(value) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    def describe(self) -> dict:
        nvml, handle = self.nvml, self.handle

        def optional(read):
            with contextlib.suppress(nvml.NVMLError):
                return read()
            return None

        return {
            "hardware_backend": self.backend,
            "gpu_name": self._text(nvml.nvmlDeviceGetName(handle)),
            "driver_version": self._text(nvml.nvmlSystemGetDriverVersion()),
            "cuda_version": torch.version.cuda,
            "gpu_memory_total_bytes": int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
            "sm_clock_max_mhz": optional(lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM)),
            "memory_clock_max_mhz": optional(lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_MEM)),
            "power_limit_w": optional(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0),
        }

    def sampler(self, hz: float) -> PowerSampler:
        nvml, handle = self.nvml, self.handle
        return PowerSampler(
            lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            lambda: int(nvml.nvmlDeviceGetMemoryInfo(handle).used),
            lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
            (lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle)) if self.has_energy_counter else None,
            hz=hz,
        )


def pick_hardware(requested: str, device: torch.device):
    """``auto``: NVML on a CUDA device where NVML works, the fake backend otherwise."""
    if requested not in ("auto", "nvml", "fake"):
        raise ValueError(f"unknown hardware backend {requested!r}; use auto, nvml or fake")
    if requested == "fake" or (requested == "auto" and device.type != "cuda"):
        return FakeHardware()
    if device.type != "cuda":
        raise HardwareUnavailableError(f"hardware backend nvml needs a CUDA device, got {device}")
    try:
        return NvmlHardware(device)
    except HardwareUnavailableError:
        if requested == "nvml":
            raise
        return FakeHardware()


# ----------------------------------------------------------------------------- contexts


def filler_context_ids(length: int, vocab_size: int, seed: int, reserved: int = 4) -> list[int]:
    """Seeded random token ids (skipping the first ``reserved`` ids, where special tokens usually live)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(reserved, vocab_size, (length,), generator=generator).tolist()


def dataset_context_ids(tokenizer, task: str, rows: list[dict], length: int, seed: int) -> list[int]:
    """Exactly ``length`` tokens: the task prompt's question part, after documents of the dataset
    (seeded order, concatenated, cut to fit). The press sees all of it (question-aware)."""
    from .prompts import split_prompt

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


class _CudaClock:
    """Marks on the GPU timeline (CUDA events): reading them needs no sync until the run ends."""

    def __init__(self, device):
        self.device = device

    def mark(self):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def finish(self):
        torch.cuda.synchronize(self.device)

    @staticmethod
    def seconds(a, b) -> float:
        return a.elapsed_time(b) / 1000.0


class _WallClock:
    def __init__(self, device=None):
        pass

    def mark(self):
        return time.perf_counter()

    def finish(self):
        pass

    @staticmethod
    def seconds(a, b) -> float:
        return b - a


def cache_bytes(cache) -> int:
    """Bytes of keys + values the cache holds, summed over layers (what compression actually saved)."""
    total = 0
    for layer in cache.layers:
        for tensor in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(tensor, torch.Tensor):
                total += tensor.numel() * tensor.element_size()
    return total


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), ``q`` in [0, 100]."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


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

    from .caches import mean_cache_length

    if new_tokens < 1:
        raise ValueError("new_tokens must be >= 1")
    device = input_ids.device
    clock = _CudaClock(device) if device.type == "cuda" else _WallClock()
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
        outputs = model(input_ids=next_token, past_key_values=cache, position_ids=positions[:, step - 1 : step], use_cache=True)
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
    from .checks import Cell, check_cell

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
    from .manifest import package_versions

    return {name: version for name, version in package_versions().items() if name in ("python", "torch", "transformers", "kvpress", "nvidia-ml-py")}


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
    from .methods import build_press

    for cell in cells:
        check_perf_cell(cell, settings.task)
        if len(context_ids[cell.context_tokens]) != cell.context_tokens:
            raise ValueError(f"context for {cell.context_tokens} tokens has {len(context_ids[cell.context_tokens])}")
    device = next(model.parameters()).device
    presses = {
        cell: build_press(cell.method, cell.retention, settings.method_kwargs.get(cell.method), seed=settings.seed) for cell in cells
    }
    inputs = {
        cell: torch.tensor([context_ids[cell.context_tokens]] * cell.batch_size, device=device) for cell in cells
    }
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
    model_settings,
    settings: PerfSettings,
    context_source: str,
    rows: list[dict] | None,
    hardware: str = "auto",
) -> tuple[list[dict], dict]:
    """The ``perf`` rule's work: load the model, build the context, measure one cell.

    Returns the records and the job's own accounting: load time, total time, and the share of the
    measured runs' wall time spent outside the model's forward calls.
    """
    from .loading import load_model, load_tokenizer, pick_device
    from .methods import attention_implementation_for

    job_start = time.perf_counter()
    check_perf_cell(cell, settings.task)
    torch.manual_seed(settings.seed)
    device = pick_device(model_settings.device)
    backend = pick_hardware(hardware, device)
    attention = attention_implementation_for(cell.method, model_settings.attn_implementation)
    model = load_model(model_settings.path, model_settings.dtype, attention, device, model_settings.trust_remote_code)
    if context_source == "dataset":
        tokenizer = load_tokenizer(model_settings.path, model_settings.trust_remote_code)
        context = dataset_context_ids(tokenizer, settings.task, rows or [], cell.context_tokens, settings.seed)
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


# ----------------------------------------------------------------------------- tables


def hardware_of(record: dict) -> tuple[str, str]:
    return tuple(record.get(key) for key in HARDWARE_KEYS)


def require_one_hardware(records, what: str):
    """The one (backend, GPU model) of these records, or ``MixedHardwareError`` naming them all."""
    import pandas as pd

    frame = records if isinstance(records, pd.DataFrame) else pd.DataFrame(list(records))
    if frame.empty:
        raise ValueError(f"no performance records for {what}")
    missing = [key for key in HARDWARE_KEYS if key not in frame.columns]
    if missing:
        raise MixedHardwareError(f"{what}: records lack {missing}; cannot tell which hardware measured them")
    kinds = sorted({tuple(row) for row in frame[HARDWARE_KEYS].astype(str).itertuples(index=False)})
    if len(kinds) > 1:
        named = "; ".join(f"{backend} / {gpu}" for backend, gpu in kinds)
        raise MixedHardwareError(
            f"{what} would mix hardware ({named}). Fake-backend numbers never sit beside real ones and one "
            "GPU model never beside another: measure all cells on one GPU model (e.g. pin gpu_model on the "
            "cluster) or tabulate each hardware's records separately."
        )
    return kinds[0]


def summarize_perf(records: list[dict]):
    """One row per cell: the median over repeats of each metric, with the hardware that measured it."""
    import pandas as pd

    require_one_hardware(records, "the performance table")
    frame = pd.DataFrame(records)
    for metric in SUMMARY_METRICS:
        if metric not in frame.columns:
            frame[metric] = float("nan")
    frame[SUMMARY_METRICS] = frame[SUMMARY_METRICS].apply(pd.to_numeric, errors="coerce")
    grouped = frame.groupby(PERF_CELL_KEYS, dropna=False)
    summary = grouped[SUMMARY_METRICS].median()
    summary["repeats"] = grouped.size()
    summary["new_tokens"] = grouped["new_tokens"].first()
    for key in HARDWARE_KEYS + ["driver_version", "energy_source"]:
        summary[key] = grouped[key].first() if key in frame.columns else None
    summary = summary.reset_index()
    return summary.sort_values(["model", "context_tokens", "method", "retention"], ascending=[True, True, True, False]).reset_index(drop=True)


def markdown_table(summary) -> str:
    """The README's rendering of a perf summary (one hardware only)."""
    from .methods import METHODS

    backend, gpu = require_one_hardware(summary, "the Markdown table")
    header = (
        "| context | method | kept | TTFT (ms) | ITL mean / p50 / p95 (ms) | tokens/s | torch peak (GiB) | "
        "KV cache (MiB) | J/token | harness overhead |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    lines = [f"Hardware: {gpu} ({backend} backend).", "", header]

    def number(value, scale=1.0, digits=1):
        return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value * scale:.{digits}f}"

    for row in summary.to_dict("records"):
        label = METHODS[row["method"]].label if row["method"] in METHODS else row["method"]
        lines.append(
            f"| {int(row['context_tokens'])} | {label} | {row['retention'] * 100:.0f}% | {number(row['ttft_s'], 1e3)} | "
            f"{number(row['itl_mean_s'], 1e3)} / {number(row['itl_p50_s'], 1e3)} / {number(row['itl_p95_s'], 1e3)} | "
            f"{number(row['tokens_per_s'])} | {number(row['torch_peak_memory_bytes'], 1 / 2**30, 2)} | "
            f"{number(row['kv_cache_bytes'], 1 / 2**20, 0)} | {number(row['energy_per_token_j'], 1, 2)} | "
            f"{number(row['harness_overhead_fraction'], 100, 2)}% |"
        )
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- the plan: GPU-hours before running

# Stated defaults for cells no perf record covers: an 8B model in bf16 on one H100/H200-class GPU,
# decoding batch 1 with Hugging Face's Python loop (launch-bound). Override in perf.estimate.defaults.
ESTIMATE_DEFAULTS = {
    "load_s": 60.0,  # loading weights and kvpress, once per job
    "prefill_tokens_per_s": 10000.0,
    "decode_s_per_token": 0.03,
    "prompt_tokens": 4096,  # a generation prompt's length when the plan cannot know it
}


def choose_estimate_hardware(records: list[dict], gpu_name: str | None = None) -> list[dict]:
    """The records of ONE hardware: the named GPU, else the only real GPU measured, else the fake backend."""
    if gpu_name:
        return [r for r in records if r.get("gpu_name") == gpu_name]
    real = [r for r in records if r.get("hardware_backend") != "fake"]
    if real:
        gpus = sorted({str(r.get("gpu_name")) for r in real})
        if len(gpus) > 1:
            raise MixedHardwareError(
                f"perf records from several GPU models ({', '.join(gpus)}): set perf.estimate.gpu_name to the one to plan for"
            )
        return real
    return records


def _per_run_seconds(matched: list[dict], prompt_tokens: int, new_tokens: int) -> float:
    """Prefill scaled linearly from the nearest measured context length, plus decode at its ITL."""
    nearest = min({r["context_tokens"] for r in matched}, key=lambda c: (abs(c - prompt_tokens), c))
    at = [r for r in matched if r["context_tokens"] == nearest]
    ttft = sorted(r["ttft_s"] for r in at)[len(at) // 2]
    itl = sorted(r["itl_mean_s"] or 0.0 for r in at)[len(at) // 2]
    return ttft * prompt_tokens / nearest + (new_tokens - 1) * itl


def estimate_job(job: dict, records: list[dict], same_cost_as: dict, defaults: dict) -> tuple[float, str, int]:
    """(GPU seconds, where the estimate came from, prompt tokens assumed) for one planned job."""
    settings = {**ESTIMATE_DEFAULTS, **defaults}
    prompt = job["prompt_tokens"] or min(int(settings["prompt_tokens"]), job["max_context_tokens"])
    model = same_cost_as.get(job["model"], job["model"])
    same_model = [r for r in records if r.get("model") == model and r.get("batch_size", 1) == job["batch_size"]]
    exact = [r for r in same_model if r["method"] == job["method"] and abs(r["retention"] - job["retention"]) < 1e-9]
    baseline = [r for r in same_model if r["method"] == "full_cache"]
    if exact or baseline:
        matched = exact or baseline
        per_run = _per_run_seconds(matched, prompt, job["new_tokens"])
        gpu = matched[0].get("gpu_name")
        source = f"measured {model} on {gpu}" + ("" if exact else " (full cache)")
    else:
        per_run = prompt / settings["prefill_tokens_per_s"] + (job["new_tokens"] - 1) * settings["decode_s_per_token"]
        source = "defaults"
    return settings["load_s"] + job["runs"] * per_run, source, prompt


def plan_report(jobs: list[dict], records: list[dict], *, same_cost_as=None, defaults=None, gpu_name=None, exists=None) -> str:
    """Like ``snakemake -n``, in hours: every GPU job not yet done, its estimate, and totals per rule."""
    import os

    exists = exists or os.path.exists
    records = choose_estimate_hardware(records, gpu_name) if records else []
    lines, totals, done = [], {}, 0
    header = f"{'stage':<9} {'model':<28} {'method':<19} {'kept':>5} {'batch':>5} {'runs':>5} {'tokens':>7} {'GPU-h':>8}  estimate"
    lines.append(header)
    for job in jobs:
        if exists(job["output"]):
            done += 1
            continue
        seconds, source, prompt = estimate_job(job, records, same_cost_as or {}, defaults or {})
        count, hours = totals.get(job["stage"], (0, 0.0))
        totals[job["stage"]] = (count + 1, hours + seconds / 3600)
        tokens = prompt if job["prompt_tokens"] else f"~{prompt}"
        lines.append(
            f"{job['stage']:<9} {job['model']:<28} {job['method']:<19} {job['retention'] * 100:>4.0f}% {job['batch_size']:>5} "
            f"{job['runs']:>5} {tokens!s:>7} {seconds / 3600:>8.4f}  {source}"
        )
    total_jobs = sum(count for count, _ in totals.values())
    total_hours = sum(hours for _, hours in totals.values())
    settings = {**ESTIMATE_DEFAULTS, **(defaults or {})}
    lines += ["", "Job stats:", f"{'stage':<9} {'jobs':>6} {'GPU-hours':>10}"]
    lines += [f"{rule:<9} {count:>6} {hours:>10.3f}" for rule, (count, hours) in sorted(totals.items())]
    lines.append(f"{'total':<9} {total_jobs:>6} {total_hours:>10.3f}")
    lines.append(f"Already done (not counted): {done}")
    if records:
        backend, gpu = records[0].get("hardware_backend"), records[0].get("gpu_name")
        lines.append(f"Measured records: {len(records)} runs on {gpu} ({backend} backend).")
    lines.append(
        "Defaults where nothing was measured (perf.estimate.defaults): "
        f"load {settings['load_s']:g} s per job, prefill {settings['prefill_tokens_per_s']:g} tokens/s, "
        f"decode {settings['decode_s_per_token']:g} s/token, prompts of {settings['prompt_tokens']} tokens."
    )
    return "\n".join(lines) + "\n"


def _main(argv: list[str] | None = None) -> int:
    from .io import read_jsonl

    parser = argparse.ArgumentParser(prog="python -m kvcache_bench.perf", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    table = commands.add_parser("table", help="print the Markdown table of perf records (one hardware only)")
    table.add_argument("records", nargs="+", help="perf record JSONL files")
    args = parser.parse_args(argv)
    records = [record for path in args.records for record in read_jsonl(Path(path))]
    sys.stdout.write(markdown_table(summarize_perf(records)))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())

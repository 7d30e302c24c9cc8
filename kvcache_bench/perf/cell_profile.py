"""Where a study cell's time goes: the cell run under torch.profiler by the ``profile_cell`` rule (opt-in).

The cell runs twice in one process. First unprofiled, on as many rows as one decode batch, so lazy kernel loading,
the warm-up and the batch shape's CUDA graph stay out of the profile; then every row under torch.profiler. The
profiler's own overhead lands on the figures, so they say where the time goes, not how long a cell takes (its
generate job's records say that). On a GPU, time is every kernel's time on the device, by its name: a CUDA
graph's replayed decode steps and Triton kernels (Liger's) have no aten operator to charge them to. On the CPU it
is each aten operator's own CPU time. Both are grouped in four kinds; on a GPU, wall time the device was not busy
is the host's (Python, launches, syncs such as a ``.item()``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)

# (kind, substrings of aten operator or GPU kernel names), first match wins (attention first: flash kernels are
# cutlass templates); the rest is elementwise work and reductions (Liger's fused RMSNorm, SwiGLU and RoPE among them)
KINDS = (
    ("attention", ("scaled_dot_product", "attention", "flash", "sdpa", "fmha")),
    (
        "matrix products",
        ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm", "nvjet", "gemm", "splitKreduce"),
    ),
    (
        "copies, concatenation, indexing",
        ("aten::copy_", "aten::cat", "aten::index", "aten::gather", "aten::scatter", "aten::stack", "aten::fill_")
        + ("copy_kernel", "CatArray", "gather", "scatter", "index_elementwise", "Memcpy", "Memset", "Fill"),
    ),
)
OTHER_KIND = "elementwise and reductions"
TOP_OPERATORS = 25


def kind_of(name: str) -> str:
    for kind, markers in KINDS:
        if any(marker in name for marker in markers):
            return kind
    return OTHER_KIND


@dataclass(frozen=True)
class OperatorTime:
    """One GPU kernel's (or, on the CPU, aten operator's) calls and own time: they add up, none counted twice."""

    name: str
    calls: int
    seconds: float


def _is_kernel(event) -> bool:
    return str(getattr(event, "device_type", "")).endswith("CUDA")


def operator_times(events, on_gpu: bool) -> list[OperatorTime]:
    """From ``profile.key_averages()``, largest first: on a GPU every kernel, memcpy and memset by its device time
    (an aten operator's device time is its kernels', and graph replays and Triton launches have no operator); on
    the CPU every aten operator by its own CPU time (Python scopes repeat their operators')."""
    times = []
    for event in events:
        if on_gpu:
            if not _is_kernel(event):
                continue
            micros = getattr(event, "self_device_time_total", None)
            micros = event.self_cuda_time_total if micros is None else micros
        else:
            if not event.key.startswith("aten::"):
                continue
            micros = event.self_cpu_time_total
        if micros > 0:
            times.append(OperatorTime(event.key, int(event.count), micros / 1e6))
    return sorted(times, key=lambda op: op.seconds, reverse=True)


@dataclass(frozen=True)
class CellProfile:
    """What one profiled pass over a cell's rows measured."""

    device: str
    on_gpu: bool
    examples: int
    wall_seconds: float
    operators: list[OperatorTime]

    def summary(self) -> dict:
        busy = sum(op.seconds for op in self.operators)
        per_kind: dict[str, float] = {}
        for op in self.operators:
            per_kind[kind_of(op.name)] = per_kind.get(kind_of(op.name), 0.0) + op.seconds
        examples = max(1, self.examples)
        return {
            "device": self.device,
            "examples": self.examples,
            "wall_seconds": round(self.wall_seconds, 4),
            "wall_seconds_per_example": round(self.wall_seconds / examples, 5),
            "busy_seconds": round(busy, 4),
            "busy_is": "GPU time of every kernel, memcpy and memset" if self.on_gpu else "CPU time of aten operators",
            # the GPU idle while the host runs Python, launches kernels or waits on a sync; on the CPU busy is the host
            "host_seconds": round(self.wall_seconds - busy, 4) if self.on_gpu else None,
            "kinds": [
                {
                    "kind": kind,
                    "seconds": round(seconds, 4),
                    "seconds_per_example": round(seconds / examples, 5),
                    "share_of_busy": round(seconds / busy, 4) if busy else 0.0,
                }
                for kind, seconds in sorted(per_kind.items(), key=lambda item: item[1], reverse=True)
            ],
            "top_operators": [
                {"operator": op.name, "calls": op.calls, "seconds": round(op.seconds, 5)}
                for op in self.operators[:TOP_OPERATORS]
            ],
            "note": "under torch.profiler: its overhead is in these times; the cell's cost is its generate records'",
        }


def profile_cell(rows: list[dict], run, loaded, engine) -> tuple[CellProfile, str]:
    """``engine(rows, run, loaded=...)`` (a cell runner) warmed up unprofiled on one decode batch of rows, then on
    every row under torch.profiler; the profile and the profiler's own table (largest own device time first)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    on_gpu = loaded.device.type == "cuda"
    warm_rows = rows[: max(1, run.decode_batch_size)]
    list(engine(warm_rows, run, loaded=loaded, progress=False))
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    started = time.perf_counter()
    with profile(activities=activities) as profiler:
        records = list(engine(rows, run, loaded=loaded, progress=False))
        if on_gpu:
            torch.cuda.synchronize(loaded.device)
    wall = time.perf_counter() - started
    events = profiler.key_averages()
    table = events.table(sort_by="self_cuda_time_total" if on_gpu else "self_cpu_time_total", row_limit=40)
    name = torch.cuda.get_device_name(loaded.device) if on_gpu else "cpu"
    return CellProfile(name, on_gpu, len(records), wall, operator_times(events, on_gpu)), table


def write_cell_profile(job, loaded) -> None:
    """The profile_cell rule's work, inside its ``gpu_job``: the cell's rows on ``loaded`` under torch.profiler,
    the summary and torch's table, each with its manifest."""
    from kvcache_bench.files import read_jsonl, write_json_atomic, write_text_atomic
    from kvcache_bench.manifest import write_manifest
    from kvcache_bench.runtime.job import cell_engine
    from kvcache_bench.workflow import params_of, settings_of

    p = settings_of(job)
    engine, run = cell_engine(job, loaded)
    measured, table = profile_cell(read_jsonl(job.input.rows), run, loaded, engine)
    summary = measured.summary()
    write_json_atomic(job.output.profile, summary)
    write_text_atomic(job.output.table, table)
    for output in (job.output.profile, job.output.table):
        write_manifest(output, params_of(job), p.seed)
    busiest = ", ".join(f"{k['kind']} {k['share_of_busy']:.0%}" for k in summary["kinds"][:3])
    log.info("%d examples in %.2fs under the profiler; %s", summary["examples"], summary["wall_seconds"], busiest)

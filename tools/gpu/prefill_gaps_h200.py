"""Where the GPU waits on the host during a decode-32 cell's prefills, and which line of Python it waits on.

    python tools/gpu/prefill_gaps_h200.py --out "$OUT" [--kernels liger]     # on the GPU
    python tools/gpu/prefill_gaps_h200.py --tiny --out /tmp/gaps          # 2-layer stand-in on CPU: no GPU, no gaps

Each example is prefilled and compressed alone (SnapKV 50%, question-aware), as the decode-32 cell's strategy
does it (``decode_many``: the pass under the press, the snapshot, one synchronisation to time it). The prompts are
run once unprofiled (allocator, cuDNN plans), then again under torch.profiler with Python stacks. From the trace:
every stretch where no kernel runs, and, for each, the innermost line of this project, kvpress, transformers or
Liger that was launching the kernel that ended it: what the GPU waited for. Writes prefill_gaps_h200.json.

No rule does this: profile_cell sums the GPU's busy time by kind; this reads the trace's timeline between kernels.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_common import random_prompts, run_header  # noqa: E402

from kvcache_bench.data.model_shapes import LLAMA_31_8B_SHAPE, TINY_LLAMA_SHAPE, build_random_model  # noqa: E402
from kvcache_bench.engine.kernels import use_kernels  # noqa: E402
from kvcache_bench.engine.loading import synchronize  # noqa: E402
from kvcache_bench.engine.prefill import prefill_example  # noqa: E402
from kvcache_bench.engine.prefilled import prefilled_from_cache  # noqa: E402
from kvcache_bench.methods.registry import build_press  # noqa: E402

OWN_CODE = ("kvcache_bench/", "kvpress/", "transformers/", "liger_kernel/", "torch/nn/functional")
GAP_US = 5.0  # shorter stretches are a launch's own latency between queued kernels, not a wait


def prefill_like_the_cell(model, prompt, press, wait: bool) -> float:
    """decode_many's per-example work before its decode batch: the pass under the press and the snapshot, timed.
    ``wait``: wait for the GPU after each example, as decode_many did before engine/example_clock.py."""
    start = time.perf_counter()
    done = prefill_example(model, prompt, press, "question_aware", run_held_back=False)
    prefilled_from_cache(model, done, prompt.length, copy=False, key_masks=True)
    if wait:
        synchronize(model.device)
    return time.perf_counter() - start


def prefills(model, prompts, press, wait: bool) -> list[float]:
    """Each prompt's seconds: host time per example with ``wait``, else the whole run's wall split evenly."""
    started = time.perf_counter()
    seconds = [prefill_like_the_cell(model, p, press, wait) for p in prompts]
    synchronize(model.device)
    return seconds if wait else [(time.perf_counter() - started) / len(prompts)] * len(prompts)


def site(stack: list[str]) -> str:
    """The innermost frame of the code this project runs (``stack`` is innermost first)."""
    for frame in stack:
        if any(part in frame for part in OWN_CODE):
            return frame
    return stack[0] if stack else "?"


def gaps_from_trace(trace: dict) -> tuple[float, float, list[dict]]:
    """(GPU busy µs, first kernel to last kernel µs, one entry per gap: its µs and the launching Python stack)."""
    events = trace["traceEvents"]
    kernels = sorted(
        (e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e),
        key=lambda e: e["ts"],
    )
    launches = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    python = sorted((e for e in events if e.get("cat") == "python_function" and "dur" in e), key=lambda e: e["ts"])
    busy, gaps, end = 0.0, [], None
    for kernel in kernels:
        start, stop = kernel["ts"], kernel["ts"] + kernel["dur"]
        if end is not None and start - end > GAP_US:
            launch = launches.get(kernel.get("args", {}).get("correlation"))
            stack = []
            if launch is not None:
                at = launch["ts"]
                enclosing = [p for p in python if p["ts"] <= at <= p["ts"] + p["dur"] and p["tid"] == launch["tid"]]
                stack = [p["name"] for p in sorted(enclosing, key=lambda p: -p["ts"])]
            gaps.append({"us": start - end, "site": site(stack), "kernel": kernel["name"][:80], "stack": stack[:12]})
        busy += max(0.0, stop - max(start, end or start))
        end = stop if end is None else max(end, stop)
    span = (kernels[-1]["ts"] + kernels[-1]["dur"] - kernels[0]["ts"]) if kernels else 0.0
    return busy, span, gaps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--kernels", default="transformers")
    parser.add_argument("--examples", type=int, default=6)
    parser.add_argument("--no-wait", action="store_true", help="no wait for the GPU between examples (decode_many now)")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() and not args.tiny else "cpu")
    shape = TINY_LLAMA_SHAPE if args.tiny else LLAMA_31_8B_SHAPE
    model = build_random_model(shape, torch.bfloat16 if device.type == "cuda" else torch.float32, device, 0)
    use_kernels(model, args.kernels)
    prompts = random_prompts(args.examples, 300 if args.tiny else 5000, shape["vocab_size"], 0)
    press = build_press("snapkv", 0.5, seed=0)
    wait = not args.no_wait
    unprofiled = prefills(model, prompts, press, True) + prefills(model, prompts, press, wait)
    activities = [torch.profiler.ProfilerActivity.CPU] + (
        [torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else []
    )
    with torch.profiler.profile(activities=activities, with_stack=True) as profiler:
        profiled = prefills(model, prompts, press, wait)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.json"
        profiler.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    busy, span, gaps = gaps_from_trace(trace)
    by_site: dict[str, list[float]] = defaultdict(list)
    for gap in gaps:
        by_site[gap["site"]].append(gap["us"])
    sites = sorted(
        ({"site": s, "gaps": len(v), "ms_per_example": sum(v) / 1e3 / len(prompts)} for s, v in by_site.items()),
        key=lambda row: -row["ms_per_example"],
    )
    examples = len(prompts)
    record = {
        **run_header(device),
        "kernels": args.kernels,
        "wait_between_examples": wait,
        "examples": examples,
        # first pass cold (cuDNN plans of each length), second warm
        "unprofiled_ms_per_example": [round(s * 1e3, 2) for s in unprofiled],
        "profiled_ms_per_example": [round(s * 1e3, 2) for s in profiled],
        "gpu_busy_ms_per_example": busy / 1e3 / examples,
        "first_to_last_kernel_ms_per_example": span / 1e3 / examples,
        "gap_ms_per_example": sum(g["us"] for g in gaps) / 1e3 / examples,
        "sites": sites[:25],
        "largest_gaps": sorted(gaps, key=lambda g: -g["us"])[:15],
    }
    Path(args.out).mkdir(parents=True, exist_ok=True)
    name = f"prefill_gaps_h200-{args.kernels}{'-no-wait' if args.no_wait else ''}.json"
    (Path(args.out) / name).write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({k: v for k, v in record.items() if k not in ("largest_gaps",)}, indent=1)[:6000])


if __name__ == "__main__":
    main()

"""The reference performance pass: a random-init model of Llama-3.1-8B's exact shape on one GPU.

Built directly on the GPU in bf16 (no download, nothing saved), fed seeded filler contexts of exactly
4k and 16k tokens, it measures full cache and snapkv / streaming_llm / knorm at 50% and 10% retention
with the same code as the pipeline's perf rule (kvcache_bench.perf.runs). The weights are random: the
records are cost figures (latency, memory, KV bytes, energy), never quality.

    python tools/gpu/perf_h200.py --out "$OUT"            # on the GPU (tools/gpu/perf_h200.sh)
    python tools/gpu/perf_h200.py --tiny --out /tmp/perf  # a 2-layer stand-in on CPU, in seconds

Writes perf_records.jsonl (one record per measured run), perf_summary.csv (median per cell),
perf_table.md (the README's table) and environment.json under --out.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kvcache_bench.generation.loading import pick_device  # noqa: E402
from kvcache_bench.generation.model_shapes import LLAMA_31_8B_SHAPE as LLAMA_31_8B  # noqa: E402
from kvcache_bench.generation.model_shapes import TINY_LLAMA_SHAPE as TINY  # noqa: E402
from kvcache_bench.generation.model_shapes import build_random_model  # noqa: E402
from kvcache_bench.io import write_json_atomic, write_jsonl_atomic, write_text_atomic  # noqa: E402
from kvcache_bench.manifest import git_commit, package_versions  # noqa: E402
from kvcache_bench.perf.hardware import pick_hardware  # noqa: E402
from kvcache_bench.perf.runs import PerfCell, PerfSettings, filler_context_ids, measure_cells  # noqa: E402
from kvcache_bench.perf.tables import markdown_table, summarize_perf  # noqa: E402

log = logging.getLogger("perf_h200")

# --tiny: the same family and rope scaling, small enough for a CPU test.

METHODS = ["full_cache", "snapkv", "streaming_llm", "knorm"]
RETENTIONS = [0.5, 0.1]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for the records (e.g. $OUT)")
    parser.add_argument("--tiny", action="store_true", help="2-layer stand-in, float32, CPU-sized contexts")
    parser.add_argument("--contexts", type=lambda s: [int(x) for x in s.split(",")], default=None)
    parser.add_argument("--methods", type=lambda s: s.split(","), default=METHODS)
    parser.add_argument("--retentions", type=lambda s: [float(x) for x in s.split(",")], default=RETENTIONS)
    parser.add_argument("--new-tokens", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--hardware", default="auto", choices=["auto", "nvml", "fake"])
    parser.add_argument("--power-hz", type=float, default=20.0)
    args = parser.parse_args(argv)
    args.contexts = args.contexts or ([128, 256] if args.tiny else [4096, 16384])
    args.new_tokens = args.new_tokens or (8 if args.tiny else 64)
    args.repeats = args.repeats or (2 if args.tiny else 3)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
    started = time.perf_counter()
    device = pick_device(args.device)
    shape = TINY if args.tiny else LLAMA_31_8B
    dtype = torch.float32 if args.tiny else torch.bfloat16
    model_name = "llama-3.1-8b-shape-tiny" if args.tiny else "llama-3.1-8b-shape-random"
    # A reference run on a GPU must be measured by NVML: never let it fall back to the fake backend.
    hardware = pick_hardware("nvml" if device.type == "cuda" and args.hardware == "auto" else args.hardware, device)
    model = build_random_model(shape, dtype, device, args.seed)
    log.info("built %s on %s in %.1f s (%s backend)", model_name, device, time.perf_counter() - started, hardware.backend)

    cells = [
        PerfCell(model_name, method, retention, context)
        for context in args.contexts
        for method in args.methods
        for retention in ([1.0] if method == "full_cache" else args.retentions)
    ]
    contexts = {length: filler_context_ids(length, shape["vocab_size"], args.seed + length) for length in args.contexts}
    settings = PerfSettings(new_tokens=args.new_tokens, warmup=args.warmup, repeats=args.repeats, seed=args.seed,
                            power_sample_hz=args.power_hz)

    def progress(record):
        log.info("%-14s %4.2f ctx=%-6d ttft=%7.1f ms itl=%6.2f ms kv=%8.1f MiB peak=%s J/tok=%.3f overhead=%.2f%%",
                 record["method"], record["retention"], record["context_tokens"], record["ttft_s"] * 1e3,
                 record["itl_mean_s"] * 1e3, record["kv_cache_bytes"] / 2**20,
                 f"{record['torch_peak_memory_bytes'] / 2**30:.2f} GiB" if record["torch_peak_memory_bytes"] else "n/a",
                 record["energy_per_token_j"], record["harness_overhead_fraction"] * 100)

    records = measure_cells(model, cells, contexts, settings, hardware, progress=progress)
    write_jsonl_atomic(out / "perf_records.jsonl", records)  # first: the records survive any later failure
    summary = summarize_perf(records)
    overhead = 1.0 - sum(r["forward_s"] for r in records) / sum(r["wall_s"] for r in records)
    summary.to_csv(out / "perf_summary.csv", index=False)
    write_text_atomic(out / "perf_table.md", markdown_table(summary))
    write_json_atomic(out / "environment.json", {
        **hardware.describe(),
        "device": str(device),
        "torch_cuda": torch.version.cuda,
        "packages": package_versions(),
        "git_commit": git_commit(),
        "model": model_name,
        "shape": shape,
        "dtype": str(dtype).replace("torch.", ""),
        "weights": "random init (seeded): cost figures only, no quality",
        "context_source": "seeded random token ids (filler)",
        "settings": vars(args) | {"out": None},
        "total_seconds": time.perf_counter() - started,
        "harness_overhead_fraction": overhead,
    })
    log.info("done: %d measured runs of %d cells in %.1f s; harness overhead %.2f%% of measured wall time",
             len(records), len(cells), time.perf_counter() - started, overhead * 100)
    sys.stdout.write(markdown_table(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

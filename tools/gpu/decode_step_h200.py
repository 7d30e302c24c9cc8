"""Decode step time against its memory floor: eager steps vs the CUDA-graph step, at several decode batches.

    python tools/gpu/decode_step_h200.py --out "$OUT"          # on the GPU (random-init Llama-3.1-8B shape, bf16)
    python tools/gpu/decode_step_h200.py --tiny --out /tmp/ds  # 2-layer stand-in on CPU (eager only)

One ~5k-token prompt is prefilled and compressed (snapkv, 50%); its compressed cache is repeated to fill
each decode batch. Each step must at least read every weight once and every row's cached keys/values
once: (weight bytes + rows x cached tokens x KV bytes per token) / copy bandwidth (measured here) is the
floor. Writes decode_step_h200.json.

No rule does this: rules time whole cells (engine_comparison, perf), not one decode step eager and graphed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_common import run_header  # noqa: E402

from kvcache_bench.data.model_shapes import LLAMA_31_8B_SHAPE, TINY_LLAMA_SHAPE, build_random_model  # noqa: E402
from kvcache_bench.engine import static_decode  # noqa: E402
from kvcache_bench.engine.prefilled import prefill_prompt  # noqa: E402
from kvcache_bench.engine.static_decode import decode_together  # noqa: E402
from kvcache_bench.methods.registry import build_press  # noqa: E402
from kvcache_bench.perf.rates import copy_bytes_per_s  # noqa: E402
from kvcache_bench.study.prompt_tokens import PromptTokens  # noqa: E402


def copy_bandwidth(device: torch.device) -> float | None:
    """Bytes read + written per second by a 2 GiB device-to-device copy (the floor's rate; none on CPU)."""
    return copy_bytes_per_s(device) if device.type == "cuda" else None


def timed_decode(model, prefilled, new_tokens: int, graphs: bool) -> float:
    """Seconds per step of a ``new_tokens`` decode (state built and graph captured by an untimed first call)."""
    with mock.patch.object(static_decode, "_graphs_wanted", lambda m: graphs and m.device.type == "cuda"):
        decode_together(model, prefilled, new_tokens, set())
        if model.device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        decode_together(model, prefilled, new_tokens, set())
        if model.device.type == "cuda":
            torch.cuda.synchronize()
    static_decode.release_decode_states(model)
    return (time.perf_counter() - start) / (new_tokens - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--batches", default="1,16,32,64")
    parser.add_argument("--prompt-tokens", type=int, default=5000)
    parser.add_argument("--new-tokens", type=int, default=64)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() and not args.tiny else "cpu")
    shape = TINY_LLAMA_SHAPE if args.tiny else LLAMA_31_8B_SHAPE
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = build_random_model(shape, dtype, device, 0)
    tokens = 300 if args.tiny else args.prompt_tokens
    ids = torch.randint(3, shape["vocab_size"], (tokens,), generator=torch.Generator().manual_seed(0)).tolist()
    prompt = PromptTokens(ids[:-32], ids[-32:])
    prefilled = prefill_prompt(model, prompt, build_press("snapkv", 0.5, seed=0), "question_aware")
    cached = prefilled.keys[0].shape[-2]
    element = torch.finfo(dtype).bits // 8
    kv_bytes_per_token = 2 * len(prefilled.keys) * prefilled.keys[0].shape[1] * prefilled.keys[0].shape[-1] * element
    weight_bytes = sum(p.numel() for name, p in model.named_parameters() if "embed_tokens" not in name) * element
    bandwidth = copy_bandwidth(device)
    rows = []
    for batch in [int(b) for b in args.batches.split(",")] if not args.tiny else [1, 4]:
        batch_rows = [prefilled] * batch
        step_bytes = weight_bytes + batch * (cached + args.new_tokens / 2) * kv_bytes_per_token
        floor = step_bytes / bandwidth if bandwidth else None
        row = {"decode_batch": batch, "cached_tokens_per_row": cached, "step_bytes": step_bytes, "floor_step_s": floor}
        for graphs in [False, True] if device.type == "cuda" else [False]:
            row["graph_step_s" if graphs else "eager_step_s"] = timed_decode(model, batch_rows, args.new_tokens, graphs)
        if floor and "graph_step_s" in row:
            row["graph_over_floor"] = row["graph_step_s"] / floor
        rows.append(row)
        print(json.dumps(row), flush=True)
    record = {
        **run_header(device, dtype),
        "copy_bandwidth_bytes_per_s": bandwidth,
        "weight_bytes_read_per_step": weight_bytes,
        "kv_bytes_per_token": kv_bytes_per_token,
        "prompt_tokens": tokens,
        "new_tokens": args.new_tokens,
        "rows": rows,
    }
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "decode_step_h200.json").write_text(json.dumps(record, indent=2) + "\n")
    print("| decode batch | eager ms/step | graph ms/step | floor ms/step | graph / floor |")
    for r in rows:
        fmt = lambda v: f"{v * 1e3:.2f}" if v is not None else "-"  # noqa: E731
        print(
            f"| {r['decode_batch']} | {fmt(r.get('eager_step_s'))} | {fmt(r.get('graph_step_s'))} | "
            f"{fmt(r['floor_step_s'])} | {r.get('graph_over_floor', 0):.2f} |"
        )


if __name__ == "__main__":
    main()

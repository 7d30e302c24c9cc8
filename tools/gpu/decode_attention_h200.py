"""One decode step's attention, alone, on the decode-32 cell's shape: each way of computing it against its byte floor.

    python tools/gpu/decode_attention_h200.py --out "$OUT"        # on the GPU
    python tools/gpu/decode_attention_h200.py --tiny --out /tmp/da  # small shapes on CPU (checks the outputs agree)

The batched decode's attention reads every row's keys and values once per layer and step, one query per row and
head, under each row's own mask (left padding, slots a masking press hid). At decode batch 32 on the 8B shape
(~2.6k slots per row) that read is ~370 MB a layer, so the step's attention is bound by memory bandwidth: its floor
is those bytes at the copy rate measured here. Each way below computes the same output (checked against fp32 math);
the table says which kernel runs nearest the floor. Writes decode_attention_h200.json.

No rule does this: rules time whole cells; this isolates one kernel choice inside a captured decode step.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_common import run_header  # noqa: E402

from kvcache_bench.perf.rates import copy_bytes_per_s  # noqa: E402


def grouped(query, key, value, mask, backends=None):
    """The engine's way (layer_masks._grouped_query_sdpa): query heads sharing a KV head ride as extra queries."""
    batch, heads, _, head_dim = query.shape
    q = query.reshape(batch, key.shape[1], heads // key.shape[1], head_dim)
    if backends is None:
        return F.scaled_dot_product_attention(q, key, value, attn_mask=mask)
    with sdpa_kernel(backends):
        return F.scaled_dot_product_attention(q, key, value, attn_mask=mask)


def grouped_float_mask(query, key, value, additive):
    batch, heads, _, head_dim = query.shape
    q = query.reshape(batch, key.shape[1], heads // key.shape[1], head_dim)
    return F.scaled_dot_product_attention(q, key, value, attn_mask=additive)


def two_matmuls(query, key, value, mask):
    """Scores by one batched matrix product, masked softmax in fp32, then the values: K and V each read once."""
    batch, heads, _, head_dim = query.shape
    q = query.reshape(batch, key.shape[1], heads // key.shape[1], head_dim)
    scores = torch.matmul(q, key.transpose(-1, -2)).float() * head_dim**-0.5
    weights = scores.masked_fill(~mask, float("-inf")).softmax(-1).to(value.dtype)
    return torch.matmul(weights, value)


def flex(query, key, value, mask):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    compiled = torch.compile(flex_attention)
    batch, heads, _, head_dim = query.shape
    kv_heads = key.shape[1]

    def mask_mod(b, h, q_idx, kv_idx):
        return mask[b, 0, 0, kv_idx]

    block_mask = create_block_mask(mask_mod, batch, None, 1, key.shape[-2], device=query.device)

    def run(query, key, value, mask):
        return compiled(query, key, value, block_mask=block_mask, enable_gqa=kv_heads != heads)

    return run


def timed(fn, args, repeats: int) -> float:
    for _ in range(3):
        fn(*args)
    if args[0].device.type != "cuda":
        return float("nan")
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn(*args)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--capacity", type=int, default=2816)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() and not args.tiny else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    rows, capacity = (4, 96) if args.tiny else (args.rows, args.capacity)
    heads, kv_heads, head_dim = 32, 8, 128
    generator = torch.Generator(device=device).manual_seed(0)
    query = torch.randn(rows, 1, heads, head_dim, device=device, dtype=dtype, generator=generator).transpose(1, 2)
    key = torch.randn(rows, kv_heads, capacity, head_dim, device=device, dtype=dtype, generator=generator)
    value = torch.randn(rows, kv_heads, capacity, head_dim, device=device, dtype=dtype, generator=generator)
    # each row: left padding of up to 10% of the slots, then real slots, then 32 of 64 generated slots written
    starts = torch.randint(0, capacity // 10, (rows, 1), device=device, generator=generator)
    slots = torch.arange(capacity, device=device)
    mask = ((slots >= starts) & (slots < capacity - 32)).view(rows, 1, 1, capacity)
    additive = torch.zeros(mask.shape, dtype=dtype, device=device).masked_fill(~mask, float("-inf"))
    reference = two_matmuls(query.float(), key.float(), value.float(), mask)

    ways = {
        "engine: grouped SDPA, bool mask, default backend": (grouped, (query, key, value, mask)),
        "grouped SDPA, additive mask": (grouped_float_mask, (query, key, value, additive)),
        "two matmuls, fp32 softmax": (two_matmuls, (query, key, value, mask)),
    }
    if device.type == "cuda":
        for name, backend in [("cuDNN", SDPBackend.CUDNN_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)]:
            ways[f"grouped SDPA, bool mask, {name} only"] = (
                lambda q, k, v, m, b=backend: grouped(q, k, v, m, [b]),
                (query, key, value, mask),
            )
        try:
            ways["flex attention (compiled, GQA)"] = (flex(query, key, value, mask), (query, key, value, mask))
        except Exception as error:  # noqa: BLE001 - a way that cannot be built is reported, not fatal
            print(f"flex attention not built: {error!r}", flush=True)

    bandwidth = copy_bytes_per_s(device) if device.type == "cuda" else None
    kv_bytes = 2 * key.numel() * key.element_size()
    floor = kv_bytes / bandwidth if bandwidth else None
    results = []
    for name, (fn, fn_args) in ways.items():
        try:
            output = fn(*fn_args)
            error = (output.float().reshape(reference.shape) - reference.reshape(output.shape)).abs().max().item()
            seconds = timed(fn, fn_args, args.repeats)
        except Exception as failure:  # noqa: BLE001
            results.append({"way": name, "failed": repr(failure)[:300]})
            print(json.dumps(results[-1]), flush=True)
            continue
        row = {"way": name, "max_abs_error": error, "seconds": seconds}
        if floor:
            row["over_floor"] = seconds / floor
        results.append(row)
        print(json.dumps(row), flush=True)
    record = {
        **run_header(device, dtype),
        "rows": rows,
        "capacity": capacity,
        "kv_bytes_read": kv_bytes,
        "copy_bandwidth_bytes_per_s": bandwidth,
        "floor_seconds": floor,
        "ways": results,
    }
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "decode_attention_h200.json").write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""The study's generate rule on one H200, side by side with kvpress's own pipeline and the hardware floor.

Driven by tools/gpu/generate_rule_h200.sh; each step is a subcommand:

    prepare  --work W   random-init Llama-3.1-8B shape (bf16) saved to W/model with the demo's word tokenizer,
                        W/study.yaml (SnapKV 50% question-aware, ~5k-token synthetic prompts, 64 new tokens,
                        decode batch 1 and the study default), and the measured ceilings (copy bandwidth, bf16
                        matrix rate) in W/ceilings.json
    kvpress  --work W   kvpress's KVPressTextGenerationPipeline on the same rows and model (batch 1, one
                        unmeasured warm-up example): W/kvpress_pipeline.jsonl
    report   --work W --out O   examples/s of every path and of the floor: O/generate_rule_h200.json,
                        O/perf_records.jsonl (perf-record schema, for `snakemake plan`), a Markdown table

Random weights: cost figures only (the arithmetic does not depend on the weights' values). The word
tokenizer (1,258 words) feeds a 128,256-token vocabulary: prompt lengths are exact, answers are noise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kvcache_bench.generation.model_shapes import LLAMA_31_8B_SHAPE, TINY_LLAMA_SHAPE, build_random_model  # noqa: E402

METHOD, RETENTION, NEW_TOKENS, MODEL = "snapkv", 0.5, 64, "llama-3.1-8b-shape-random"
STUDY_DECODE_BATCH = 32  # config.yaml's decode_batch_sizes


def study_config(work: Path, tiny: bool, examples: int, decode_batch: int) -> dict:
    words = (250, 300) if tiny else (4500, 5500)
    return {
        "seed": 42,
        "models": {
            MODEL: {
                "path": str(work / "model"),
                "dtype": "float32" if tiny else "bfloat16",
                "attn_implementation": "sdpa",
                "trust_remote_code": False,
                "max_context_tokens": 8000,
            }
        },
        "datasets": {
            "synthetic": {
                "source": "synthetic",
                "split": "test",
                "tasks": ["synthetic_qa"],
                "num_examples": examples,
                "synthetic": {"n_documents": examples, "min_words": words[0], "max_words": words[1],
                              "facts_per_document": 4, "questions_per_document": 1},
            }
        },
        "methods": [METHOD],
        "retentions": [RETENTION],
        "batch_sizes": [1],
        "decode_batch_sizes": [1, decode_batch],
        "question_modes": ["question_aware"],
        "generation": {"max_new_tokens": {"synthetic_qa": NEW_TOKENS}, "device": "auto", "threads": 4},
        "method_kwargs": {},
    }


def measure_ceilings(device: torch.device) -> dict:
    if device.type != "cuda":
        return {"copy_bytes_per_s": None, "bf16_matmul_flop_per_s": None}

    def median_seconds(fn, repeats=20):
        times = []
        for _ in range(repeats + 3):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        times = sorted(times[3:])
        return times[len(times) // 2]

    source = torch.randn(2**29, device=device)  # 2 GiB
    target = torch.empty_like(source)
    copy = 2 * source.numel() * 4 / median_seconds(lambda: target.copy_(source))  # noqa: F821  (ruff misreads the del below)
    del source, target
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    matmul = 2 * 8192**3 / median_seconds(lambda: a @ b)
    return {"copy_bytes_per_s": copy, "bf16_matmul_flop_per_s": matmul}


def prepare(args) -> None:
    from transformers import AutoTokenizer

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() and not args.tiny else "cpu")
    tokenizer = AutoTokenizer.from_pretrained(str(ROOT / "resources" / "demo" / "tokenizer"))
    shape = {**TINY_LLAMA_SHAPE, "vocab_size": len(tokenizer)} if args.tiny else LLAMA_31_8B_SHAPE
    started = time.perf_counter()
    model = build_random_model(shape, torch.float32 if args.tiny else torch.bfloat16, device, 0)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(work / "model")
    tokenizer.save_pretrained(work / "model")
    print(f"model built and saved in {time.perf_counter() - started:.1f}s", flush=True)
    ceilings = measure_ceilings(device)
    del model
    (work / "ceilings.json").write_text(json.dumps(ceilings, indent=2) + "\n")
    import yaml

    config = study_config(work, args.tiny, args.examples, args.decode_batch)
    (work / "study.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def kvpress_pipeline(args) -> None:
    """kvpress's own pipeline, as its evaluation runs it: context compressed, question appended, batch 1."""
    from kvpress import SnapKVPress  # noqa: F401  (registers the pipeline)
    from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

    from kvcache_bench.io import read_jsonl
    from kvcache_bench.methods.registry import build_press

    work = Path(args.work)
    rows = read_jsonl(Path(args.rows))[: args.examples]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(work / "model", dtype=dtype, attn_implementation="sdpa").to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(work / "model")
    pipe = pipeline("kv-press-text-generation", model=model, tokenizer=tokenizer, device=device)
    press = build_press(METHOD, RETENTION, seed=0)

    def one(row) -> tuple[float, str]:
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        answer = pipe(row["context"], question=row["input"], press=press, max_new_tokens=NEW_TOKENS)["answer"]
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start, answer

    one(rows[0])  # warm-up, unmeasured
    with open(work / "kvpress_pipeline.jsonl", "w") as out:
        for row in rows:
            seconds, answer = one(row)
            out.write(json.dumps({"id": row["_id"], "seconds": seconds, "answer_words": len(answer.split())}) + "\n")


def floor_seconds_per_example(prompt_tokens: float, kept_tokens: float, rows: int, ceilings: dict, shape: dict) -> dict:
    """The least time an example can take: prefill FLOPs at the matrix rate, decode bytes at the copy rate.

    Prefill: 2 FLOPs per layer weight per token, the output head for the last token only (logits_to_keep=1),
    plus causal attention's QK^T and PV. Decode: every step reads every weight but the embedding once
    (shared by the ``rows`` rows decoded together) and each row's cached keys/values once.
    """
    hidden, layers, heads, kv_heads, head_dim = (shape[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim"))
    mlp, vocab = shape["intermediate_size"], shape["vocab_size"]
    per_layer = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2 + 3 * hidden * mlp
    matmul_weights = layers * per_layer + hidden * vocab
    attention_flops = layers * 2 * 2 * heads * head_dim * prompt_tokens * prompt_tokens / 2
    prefill_flops = 2 * layers * per_layer * prompt_tokens + 2 * hidden * vocab + attention_flops
    kv_bytes_per_token = 2 * layers * kv_heads * head_dim * 2
    steps = NEW_TOKENS - 1
    weight_bytes = matmul_weights * 2
    decode_bytes = steps * (weight_bytes / rows + (kept_tokens + steps / 2) * kv_bytes_per_token)
    prefill_s = prefill_flops / ceilings["bf16_matmul_flop_per_s"]
    decode_s = decode_bytes / ceilings["copy_bytes_per_s"]
    return {"prefill_s": prefill_s, "decode_s": decode_s, "total_s": prefill_s + decode_s, "prefill_flops": prefill_flops,
            "decode_bytes": decode_bytes}


def report(args) -> None:
    from kvcache_bench.io import read_jsonl

    work, out = Path(args.work), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ceilings = json.loads((work / "ceilings.json").read_text())
    paths = {}
    for predictions in sorted(Path(args.predictions).rglob("*.jsonl")):
        records = read_jsonl(predictions)
        decode = records[0]["decode_batch_size"]
        seconds = sum(r["seconds"] for r in records)
        paths[f"engine, decode batch {decode}"] = {
            "file": str(predictions.relative_to(args.predictions)),
            "examples": len(records),
            "decode_batch_size": decode,
            "effective_decode_batch_size": max(r["effective_decode_batch_size"] for r in records),
            "decode_steps": records[0].get("decode_steps"),
            "warmup_seconds": records[0].get("warmup_seconds"),
            "seconds": seconds,
            "examples_per_s": len(records) / seconds,
            "mean_prompt_tokens": sum(r["prompt_tokens"] for r in records) / len(records),
            "mean_kept_tokens": sum(r["kept_tokens"] for r in records) / len(records),
            "mean_generated_tokens": sum(r["generated_tokens"] for r in records) / len(records),
            "seconds_cover": records[0].get("seconds_cover"),
            "token_ids_note": "predictions are text of a random model; see the jsonl",
        }
    kvpress_rows = read_jsonl(work / "kvpress_pipeline.jsonl") if (work / "kvpress_pipeline.jsonl").exists() else []
    if kvpress_rows:
        seconds = sum(r["seconds"] for r in kvpress_rows)
        paths["kvpress pipeline (batch 1)"] = {"examples": len(kvpress_rows), "seconds": seconds,
                                                "examples_per_s": len(kvpress_rows) / seconds,
                                                "seconds_cover": "pipe(context, question) call, one warm-up example excluded"}
    engine_paths = [p for p in paths.values() if "decode_batch_size" in p]
    shape = TINY_LLAMA_SHAPE if args.tiny else LLAMA_31_8B_SHAPE
    floors = {}
    if ceilings.get("copy_bytes_per_s") and engine_paths:
        prompt = engine_paths[0]["mean_prompt_tokens"]
        kept = engine_paths[0]["mean_kept_tokens"]
        for p in engine_paths:
            floor = floor_seconds_per_example(prompt, kept, p["effective_decode_batch_size"], ceilings, shape)
            floors[f"floor, decode batch {p['effective_decode_batch_size']}"] = {**floor, "examples_per_s": 1 / floor["total_s"]}
    result = {"model": MODEL, "method": METHOD, "retention": RETENTION, "question_mode": "question_aware",
              "new_tokens": NEW_TOKENS, "ceilings": ceilings, "paths": paths, "floors": floors,
              "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
              "torch": torch.__version__, "transformers": __import__("transformers").__version__,
              "kvpress": __import__("importlib.metadata").metadata.version("kvpress")}
    (out / "generate_rule_h200.json").write_text(json.dumps(result, indent=2) + "\n")
    peer = paths.get("kvpress pipeline (batch 1)", {}).get("examples_per_s")
    lines = ["| path | examples | examples/s | × kvpress pipeline | seconds/example |", "|---|---:|---:|---:|---:|"]
    for name, p in {**paths, **floors}.items():
        rate = p["examples_per_s"]
        ratio = f"{rate / peer:.1f}×" if peer else "—"
        lines.append(f"| {name} | {p.get('examples', '—')} | {rate:.2f} | {ratio} | {1 / rate:.3f} |")
    print("\n".join(lines))
    # perf-record schema (kvcache_bench.perf.runs), one per engine path, so `snakemake plan` can read them
    with open(out / "perf_records.jsonl", "w") as records_out:
        for p in engine_paths:
            per_example = 1 / p["examples_per_s"]
            records_out.write(json.dumps({
                "model": MODEL, "method": METHOD, "retention": RETENTION, "batch_size": 1,
                "decode_batch_size": p["effective_decode_batch_size"], "context_tokens": round(p["mean_prompt_tokens"]),
                "ttft_s": per_example, "itl_mean_s": 0.0, "new_tokens": NEW_TOKENS,
                "note": "ttft_s holds the whole per-example seconds of the generate rule (prefill + decode share)",
                "hardware_backend": "nvml" if torch.cuda.is_available() else "fake",
                "gpu_name": result["device"],
            }) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("prepare", "kvpress", "report"):
        command = sub.add_parser(name)
        command.add_argument("--work", required=True)
        command.add_argument("--tiny", action="store_true")
        command.add_argument("--examples", type=int, default=32)
    sub.choices["prepare"].add_argument("--decode-batch", type=int, default=STUDY_DECODE_BATCH)
    sub.choices["kvpress"].add_argument("--rows", required=True)
    sub.choices["report"].add_argument("--out", required=True)
    sub.choices["report"].add_argument("--predictions", required=True)
    args = parser.parse_args()
    {"prepare": prepare, "kvpress": kvpress_pipeline, "report": report}[args.command](args)


if __name__ == "__main__":
    main()

"""The GPU-hour plan (``snakemake plan``): every GPU job still to run and its estimated cost, before running it.

Estimates come from measured perf records of one hardware (``choose_estimate_hardware``), else from stated
defaults (``ESTIMATE_DEFAULTS``). Torch-free: the plan rule runs in envs/analysis.yaml.
"""

from __future__ import annotations

import os

from kvcache_bench.perf.tables import MixedHardwareError

# Stated defaults for cells no perf record covers: an 8B model in bf16 on one H100/H200-class GPU,
# decoding batch 1 with Hugging Face's Python loop (launch-bound). Override in perf.estimate.defaults.
ESTIMATE_DEFAULTS = {
    "load_s": 60.0,  # loading weights and kvpress, once per job (once per model worker for generate jobs in one)
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
    """(GPU seconds, where the estimate came from, prompt tokens assumed) for one planned job, its model load
    included unless a model worker (``job["worker"]``) loads it; ``plan_report`` counts one load per worker."""
    settings = {**ESTIMATE_DEFAULTS, **defaults}
    prompt = job["prompt_tokens"] or min(int(settings["prompt_tokens"]), job["max_context_tokens"])
    model = same_cost_as.get(job["model"], job["model"])
    # records without a decode batch size (the perf pass) decoded one example at a time
    decode = job.get("decode_batch_size", 1)
    same_model = [
        r for r in records
        if r.get("model") == model and r.get("batch_size", 1) == job["batch_size"] and r.get("decode_batch_size", 1) == decode
    ]
    exact = [r for r in same_model if r["method"] == job["method"] and abs(r["retention"] - job["retention"]) < 1e-9]
    baseline = [r for r in same_model if r["method"] == "full_cache"]
    # decode-batched records measure whole examples, whose cost the (method-independent) prefill dominates
    other_method = same_model if decode > 1 else []
    if exact or baseline or other_method:
        matched = exact or baseline or other_method
        per_run = _per_run_seconds(matched, prompt, job["new_tokens"])
        gpu = matched[0].get("gpu_name")
        kind = "" if exact else " (full cache)" if baseline else f" ({matched[0]['method']} {matched[0]['retention']:.0%})"
        source = f"measured {model} on {gpu}" + kind + (f" at decode batch {decode}" if decode > 1 else "")
    else:
        per_run = prompt / settings["prefill_tokens_per_s"] + (job["new_tokens"] - 1) * settings["decode_s_per_token"]
        source = "defaults"
    load = 0.0 if job.get("worker") else settings["load_s"]
    return load + job["runs"] * per_run, source, prompt


def plan_report(jobs: list[dict], records: list[dict], *, same_cost_as=None, defaults=None, gpu_name=None, exists=None) -> str:
    """Like ``snakemake -n``, in hours: every GPU job not yet done, its estimate, and totals per rule."""
    exists = exists or os.path.exists
    records = choose_estimate_hardware(records, gpu_name) if records else []
    lines, totals, done, workers = [], {}, 0, set()
    header = f"{'stage':<9} {'model':<28} {'method':<19} {'kept':>5} {'batch':>5} {'runs':>5} {'tokens':>7} {'GPU-h':>8}  estimate"
    lines.append(header)
    for job in jobs:
        if exists(job["output"]):
            done += 1
            continue
        seconds, source, prompt = estimate_job(job, records, same_cost_as or {}, defaults or {})
        if job.get("worker") and job["worker"] not in workers:  # the worker's one load, on its first job
            workers.add(job["worker"])
            seconds += {**ESTIMATE_DEFAULTS, **(defaults or {})}["load_s"]
            source += " + the worker's load"
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
    if workers:
        lines.append(f"Model loads: one per model worker ({len(workers)}: {', '.join(sorted(workers))}), one per job otherwise.")
    if records:
        backend, gpu = records[0].get("hardware_backend"), records[0].get("gpu_name")
        lines.append(f"Measured records: {len(records)} runs on {gpu} ({backend} backend).")
    lines.append(
        "Defaults where nothing was measured (perf.estimate.defaults): "
        f"load {settings['load_s']:g} s per job, prefill {settings['prefill_tokens_per_s']:g} tokens/s, "
        f"decode {settings['decode_s_per_token']:g} s/token, prompts of {settings['prompt_tokens']} tokens."
    )
    return "\n".join(lines) + "\n"


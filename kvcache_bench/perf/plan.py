"""The GPU-hour plan (``snakemake plan``): every GPU job still to run and its estimated cost, before running it.

Estimates come from measured perf records of one hardware (``choose_estimate_hardware``) and of the job's own
attention implementation (an eager-attention method such as H2O is not priced from an SDPA record: it runs
another kernel), else, for a model nothing was measured for, from stated defaults (``ESTIMATE_DEFAULTS``),
said so on the line and totalled apart. A job whose model was measured, but never with its attention
implementation or its batch sizes, is not priced: the plan says so and names what was measured. The study's own jobs
make the total; opt-in passes (the perf pass) are listed apart. Torch-free: the plan rule runs in envs/analysis.yaml.
"""

from __future__ import annotations

import os

from kvcache_bench.methods.registry import METHODS, attention_implementation_for
from kvcache_bench.perf.tables import MixedHardwareError

# Stated defaults for cells no perf record covers: an 8B model in bf16 on one H100/H200-class GPU,
# decoding batch 1 with Hugging Face's Python loop (launch-bound). Override in perf.estimate.defaults.
ESTIMATE_DEFAULTS = {
    "load_s": 60.0,  # loading weights and kvpress, once per job (once per model worker for generate jobs in one)
    "prefill_tokens_per_s": 10000.0,
    "decode_s_per_token": 0.03,
    "prompt_tokens": 4096,  # a generation prompt's length when the plan cannot know it
}
OPT_IN_STAGES = {"perf": "snakemake perf_all"}  # planned, listed, never in the study's total
DEFAULTS_SOURCE = "unmeasured: defaults"


def with_attention(jobs: list[dict], config: dict) -> list[dict]:
    """Each planned job with the attention implementation it will load its model with (``attention``)."""
    custom = config.get("custom_methods")
    return [
        {
            **job,
            "attention": attention_implementation_for(
                job["method"], config["models"][job["model"]]["attn_implementation"], custom
            ),
        }
        for job in jobs
    ]


def record_attention(record: dict) -> str:
    """The attention a record ran with: its own field, else eager for a method that needs it and SDPA, every
    committed record's (reference/*/perf_records.jsonl), for the others."""
    if record.get("attn_implementation"):
        return record["attn_implementation"]
    spec = METHODS.get(record.get("method"))
    return "eager" if spec is not None and spec.requires_eager_attention else "sdpa"


def job_attention(job: dict) -> str:
    return job.get("attention") or record_attention({"method": job["method"]})


def choose_estimate_hardware(records: list[dict], gpu_name: str | None = None) -> list[dict]:
    """The records of ONE hardware: the named GPU, else the only real GPU measured, else the fake backend."""
    if gpu_name:
        return [r for r in records if r.get("gpu_name") == gpu_name]
    real = [r for r in records if r.get("hardware_backend") != "fake"]
    if real:
        gpus = sorted({str(r.get("gpu_name")) for r in real})
        if len(gpus) > 1:
            raise MixedHardwareError(
                f"perf records from several GPU models ({', '.join(gpus)}): "
                "set perf.estimate.gpu_name to the one to plan for"
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


def estimate_job(job: dict, records: list[dict], same_cost_as: dict, defaults: dict) -> tuple[float | None, str, int]:
    """(GPU seconds, where the estimate came from, prompt tokens assumed) for one planned job, its model load
    included unless a model worker (``job["worker"]``) loads it; ``plan_report`` counts one load per worker.
    Seconds are None when the job's model was measured but never with the job's attention implementation."""
    settings = {**ESTIMATE_DEFAULTS, **defaults}
    prompt = job["prompt_tokens"] or min(int(settings["prompt_tokens"]), job["max_context_tokens"])
    model = same_cost_as.get(job["model"], job["model"])
    # records without a decode batch size (the perf pass) decoded one example at a time
    decode = job.get("decode_batch_size", 1)
    of_model = [r for r in records if r.get("model") == model]
    attention = job_attention(job)
    same_model = [
        r
        for r in of_model
        if r.get("batch_size", 1) == job["batch_size"]
        and r.get("decode_batch_size", 1) == decode
        and record_attention(r) == attention
    ]
    exact = [r for r in same_model if r["method"] == job["method"] and abs(r["retention"] - job["retention"]) < 1e-9]
    baseline = [r for r in same_model if r["method"] == "full_cache"]
    # decode-batched records measure whole examples, whose cost the (method-independent) prefill dominates
    other_method = same_model if decode > 1 else []
    load = 0.0 if job.get("worker") else settings["load_s"]
    if exact or baseline or other_method:
        matched = exact or baseline or other_method
        per_run = _per_run_seconds(matched, prompt, job["new_tokens"])
        gpu = matched[0].get("gpu_name")
        kind = (
            "" if exact else " (full cache)" if baseline else f" ({matched[0]['method']} {matched[0]['retention']:.0%})"
        )
        source = f"measured {model} on {gpu}" + kind + (f" at decode batch {decode}" if decode > 1 else "")
        return load + job["runs"] * per_run, source, prompt
    if of_model:  # measured, but not like this: a guess from the defaults would pass for a measurement
        measured = sorted({record_attention(r) for r in of_model})
        if attention not in measured:
            return (
                None,
                f"cannot price: {model} was measured with {', '.join(measured)} attention only, not {attention}",
                prompt,
            )
        settings_measured = sorted(
            {
                (r.get("batch_size", 1), r.get("decode_batch_size", 1))
                for r in of_model
                if record_attention(r) == attention
            }
        )
        if (job["batch_size"], decode) not in settings_measured:
            return (
                None,
                (
                    f"cannot price: {model} was measured at "
                    + ", ".join(f"batch {b} decode {d}" for b, d in settings_measured)
                    + f" only, not batch {job['batch_size']} decode {decode}"
                ),
                prompt,
            )
        return (
            None,
            f"cannot price: no record of {job['method']} or the full cache on {model} at batch {job['batch_size']} "
            f"decode {decode}",
            prompt,
        )
    per_run = prompt / settings["prefill_tokens_per_s"] + (job["new_tokens"] - 1) * settings["decode_s_per_token"]
    return load + job["runs"] * per_run, DEFAULTS_SOURCE, prompt


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    """Rows of cells as aligned text columns, each as wide as its widest cell (numbers right-aligned)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))
        ).rstrip()
        for row in rows
    ]


def plan_report(
    jobs: list[dict], records: list[dict], *, same_cost_as=None, defaults=None, gpu_name=None, exists=None
) -> str:
    """Like ``snakemake -n``, in hours: every GPU job not yet done, its estimate, and totals per stage, the
    study's jobs apart from the opt-in passes."""
    exists = exists or os.path.exists
    records = choose_estimate_hardware(records, gpu_name) if records else []
    settings = {**ESTIMATE_DEFAULTS, **(defaults or {})}
    rows = [["stage", "model", "method", "attention", "kept", "batch", "decode", "runs", "tokens", "GPU-h", "estimate"]]
    totals, done, workers, unpriced = {}, 0, set(), []
    for job in jobs:
        if exists(job["output"]):
            done += 1
            continue
        seconds, source, prompt = estimate_job(job, records, same_cost_as or {}, defaults or {})
        if (
            seconds is not None and job.get("worker") and job["worker"] not in workers
        ):  # the worker's one load, on its first job
            workers.add(job["worker"])
            seconds += settings["load_s"]
            source += " + the worker's load"
        stage = totals.setdefault(job["stage"], {"jobs": 0, "hours": 0.0, "defaults": 0, "defaults_hours": 0.0})
        stage["jobs"] += 1
        if seconds is None:
            unpriced.append(job)
        else:
            stage["hours"] += seconds / 3600
            if source.startswith(DEFAULTS_SOURCE):
                stage["defaults"] += 1
                stage["defaults_hours"] += seconds / 3600
        rows.append(
            [
                job["stage"],
                job["model"],
                job["method"],
                job_attention(job),
                f"{job['retention'] * 100:.0f}%",
                str(job["batch_size"]),
                str(job.get("decode_batch_size", 1)),
                str(job["runs"]),
                str(prompt) if job["prompt_tokens"] else f"~{prompt}",
                "-" if seconds is None else f"{seconds / 3600:.4f}",
                source,
            ]
        )
    lines = _table(rows, right={4, 5, 6, 7, 8, 9})
    study = {name: stage for name, stage in totals.items() if name not in OPT_IN_STAGES}
    opt_in = {name: stage for name, stage in totals.items() if name in OPT_IN_STAGES}
    stage_of = {id(job): job["stage"] for job in unpriced}
    for name, s in totals.items():
        s["unpriced"] = sum(1 for job in unpriced if stage_of[id(job)] == name)
    study["total"] = {
        key: sum(s[key] for s in study.values()) for key in ("jobs", "hours", "defaults", "defaults_hours", "unpriced")
    }
    columns = (
        ["stage", "jobs", "GPU-hours"]
        + (["not priced"] if unpriced else [])
        + (["from defaults (unmeasured)"] if study["total"]["defaults"] else [])
    )
    stats = [columns]
    for name, s in sorted(study.items(), key=lambda item: item[0] == "total"):
        row = [name, str(s["jobs"]), f"{s['hours']:.3f}"]
        row += [f"{s['unpriced']} jobs" if s["unpriced"] else ""] if unpriced else []
        row += (
            [f"{s['defaults']} jobs, {s['defaults_hours']:.3f} h" if s["defaults"] else ""]
            if study["total"]["defaults"]
            else []
        )
        stats.append(row)
    lines += ["", "Job stats (the study's jobs):"] + _table(stats, right={1, 2})
    for name, s in sorted(opt_in.items()):
        lines.append(
            f"Opt-in, not in the total: {name} {s['jobs']} jobs, {s['hours']:.3f} GPU-hours ({OPT_IN_STAGES[name]})."
        )
    if unpriced:
        named = sorted(
            {
                f"{job['method']} ({job_attention(job)} attention, batch {job['batch_size']} decode "
                f"{job.get('decode_batch_size', 1)}) on {job['model']}"
                for job in unpriced
            }
        )
        lines.append(
            f"Not priced: {len(unpriced)} jobs, whose model was measured, but not with their attention implementation, "
            f"batch sizes or method (or the full cache): {'; '.join(named)}. Their hours are not in the totals; "
            "measure such a cell (perf.methods, perf.batch_sizes; snakemake perf_all) to price them."
        )
    lines.append(f"Already done (not counted): {done}")
    if workers:
        lines.append(
            f"Model loads: one per model worker ({len(workers)}: {', '.join(sorted(workers))}), one per job otherwise."
        )
    if records:
        backend, gpu = records[0].get("hardware_backend"), records[0].get("gpu_name")
        lines.append(f"Measured records: {len(records)} runs on {gpu} ({backend} backend).")
    lines.append(
        "Defaults, for a model nothing was measured for (perf.estimate.defaults; a guess, not a measurement): "
        f"load {settings['load_s']:g} s per job, prefill {settings['prefill_tokens_per_s']:g} tokens/s, "
        f"decode {settings['decode_s_per_token']:g} s/token, prompts of {settings['prompt_tokens']} tokens."
    )
    return "\n".join(lines) + "\n"

# `snakemake plan`: every GPU job the config asks for that has not run yet, and its estimated GPU-hours
# (kvcache_bench/plan.py), estimated from perf records of one hardware, else from stated defaults.


def plan_jobs():
    """Every GPU job the config asks for, with what its cost depends on (for `snakemake plan`)."""
    jobs = []
    for cell in study_cells():
        jobs.append(
            dict(
                stage="generate",
                output=cell_path("predictions", cell, ".jsonl"),
                model=cell["model"],
                method=cell["method"],
                retention=float(cell["retention"]),
                batch_size=int(cell["batch_size"]),
                runs=expected_examples(cell) or 0,
                prompt_tokens=None,
                max_context_tokens=config["models"][cell["model"]].get("max_context_tokens", 127500),
                new_tokens=max_new_tokens_for(cell["task"], GENERATION.get("max_new_tokens", {}).get(cell["task"])),
            )
        )
    for cell in perf_cells():
        jobs.append(
            dict(
                stage="perf",
                output=f"results/perf/{PERF_PATTERN.format(**cell)}.jsonl",
                model=cell["model"],
                method=cell["method"],
                retention=float(cell["retention"]),
                batch_size=int(cell["batch_size"]),
                runs=PERF.get("warmup", 1) + PERF.get("repeats", 3),
                prompt_tokens=int(cell["context"]),
                max_context_tokens=int(cell["context"]),
                new_tokens=PERF.get("new_tokens", 64),
            )
        )
    return jobs


def perf_estimate_records():
    """Measured perf records the plan estimates from: this workflow's and any the config names."""
    import glob

    found = sorted(glob.glob("results/perf/**/*.jsonl", recursive=True))
    # Named files that do not exist yet (reference records not committed) are skipped, not an error.
    return found + [p for p in PERF.get("estimate", {}).get("records", []) if os.path.exists(p)]


# No output: like `snakemake -n`, it runs whenever asked and only prints (and logs) the plan.
rule plan:
    log:
        "logs/plan.log",
    params:
        jobs=plan_jobs(),
        records=perf_estimate_records(),
        same_cost_as=PERF.get("estimate", {}).get("same_cost_as", {}),
        defaults=PERF.get("estimate", {}).get("defaults", {}),
        gpu_name=PERF.get("estimate", {}).get("gpu_name"),
    conda:
        "../envs/analysis.yaml"
    script:
        "../scripts/plan.py"


localrules:
    plan,

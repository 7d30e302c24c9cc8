# `snakemake plan`: every GPU job the config asks for that has not run yet, and its estimated GPU-hours
# (kvcache_bench/plan.py), estimated from perf records of one hardware, else from stated defaults.


def perf_estimate_records():
    """Measured perf records the plan estimates from: this workflow's and any the config names."""
    import glob

    found = sorted(glob.glob("results/perf/**/*.jsonl", recursive=True))
    # Named files that do not exist yet (reference records not committed) are skipped, not an error.
    return found + [p for p in PERF["estimate"].get("records", []) if os.path.exists(p)]


# No output: like `snakemake -n`, it runs whenever asked and only prints (and logs) the plan.
rule plan:
    log:
        "logs/plan.log",
    params:
        code=package_code("plan.py"),
        jobs=study.plan_jobs(config, STUDY_CELLS, PERF_CELLS),
        records=perf_estimate_records(),
        same_cost_as=PERF["estimate"].get("same_cost_as", {}),
        defaults=PERF["estimate"].get("defaults", {}),
        gpu_name=PERF["estimate"].get("gpu_name"),
    conda:
        "../envs/analysis.yaml"
    script:
        "../scripts/plan.py"


localrules:
    plan,

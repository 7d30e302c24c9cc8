# `snakemake plan`: every GPU job the config asks for that has not run yet, and its estimated GPU-hours
# (kvcache_bench/perf/plan.py), estimated from perf records of one hardware and of the job's own attention
# implementation, else from stated defaults; the study's jobs totalled, the opt-in perf pass apart.

from kvcache_bench.perf.plan import with_attention


# No output: like `snakemake -n`, it runs whenever asked and only prints (and logs) the plan.
rule plan:
    log:
        "logs/plan.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        code=package_code("plan.py"),
        jobs=with_attention(study.plan_jobs(config, STUDY_CELLS, PERF_CELLS), config),
        records=perf_estimate_records(),
        same_cost_as=PERF["estimate"].get("same_cost_as", {}),
        defaults=PERF["estimate"].get("defaults", {}),
        gpu_name=PERF["estimate"].get("gpu_name"),
    script:
        "../scripts/plan.py"

# Stage 2: refuse bad targets before any GPU job. Every generation job takes its check's output as
# input, so a refused target produces nothing downstream and (with --keep-going) the others go on.


# Milliseconds of work each: on a cluster they run in the Snakemake process instead of waiting in the queue.
rule check_methods:
    output:
        resolved="results/checks/methods.json",
        manifest="results/checks/methods.json.manifest.json",
    log:
        "logs/check_methods.log",
    localrule: True
    conda:
        "../envs/generate.yaml"
    params:
        code=package_code("check_methods.py"),
        methods=config["methods"],
        method_kwargs=config["method_kwargs"],
    script:
        "../scripts/check_methods.py"


rule check_config:
    input:
        methods=rules.check_methods.output.resolved,
    output:
        ok=f"results/checks/{CELL_PATTERN}.ok",
    log:
        f"logs/check_config/{CELL_PATTERN}.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        code=package_code("check_config.py"),
    script:
        "../scripts/check_config.py"


# No output: like `plan`, it runs whenever asked, so an upgraded kvpress is never hidden by a stale table.
rule doctor:
    log:
        "logs/doctor.log",
    localrule: True
    conda:
        "../envs/generate.yaml"
    params:
        code=package_code("doctor.py"),
    script:
        "../scripts/doctor.py"

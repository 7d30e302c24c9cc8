# Stage 2: refuse bad targets before any GPU job. Every generation job takes its check's output as
# input, so a refused target produces nothing downstream and (with --keep-going) the others go on.


# One job per method (seconds of CPU: a cluster runs it in the Snakemake process), its params that method's
# settings only: another config in the same results directory leaves every other method's check, and so
# every cell downstream, up to date.
rule check_method:
    output:
        properties="results/checks/methods/{method}.json",
        manifest="results/checks/methods/{method}.json.manifest.json",
    log:
        "logs/check_method/{method}.log",
    localrule: True
    conda:
        "../envs/generate.yaml"
    params:
        code=package_code("check_method.py"),
        method_kwargs=method_kwargs,
        custom_methods=custom_methods_needed,
        press_code=press_code,
    script:
        "../scripts/check_method.py"


rule check_config:
    input:
        properties=rules.check_method.output.properties,
    output:
        ok=f"results/checks/{CELL_PATTERN}.ok",
    log:
        f"logs/check_config/{CELL_PATTERN}.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        code=package_code("check_config.py"),
        custom_methods=custom_methods_needed,
        max_new_tokens=max_new_tokens,
    script:
        "../scripts/check_config.py"


# No output: like `plan`, it runs whenever asked. Its inputs are every method's check, measured once
# and kept up to date by their params (kvpress's version is in each check's manifest).
rule doctor:
    input:
        properties=doctor_method_checks(),
    log:
        "logs/doctor.log",
    localrule: True
    conda:
        "../envs/generate.yaml"
    params:
        code=package_code("doctor.py"),
    script:
        "../scripts/doctor.py"

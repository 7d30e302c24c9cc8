# Stage 2: what each method does to the cache, measured once per method. Every generation job takes its
# method's measurement as input and judges its own cell from it before any GPU time (study.cell_checks): a
# refused cell writes why instead of predictions, and the study's tables list it.


# One job per method (seconds of CPU: a cluster runs it in the Snakemake process), its params that method's
# settings only: another config in the same results directory leaves every other method's check, and so
# every cell downstream, up to date.
rule check_method:
    input:
        # the probe model's tokenizer: presses that re-tokenise (KVzip's repeat prompt) load it
        probe_tokenizer="resources/canary/tokenizer.json",
    output:
        properties="results/checks/methods/{method}.json",
        manifest="results/checks/methods/{method}.json.manifest.json",
    log:
        "logs/check_method/{method}.log",
    # before any cell: every generate job waits on its method's check, and only cells that are ready can run in
    # worker_order (one model, then the next); priorities do not reach a job's inputs
    priority: 100
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

# Stage 3: one generation job per cell, batch 1 unless the full cache batches (see rules/check.smk).


rule generate:
    input:
        unpack(model_inputs),
        rows="results/data/{dataset}/{task}.jsonl",
        # what the method was measured to do: the job judges its cell from it first (a refused cell writes why),
        # and a press that masks slots decodes one example at a time
        properties=rules.check_method.output.properties,
    output:
        predictions=f"results/predictions/{CELL_PATTERN}.jsonl",
        manifest=f"results/predictions/{CELL_PATTERN}.jsonl.manifest.json",
    log:
        f"logs/generate/{CELL_PATTERN}.log",
    benchmark:
        f"benchmarks/generate/{CELL_PATTERN}.tsv"
    priority: worker_order
    conda:
        "../envs/generate.yaml"
    threads: GENERATION["threads"]
    resources:
        gpu=1,
    params:
        **model_job_params("generate.py"),
        engine=lookup(dpath="models/{model}/engine", within=config),
        max_new_tokens=max_new_tokens,
        multi_turn_history=multi_turn_history,
        method_kwargs=method_kwargs,
        custom_methods=custom_methods_needed,
        press_code=press_code,
        seed=SEED,
        model_workers=GENERATION["model_workers"],
    script:
        "../scripts/generate.py"


# What the study's generate jobs cost against their measured work (not part of `all`):
#   snakemake results/tables/sweep_cost.json --profile profiles/local --configfile config/smollm2-h200.yaml
rule sweep_cost:
    input:
        predictions=all_prediction_files(),
    output:
        report=restored_if_failed("results/tables/sweep_cost.json"),
        manifest=restored_if_failed("results/tables/sweep_cost.json.manifest.json"),
    log:
        "logs/sweep_cost.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        code=package_code("sweep_cost.py"),
        benchmarks=all_generate_benchmarks(),
    script:
        "../scripts/sweep_cost.py"

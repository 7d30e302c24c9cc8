# Stage 3: one generation job per cell, batch 1 unless the full cache batches (see rules/check.smk).


rule generate:
    input:
        unpack(model_inputs),
        rows="results/data/{dataset}/{task}.jsonl",
        ok=rules.check_config.output.ok,
    output:
        predictions=f"results/predictions/{CELL_PATTERN}.jsonl",
        manifest=f"results/predictions/{CELL_PATTERN}.jsonl.manifest.json",
    log:
        f"logs/generate/{CELL_PATTERN}.log",
    benchmark:
        f"benchmarks/generate/{CELL_PATTERN}.tsv"
    conda:
        "../envs/generate.yaml"
    threads: GENERATION["threads"]
    resources:
        gpu=1,
    params:
        code=package_code("generate.py"),
        model_settings=model_settings,
        engine=lookup(dpath="models/{model}/engine", within=config),
        max_new_tokens=max_new_tokens,
        method_kwargs=method_kwargs,
        seed=SEED,
        warm_start=GENERATION["warm_start"],
    script:
        "../scripts/generate.py"

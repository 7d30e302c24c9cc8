# Stage 4: LongBench's metric for the task, kept per example so every aggregate can be recomputed.


rule score:
    input:
        predictions=rules.generate.output.predictions,
    output:
        scores=f"results/scores/{CELL_PATTERN}.jsonl",
        manifest=f"results/scores/{CELL_PATTERN}.jsonl.manifest.json",
    log:
        f"logs/score/{CELL_PATTERN}.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        code=package_code("score.py"),
    script:
        "../scripts/score.py"

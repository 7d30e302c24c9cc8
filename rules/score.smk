# Stage 4: LongBench's metric for the task, kept per example so every aggregate can be recomputed.


rule score:
    input:
        predictions="results/predictions/" + CELL_PATTERN + ".jsonl",
    output:
        scores="results/scores/" + CELL_PATTERN + ".jsonl",
        manifest="results/scores/" + CELL_PATTERN + ".jsonl.manifest.json",
    log:
        "logs/score/" + CELL_PATTERN + ".log",
    params:
        task="{task}",
    conda:
        "../envs/analysis.yaml"
    script:
        "../scripts/score.py"

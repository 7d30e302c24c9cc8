# Opt-in: `snakemake kvpress_export --cores 1` writes the study's cells in kvpress's evaluation layout
# (results/kvpress/<dataset>__<data_dir>__<model>__<press>__<ratio>[__query_aware]/{predictions.csv,metrics.json,
# config.yaml}, as kvpress's evaluation/evaluate.py writes them; kvcache_bench/analysis/kvpress_export.py), so a
# researcher can put these results beside kvpress's own runs and its leaderboard tooling. results/kvpress/index.csv
# says where each cell went, or why it has no kvpress equivalent (other_question, prefill batches).

from kvcache_bench.analysis.kvpress_export import EXPORT_ROOT, plan_export

KVPRESS_EXPORT, KVPRESS_LEFT_OUT = plan_export(SCORED_CELLS, config, os.getcwd())


rule kvpress_export:
    input:
        predictions=[cell_path("predictions", e["cell"], ".jsonl") for e in KVPRESS_EXPORT],
        scores=[cell_path("scores", e["cell"], ".jsonl") for e in KVPRESS_EXPORT],
        rows=sorted({f"results/data/{e['cell']['dataset']}/{e['cell']['task']}.jsonl" for e in KVPRESS_EXPORT}),
    output:
        # the whole layout, rewritten at each run: a cell refused by its check job leaves no directory behind
        export=restored_if_failed(directory(EXPORT_ROOT)),
    log:
        "logs/kvpress_export.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        code=package_code("export_kvpress.py"),
        exported=KVPRESS_EXPORT,
        left_out=KVPRESS_LEFT_OUT,
        max_new_tokens={
            task: study.max_new_tokens(config, task) for task in sorted({e["cell"]["task"] for e in KVPRESS_EXPORT})
        },
        seed=SEED,
    script:
        "../scripts/export_kvpress.py"

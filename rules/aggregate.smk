# Stage 5: the study's table, one row per accepted cell: n, mean, bootstrap CI, paired gap to full cache.


rule aggregate:
    input:
        scores=all_score_files(),
    # each restored if the job fails (restored_if_failed, rules/common.smk): it refuses a score file that is not
    # what its manifest says, and the finished tables are kept, not removed
    output:
        **multi_turn_table_outputs(),
        summary=restored_if_failed(
            report(
                "results/tables/summary.csv",
                caption="../report/summary_table.rst",
                category="Tables",
            )
        ),
        markdown=restored_if_failed("results/tables/summary.md"),
        markdown_manifest=restored_if_failed("results/tables/summary.md.manifest.json"),
        per_example=restored_if_failed(
            report(
                "results/tables/per_example.csv",
                caption="../report/per_example_table.rst",
                category="Tables",
            )
        ),
        manifest=restored_if_failed("results/tables/summary.csv.manifest.json"),
        per_example_manifest=restored_if_failed("results/tables/per_example.csv.manifest.json"),
    log:
        "logs/aggregate.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        code=package_code("aggregate.py"),
        cells=cells_for_table(),
        labels=custom_labels(),
        expected_n=expected_examples_per_cell(),
        not_run=not_run_cells(),
        predictions_only=prediction_only_cells(),
        seed=SEED,
        small_n=config["analysis"]["small_n"],
        n_resamples=config["analysis"]["bootstrap_resamples"],
    script:
        "../scripts/aggregate.py"


# The methods ranked at each retention, from the summary: what a figure of forty methods cannot say.
rule ranking:
    input:
        summary=rules.aggregate.output.summary,
    output:
        ranking=restored_if_failed(
            report(
                "results/tables/ranking.md",
                caption="../report/ranking_table.rst",
                category="Tables",
            )
        ),
        manifest=restored_if_failed("results/tables/ranking.md.manifest.json"),
    log:
        "logs/ranking.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        code=package_code("ranking.py"),
        small_n=config["analysis"]["small_n"],
    script:
        "../scripts/ranking.py"

# Figures and tables rebuilt from the committed reference runs (reference/<run>/, made on a GPU by the rules
# above) with this checkout's own analysis code, on CPU in seconds:
#   snakemake reference_figures --cores 1
# A run contributes what it committed: its study tables (tables/summary.csv, tables/per_example.csv: every
# figure of the study's own, the appendix past eight methods, the question-mode figure where it ran two modes, the
# multi-turn figure where it committed tables/multi_turn_by_turn.csv)
# and its padding probe reports (probes/padding/<task>/<model>/<method>.json). Across runs: each press's rank on one
# model against another's (reference/ranking-across-models.yaml declares which runs).


rule reference_figures:
    input:
        reference_outputs(),


use rule figure_quality_vs_retention as reference_figure_quality_vs_retention with:
    input:
        summary="reference/{run}/tables/summary.csv",
    output:
        **figure_outputs("quality_vs_retention", folder="results/reference/{run}/figures"),
    log:
        "logs/reference/{run}/figures/quality_vs_retention.log",


use rule figure_quality_by_family as reference_figure_quality_by_family with:
    input:
        summary="reference/{run}/tables/summary.csv",
    output:
        **figure_outputs("quality_by_family", folder="results/reference/{run}/figures"),
    log:
        "logs/reference/{run}/figures/quality_by_family.log",


use rule figure_paired_scatter as reference_figure_paired_scatter with:
    input:
        per_example="reference/{run}/tables/per_example.csv",
    output:
        **figure_outputs("paired_scatter", folder="results/reference/{run}/figures"),
    log:
        "logs/reference/{run}/figures/paired_scatter.log",


use rule figure_batch_size as reference_figure_batch_size with:
    input:
        summary="reference/{run}/tables/summary.csv",
    output:
        **figure_outputs("batch_size", folder="results/reference/{run}/figures"),
    log:
        "logs/reference/{run}/figures/batch_size.log",


use rule figure_question_change as reference_figure_question_change with:
    input:
        summary="reference/{run}/tables/summary.csv",
        per_example="reference/{run}/tables/per_example.csv",
    output:
        **figure_outputs("question_change", folder="results/reference/{run}/figures"),
    log:
        "logs/reference/{run}/figures/question_change.log",


use rule figure_multi_turn as reference_figure_multi_turn with:
    input:
        summary="reference/{run}/tables/summary.csv",
        by_turn="reference/{run}/tables/multi_turn_by_turn.csv",
    output:
        **figure_outputs("multi_turn", folder="results/reference/{run}/figures"),
    log:
        "logs/reference/{run}/figures/multi_turn.log",


use rule padding_probe_table as reference_padding_probe_table with:
    input:
        reports=reference_padding_probe_reports,
    output:
        table=restored_if_failed("results/reference/{run}/tables/padding_probe/{task}/{model}.csv"),
        markdown=restored_if_failed("results/reference/{run}/tables/padding_probe/{task}/{model}.md"),
        manifest=restored_if_failed("results/reference/{run}/tables/padding_probe/{task}/{model}.csv.manifest.json"),
        markdown_manifest=restored_if_failed(
            "results/reference/{run}/tables/padding_probe/{task}/{model}.md.manifest.json"
        ),
    log:
        "logs/reference/{run}/padding_probe_table/{task}/{model}.log",


use rule figure_padding_probe as reference_figure_padding_probe with:
    input:
        table=rules.reference_padding_probe_table.output.table,
    output:
        **figure_outputs("{model}", folder="results/reference/{run}/figures/padding_probe/{task}"),
    log:
        "logs/reference/{run}/figures/padding_probe/{task}/{model}.log",


# Does the ranking hold? Each press's rank on one model against its rank on another at the same retention and question
# mode (or the settings declared), Spearman's rho and Kendall's tau-b with bootstrap intervals over examples
# (docs/ranking-across-models.md). The seed and resamples are the study's, as every interval of the tables.
rule ranking_across_models:
    input:
        summaries=ranking_across_models_tables("summary"),
        per_examples=ranking_across_models_tables("per_example"),
    output:
        markdown=restored_if_failed("results/reference/ranking_across_models.md"),
        correlations=restored_if_failed("results/reference/ranking_across_models.csv"),
        presses=restored_if_failed("results/reference/ranking_across_models_presses.csv"),
        markdown_manifest=restored_if_failed("results/reference/ranking_across_models.md.manifest.json"),
        correlations_manifest=restored_if_failed("results/reference/ranking_across_models.csv.manifest.json"),
        presses_manifest=restored_if_failed("results/reference/ranking_across_models_presses.csv.manifest.json"),
    log:
        "logs/reference/ranking_across_models.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    params:
        code=package_code("ranking_across_models.py"),
        comparisons=ranking_across_models_params(),
        seed=SEED,
        n_resamples=config["analysis"]["bootstrap_resamples"],
    script:
        "../scripts/ranking_across_models.py"

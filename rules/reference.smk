# Figures and tables rebuilt from the committed reference runs (reference/<run>/, made on a GPU by the rules
# above) with this checkout's own analysis code, on CPU in seconds:
#   snakemake reference_figures --cores 1
# A run contributes what it committed: its study tables (tables/summary.csv, tables/per_example.csv: every
# figure of the study's own, the appendix past eight methods, the question-mode figure where it ran two modes)
# and its padding probe reports (probes/padding/<task>/<model>/<method>.json).


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


use rule padding_probe_table as reference_padding_probe_table with:
    input:
        reports=reference_padding_probe_reports,
    output:
        table="results/reference/{run}/tables/padding_probe/{task}/{model}.csv",
        markdown="results/reference/{run}/tables/padding_probe/{task}/{model}.md",
        manifest="results/reference/{run}/tables/padding_probe/{task}/{model}.csv.manifest.json",
        markdown_manifest="results/reference/{run}/tables/padding_probe/{task}/{model}.md.manifest.json",
    log:
        "logs/reference/{run}/padding_probe_table/{task}/{model}.log",


use rule figure_padding_probe as reference_figure_padding_probe with:
    input:
        table=rules.reference_padding_probe_table.output.table,
    output:
        **figure_outputs("{model}", folder="results/reference/{run}/figures/padding_probe/{task}"),
    log:
        "logs/reference/{run}/figures/padding_probe/{task}/{model}.log",

# Helpers of rules/reference.smk: which figures each committed run under reference/ allows, and its probe reports.
# Included before it: `rule reference_figures` calls reference_outputs() while that file is parsed.

import glob


def reference_outputs():
    """What `snakemake reference_figures` rebuilds: per committed run, the figures its tables and probes allow."""
    outputs = []
    for run_dir in sorted(glob.glob(os.path.join(workflow.basedir, "reference", "*"))):
        run = os.path.basename(run_dir)
        tables = os.path.join(run_dir, "tables")
        if os.path.exists(os.path.join(tables, "summary.csv")):
            outputs.append(f"results/reference/{run}/figures/quality_vs_retention.png")
            outputs.append(f"results/reference/{run}/figures/batch_size.png")
            if os.path.exists(os.path.join(tables, "per_example.csv")):
                outputs.append(f"results/reference/{run}/figures/paired_scatter.png")
                if reference_has_question_change(tables):
                    outputs.append(f"results/reference/{run}/figures/question_change.png")
            if len(reference_column(tables, "method") - {"full_cache"}) > ALL_IN_COLOUR_UP_TO:
                outputs.append(f"results/reference/{run}/figures/quality_by_family.png")
        for model_dir in sorted(glob.glob(os.path.join(run_dir, "probes", "padding", "*", "*"))):
            task, model = model_dir.split(os.sep)[-2:]
            outputs.append(f"results/reference/{run}/figures/padding_probe/{task}/{model}.png")
    return outputs


def reference_column(tables, column):
    """The values of one column of a committed run's summary.csv."""
    import csv

    with open(os.path.join(tables, "summary.csv")) as handle:
        return {row[column] for row in csv.DictReader(handle)}


def reference_has_question_change(tables):
    modes = reference_column(tables, "question_mode")
    return "question_aware" in modes and len(modes) > 1


def reference_padding_probe_reports(wildcards):
    directory = os.path.join("reference", wildcards.run, "probes", "padding", wildcards.task, wildcards.model)
    return sorted(p for p in glob.glob(os.path.join(directory, "*.json")) if not p.endswith(".manifest.json"))

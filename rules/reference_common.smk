# Helpers of rules/reference.smk: which figures each committed run under reference/ allows, its probe reports, and
# the comparisons of presses' ranks across runs that reference/ranking-across-models.yaml declares.
# Included before it: `rule reference_figures` calls reference_outputs() while that file is parsed.

import glob

from kvcache_bench.analysis.ranking_across_models import COMPARISONS_FILE, read_comparisons, runs_of, table_paths

# Read once, at parse: a declaration that names an unknown key, a mode that does not exist or a setting fixed on one
# side only is refused here, naming the file and the comparison. A checkout without reference/ declares none.
RANKING_COMPARISONS = read_comparisons(os.path.join(workflow.basedir, COMPARISONS_FILE))


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
            # a run of the multi-turn mode (issue 52) commits its score by turn beside its summary
            if os.path.exists(os.path.join(tables, "multi_turn_by_turn.csv")):
                outputs.append(f"results/reference/{run}/figures/multi_turn.png")
            if len(reference_column(tables, "method") - {"full_cache"}) > ALL_IN_COLOUR_UP_TO:
                outputs.append(f"results/reference/{run}/figures/quality_by_family.png")
        for model_dir in sorted(glob.glob(os.path.join(run_dir, "probes", "padding", "*", "*"))):
            task, model = model_dir.split(os.sep)[-2:]
            outputs.append(f"results/reference/{run}/figures/padding_probe/{task}/{model}.png")
    if RANKING_COMPARISONS:
        outputs.append("results/reference/ranking_across_models.md")
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


def ranking_across_models_tables(table):
    """The `table` (summary or per_example) of every run the declared comparisons read, in runs_of's order: a run
    declared but not committed is a missing input, named by Snakemake."""
    return [table_paths(run)[table] for run in runs_of(RANKING_COMPARISONS)]


def ranking_across_models_params():
    """The declaration as plain data: an edit to it reruns the job, and the manifest records it."""
    return [comparison.as_params() for comparison in RANKING_COMPARISONS]

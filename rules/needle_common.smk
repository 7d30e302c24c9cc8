# Helpers of rules/needle.smk: which needle heat maps a study makes and which score files each one reads.

from kvcache_bench.methods.registry import method_label


def _needle_cells(dataset, model, question_mode, method):
    return [
        cell
        for cell in STUDY_CELLS
        if (cell["dataset"], cell["model"], cell["question_mode"], cell["method"])
        == (dataset, model, question_mode, method)
        and cell["task"] == "needle_in_haystack"
    ]


def needle_figures():
    """One figure per needle dataset, model, question mode and press of the study (the full cache has none of its own)."""
    targets = {
        (cell["dataset"], cell["model"], cell["question_mode"], cell["method"])
        for cell in STUDY_CELLS
        if cell["dataset"] in NEEDLE_DATASETS and cell["method"] != "full_cache"
    }
    return [
        f"results/figures/needle/{dataset}/{model}/{mode}/{method}.png"
        for dataset, model, mode, method in sorted(targets)
    ]


def needle_panel_cells(wildcards):
    """The full cache's cells first, then the press's, highest retention first: the figure's panels in order."""
    full = _needle_cells(wildcards.dataset, wildcards.model, wildcards.question_mode, "full_cache")
    press = _needle_cells(wildcards.dataset, wildcards.model, wildcards.question_mode, wildcards.method)
    return full + sorted(press, key=lambda cell: -float(cell["retention"]))


def needle_panel_scores(wildcards):
    return [cell_path("scores", cell, ".jsonl") for cell in needle_panel_cells(wildcards)]


def needle_panel_labels(wildcards):
    return [
        f"{method_label(cell['method'], config['custom_methods'])}"
        + ("" if cell["method"] == "full_cache" else f", {float(cell['retention']):.0%} kept")
        for cell in needle_panel_cells(wildcards)
    ]

# Helpers shared by the rules: the study's cells, paths and per-rule params, computed from the config.

import re
import sys

sys.path.insert(0, workflow.basedir)

from kvcache_bench.workflow import export_package_path

# Jobs import the checkout's package (also inside --use-conda envs, and on cluster nodes, which parse
# this file again), so the code that ran is the code the manifest's git commit names.
export_package_path(workflow.basedir)

from kvcache_bench.checks import Cell, problems_with
from kvcache_bench.methods import retentions_for
from kvcache_bench.prompts import max_new_tokens_for

SEED = config["seed"]
GENERATION = config.get("generation", {})
QUESTION_MODES = config["question_modes"]
SETTING_PATTERN = "retention-{retention}_batch-{batch_size}_decode-{decode_batch_size}"
CELL_PATTERN = f"{{dataset}}/{{task}}/{{model}}/{{method}}/{{question_mode}}/{SETTING_PATTERN}"


def _alternatives(names):
    """A wildcard regex matching exactly these names (and nothing, for an empty list)."""
    return "|".join(re.escape(n) for n in names) if names else "(?!x)x"


HUB_DATASETS = [name for name, d in config["datasets"].items() if d["source"] in ("hub", "local")]
SYNTHETIC_DATASETS = [name for name, d in config["datasets"].items() if d["source"] == "synthetic"]
RULER_HAYSTACK_DATASETS = [name for name, d in config["datasets"].items() if d["source"] == "ruler_haystack"]
BUILT_MODELS = [name for name, m in config["models"].items() if m.get("build")]
PACKAGED_MODELS = [name for name, m in config["models"].items() if m.get("from_package")]


wildcard_constraints:
    retention=r"\d\.\d\d",
    batch_size=r"\d+",
    decode_batch_size=r"\d+",
    question_mode="question_aware|question_agnostic",
    method=r"[a-z0-9_]+",
    model=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    dataset=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    task=r"[A-Za-z0-9_-]+",


def batch_sizes_for(method):
    """batch_sizes applies to every method unless batch_size_overrides names the method."""
    return config.get("batch_size_overrides", {}).get(method, config["batch_sizes"])


def decode_batch_sizes_for(batch_size):
    """A padded prefill batch decodes together already: decode batching applies to batch size 1."""
    return [1] if batch_size > 1 else config.get("decode_batch_sizes", [1])


def requested_cells():
    """Every (dataset, task, model, method, question mode, retention, batch size) the config asks for."""
    cells = []
    for dataset, dataset_cfg in config["datasets"].items():
        for task in dataset_cfg["tasks"]:
            for model in config["models"]:
                for method in config["methods"]:
                    for mode in QUESTION_MODES:
                        for retention in retentions_for(method, config["retentions"]):
                            for batch_size in batch_sizes_for(method):
                                for decode_batch_size in decode_batch_sizes_for(batch_size):
                                    cells.append(
                                        dict(
                                            dataset=dataset,
                                            task=task,
                                            model=model,
                                            method=method,
                                            question_mode=mode,
                                            retention=f"{retention:.2f}",
                                            batch_size=str(batch_size),
                                            decode_batch_size=str(decode_batch_size),
                                        )
                                    )
    return cells


def _is_refused(cell):
    return bool(
        problems_with(
            Cell(**table_cell(cell))
        )
    )


def study_cells():
    """The requested cells the config check accepts: only these reach tables and figures."""
    return [cell for cell in requested_cells() if not _is_refused(cell)]


def refused_checks():
    """Check outputs of refused cells: requested by `all` so their check job fails loudly, naming them."""
    return [
        f"results/checks/{CELL_PATTERN.format(**cell)}.ok"
        for cell in requested_cells()
        if _is_refused(cell)
    ]


def cell_path(stage, cell, suffix):
    return f"results/{stage}/{CELL_PATTERN.format(**cell)}{suffix}"


def expected_examples(cell):
    dataset_cfg = config["datasets"][cell["dataset"]]
    if dataset_cfg["source"] == "synthetic":
        synthetic = dataset_cfg.get("synthetic", {})
        available = synthetic.get("n_documents", 1) * synthetic.get("questions_per_document", 1)
        return min(available, dataset_cfg.get("num_examples") or available)
    return dataset_cfg.get("num_examples")


def all_score_files():
    return [cell_path("scores", cell, ".jsonl") for cell in study_cells()]


TABLES = ["summary.csv", "summary.md", "per_example.csv"]
FIGURES = ["quality_vs_retention", "paired_scatter", "batch_size"]


def table_files():
    return [f"results/tables/{name}" for name in TABLES]


def figure_files():
    return [f"results/figures/{name}.{ext}" for name in FIGURES for ext in ("png", "svg")]


def final_outputs():
    return refused_checks() + table_files() + figure_files()


# ----------------------------------------------------------------------------- per-rule params


def model_settings(wildcards):
    model = config["models"][wildcards.model]
    return dict(
        path=model["path"],
        dtype=model.get("dtype", "bfloat16"),
        attn_implementation=model.get("attn_implementation", "sdpa"),
        trust_remote_code=model.get("trust_remote_code", False),
        max_context_tokens=model.get("max_context_tokens", 127500),
        device=GENERATION.get("device", "auto"),
    )


def built_model_inputs(wildcards):
    """The model directory when this workflow makes the model (built or from a package); nothing for hub weights."""
    model = config["models"][wildcards.model]
    if model.get("build") or model.get("from_package"):
        return {"model_dir": model["path"]}
    return {}


def max_new_tokens(wildcards):
    return max_new_tokens_for(wildcards.task, GENERATION.get("max_new_tokens", {}).get(wildcards.task))


def method_kwargs(wildcards):
    return config.get("method_kwargs", {}).get(wildcards.method, {})


def dataset_setting(key, default=None):
    def lookup(wildcards):
        return config["datasets"][wildcards.dataset].get(key, default)

    return lookup


def built_model_setting(key):
    def lookup(wildcards):
        return config["models"][wildcards.model]["build"][key]

    return lookup


def packaged_model_setting(key):
    def lookup(wildcards):
        return config["models"][wildcards.model]["from_package"].get(key)

    return lookup


def ruler_haystack_setting(key):
    def lookup(wildcards):
        return config["datasets"][wildcards.dataset]["ruler_haystack"][key]

    return lookup


def cells_for_table():
    return [table_cell(cell) for cell in study_cells()]


def table_cell(cell):
    """A cell's wildcards with their numeric types, as the checks and tables take them."""
    return {
        **cell,
        "retention": float(cell["retention"]),
        "batch_size": int(cell["batch_size"]),
        "decode_batch_size": int(cell["decode_batch_size"]),
    }


def wildcard_float(name):
    def convert(wildcards):
        return float(wildcards[name])

    return convert


def wildcard_int(name):
    def convert(wildcards):
        return int(wildcards[name])

    return convert

# Helpers shared by the rules: the study's config made whole, its cells and tables, the targets, and the input
# functions and params that the rules compute from them. What the workflow prints, raises or locks while Snakemake
# parses it is in rules/checks.smk; the probes' helpers are in rules/probes_common.smk, the reference runs' in
# rules/reference_common.smk (as perf's and the needle's: Snakemake's lint keeps functions out of rule files).

import functools
import os
import re
import sys

sys.path.insert(0, workflow.basedir)

from kvcache_bench.code_hash import package_code_hash
from kvcache_bench.escaping import script_safe
from kvcache_bench.workflow import export_package_path

# Jobs import the checkout's package (also inside --use-conda envs, and on cluster nodes, which parse
# this file again), so the code that ran is the code the manifest's git commit names.
export_package_path(workflow.basedir)

import yaml

from kvcache_bench.data import llama3_tokenizer as llama3_tokenizer_source
from kvcache_bench.data.kvpress_datasets import BENCHMARKS as KVPRESS_BENCHMARKS
from kvcache_bench.study import cells as study
from kvcache_bench.study.cell_checks import Cell, problems_of
from kvcache_bench.study.sliding_layers import sliding_layers_of
from kvcache_bench.study.question_modes import QUESTION_MODES
from kvcache_bench.methods.custom import methods_needed, press_code_hash
from kvcache_bench.methods.registry import METHODS, attention_implementation_for, did_you_mean
from kvcache_bench.analysis.versus import (
    ALL_IN_COLOUR_UP_TO,
    MULTI_TURN_MODE,
    default_highlight,
    highlight_caption,
    label_of,
)
from kvcache_bench.methods.shipped_properties import parse_time_properties
from kvcache_bench.study.prompts import ANSWERS_HIDDEN, KNOWN_TASKS
from kvcache_bench.runtime.gpus import detected_gpu_count
from kvcache_bench.study.config_checks import StudyConfigError, check_study_config, expand_home_in_paths
from kvcache_bench.study.setting_checks import jobs_run_here, missing_gpu_problem, visible_gpu_count
from kvcache_bench.study.cells import CELL_PATTERN, cell_path
from kvcache_bench.study.config_files import sort_setting_keys
from kvcache_bench.study.sources import content_of, local_dataset_files, local_model_files, local_tokenizer_files

# Defaults live in the schema only: fill them in once, so the rules never restate one.
with open(os.path.join(workflow.basedir, "schemas/config.schema.yaml")) as handle:
    study.apply_schema_defaults(config, yaml.safe_load(handle))
expand_home_in_paths(config)
# Params hold config values, compared by their repr: one key order, whatever order a config file writes.
sort_setting_keys(config)

# The first of the parse-time checks (rules/checks.smk says what each refuses, and why at parse): it runs here,
# on the config made whole and before any cell is computed from it (an unknown method would otherwise stop the
# parse in the registry, not with this refusal of every problem at once).
check_study_config(config, os.getcwd())
# A GPU the config names and this machine lacks: judged here only when the jobs run on this machine (a cluster's
# parse runs on a login node); each job names it too, before it loads anything (engine.loading.device_problem).
if workflow.is_main_process and jobs_run_here(sys.argv, os.environ):
    gpus = functools.partial(visible_gpu_count, os.environ, detected_gpu_count)
    if missing := missing_gpu_problem(config, gpus):
        raise StudyConfigError(missing)

SEED = config["seed"]
GENERATION = config["generation"]


def _alternatives(names):
    """A wildcard regex matching exactly these names (and nothing, for an empty list)."""
    return "|".join(re.escape(n) for n in names) if names else "(?!x)x"


HUB_DATASETS = [name for name, d in config["datasets"].items() if d["source"] in ("hub", "local")]
SYNTHETIC_DATASETS = [name for name, d in config["datasets"].items() if d["source"] == "synthetic"]
RULER_HAYSTACK_DATASETS = [name for name, d in config["datasets"].items() if d["source"] == "ruler_haystack"]
# NVIDIA's RULER generator (rule make_ruler) and kvpress's needle test on Paul Graham's essays (rule make_needle_grid)
RULER_DATASETS = [name for name, d in config["datasets"].items() if d["source"] == "ruler"]
NEEDLE_DATASETS = [name for name, d in config["datasets"].items() if d["source"] == "needle_in_haystack"]
# kvpress's other evaluation datasets, in its column layout (rule read_kvpress_dataset)
KVPRESS_LAYOUT_DATASETS = [name for name, d in config["datasets"].items() if d["source"] in KVPRESS_BENCHMARKS]


def kvpress_hub_id(wildcards):
    """The dataset's hub_id, or the one kvpress's evaluation reads it from."""
    dataset = config["datasets"][wildcards.dataset]
    return dataset.get("hub_id") or KVPRESS_BENCHMARKS[dataset["source"]].hub_id


BUILT_MODELS = [name for name, m in config["models"].items() if m.get("build", {}).get("model_config")]
SHAPED_MODELS = [name for name, m in config["models"].items() if m.get("build", {}).get("shape")]
PACKAGED_MODELS = [name for name, m in config["models"].items() if m.get("from_package")]
# Llama 3.1's tokenizer, made by materialise_llama3_tokenizer: a config names this directory as a tokenizer.
LLAMA3_TOKENIZER_DIR = "results/tokenizers/llama-3.1"


def cell_problems(cell):
    """Why a cell cannot run, judged from the config and, for a built-in method, the properties the package ships
    (measured by the code check_method runs): a dry run knows them before any job. A custom press is measured by
    its check job only; each generate job judges its cell again from that measurement and has the last word."""
    task = cell["task"]
    new_tokens = study.max_new_tokens(config, task) if task in KNOWN_TASKS else None
    properties = parse_time_properties(cell["method"], config)
    sliding_layers = sliding_layers_of(config["models"][cell["model"]])
    return problems_of(cell, config["custom_methods"], properties, new_tokens, sliding_layers)


# The study's cells, each judged once: only accepted cells reach tables and figures. A refused cell is printed
# before any job and listed, with why, in the tables (not run); when every cell is refused the run stops at parse
# (refuse_a_study_with_nothing_to_run, rules/checks.smk).
STUDY_CELLS, REFUSED_CELLS = study.split_by_check(study.requested_cells(config), cell_problems)
# ZeroSCROLLS hides its answers (its leaderboard scores them): its cells write predictions, and no score or table row
SCORED_CELLS = [cell for cell in STUDY_CELLS if cell["task"] not in ANSWERS_HIDDEN]
PREDICTION_ONLY_CELLS = [cell for cell in STUDY_CELLS if cell["task"] in ANSWERS_HIDDEN]


wildcard_constraints:
    retention=study.RETENTION_WILDCARD,
    batch_size=r"\d+",
    decode_batch_size=r"\d+",
    question_mode="|".join(QUESTION_MODES),
    method=r"[a-z0-9_]+",
    model=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    dataset=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    task=r"[A-Za-z0-9_-]+",


def all_score_files():
    return [cell_path("scores", cell, ".jsonl") for cell in SCORED_CELLS]


def all_prediction_files():
    return [cell_path("predictions", cell, ".jsonl") for cell in STUDY_CELLS]


def all_generate_benchmarks():
    """The generate jobs' benchmark files, in the order of all_prediction_files()."""
    return [f"benchmarks/generate/{CELL_PATTERN.format(**cell)}.tsv" for cell in STUDY_CELLS]


TABLES = ["summary.csv", "summary.md", "per_example.csv", "ranking.md"]
FIGURES = ["quality_vs_retention", "paired_scatter", "batch_size"]
# the cost of a changed question needs the mode the press saw it in and another mode
if "question_aware" in config["question_modes"] and len(config["question_modes"]) > 1:
    FIGURES.append("question_change")
# a conversation's score by turn and its drop after turn 1 (issue 52): tables and a figure of the multi-turn mode
MULTI_TURN_TABLES = (
    ["multi_turn_by_turn.csv", "multi_turn_drop.csv"] if MULTI_TURN_MODE in config["question_modes"] else []
)
TABLES += MULTI_TURN_TABLES
if MULTI_TURN_TABLES:
    FIGURES.append("multi_turn")
# past eight methods the figures draw yours against the strongest and the baselines; the appendix draws them all
if len({cell["method"] for cell in STUDY_CELLS} - {"full_cache"}) > ALL_IN_COLOUR_UP_TO:
    FIGURES.append("quality_by_family")


def highlighted_methods():
    """What every figure draws bold, on the same axes as the strongest and the classic baselines:
    figures.highlight, else the full cache and every custom press of the study; {method: its label}, for the
    figures (a committed table may have no label column); their report captions read figure_caption()."""
    names = list(config["figures"]["highlight"]) or default_highlight(config["methods"], config["custom_methods"])
    known = list(METHODS) + list(config["custom_methods"])
    unknown = [
        f"figures.highlight names {name!r}, which is no method; {did_you_mean(name, known)}".rstrip("; ")
        for name in names
        if name not in known
    ]
    if unknown:  # a typo would silently highlight nothing
        raise StudyConfigError("\n".join(unknown))
    return script_safe({name: label_of(name, config["custom_methods"]) for name in names})


def custom_labels():
    """How tables and legends name the config's custom presses (their `label`); built-ins name themselves."""
    return script_safe({name: label_of(name, config["custom_methods"]) for name in config["custom_methods"]})


# A label is the user's text, and a rule's params reach `snakemake --report`'s report.html twice:
# - as text, f"{name}={value}", inside its <script id="results"> element, where a label's '</script>' ended the
#   element and the rest ran as the page's HTML (docs/hostile-cases.md). script_safe's dicts keep the labels as
#   written (the jobs, their manifests, legends and tables need them) and write '<', '>' and '&' in their text as
#   '\x3c'-style escapes: the same Python literal, no '<'. An ordinary label's text is unchanged, so a finished
#   study reruns nothing.
# - in a figure's caption (report/*.rst), rendered as reStructuredText: captions read figure_caption(), each
#   label escaped for it on one line (analysis.versus.highlight_caption), never the labels themselves.
# Wildcards need neither: a name is [A-Za-z0-9._-] (the schema, wildcard_constraints above).
def figure_caption():
    """The text a figure's report caption reads (report/*.rst: snakemake.params.report_caption)."""
    return highlight_caption(highlighted_methods())


def table_files():
    return [f"results/tables/{name}" for name in TABLES]


def figure_files():
    return [f"results/figures/{name}.{ext}" for name in FIGURES for ext in ("png", "svg")]


def final_outputs():
    """The tables and figures of the accepted cells (they list the refused ones); none for a config of no study
    cells (a needle grid alone). Every cell refused stops the run at parse."""
    predictions_only = [cell_path("predictions", cell, ".jsonl") for cell in PREDICTION_ONLY_CELLS]
    if not SCORED_CELLS:
        return predictions_only
    return table_files() + figure_files() + engine_comparison_outputs() + predictions_only


def prediction_only_cells():
    """The cells whose answers are hidden, for the table's note: written, never scored."""
    return [Cell(**study.typed_cell(cell)).target for cell in PREDICTION_ONLY_CELLS]


def not_run_cells():
    """The refused cells and why, for the tables: a missing cell is listed, never silently absent."""
    typed = [study.typed_cell(cell) for cell in REFUSED_CELLS]
    # a refusal quotes a custom press's label or a press's own error: text the report embeds (highlight_caption)
    return script_safe([dict(target=Cell(**cell).target, problems=cell_problems(cell)) for cell in typed])


# ----------------------------------------------------------------------------- blocks rules share
# (as PyPSA-Eur's logs()/benchmarks()/resources(): a block written once here, so each rule is its own few lines)


def model_job_params(script):
    """The params of every job that loads a model: its script's code hash, the model's settings, and the hash of
    a local model's weights (so other weights under the same name rerun the job and show in its manifest)."""
    return dict(code=package_code(script), model_settings=model_settings, model_sha256=model_content)


def worker_order(wildcards):
    """A model job's priority: the cells of one model and attention run together, earlier models first. A GPU holds
    one model worker, so a scheduler alternating two models restarts it at every switch (~20 s each for SmolLM2 on
    an H200, docs/findings.md#liger-kernels-on-real-weights)."""
    models = list(config["models"])
    configured = config["models"][wildcards.model]["attn_implementation"]
    attention = attention_implementation_for(wildcards.method, configured, config.get("custom_methods"))
    return 2 * (len(models) - models.index(wildcards.model)) + (attention == configured)


def restored_if_failed(output):
    """An output of a job that reads other outputs: Snakemake removes a job's outputs when it starts it, so a job
    that refused a changed input (analysis.verified) lost what it had made before (issue 51). Flagged update(),
    the output is backed up instead and put back when the job fails ("Restored previous version of ..."); its job
    still reruns while an input is newer. The study's own inputs are refused before any job (rules/checks.smk, 5):
    this keeps what a job can only refuse itself (a reference run's table, a file changed after the parse)."""
    return update(output)


def multi_turn_table_outputs():
    """The aggregate job's multi-turn tables and their manifests, in a study that asks the mode (none otherwise:
    a study without it makes, and reruns, nothing new)."""
    outputs = {}
    for table in MULTI_TURN_TABLES:
        name = table.removesuffix(".csv")
        outputs[name] = restored_if_failed(f"results/tables/{table}")
        outputs[f"{name}_manifest"] = restored_if_failed(f"results/tables/{table}.manifest.json")
    return outputs


def figure_outputs(name, subcategory=None, folder="results/figures", caption=None):
    """A figure's three outputs: the PNG (in `snakemake --report`, under Figures/<subcategory>, with
    report/<caption or name>.rst, when a subcategory is given), its SVG, and the PNG's manifest; each restored if
    its job fails (a figure job reads a table, and refuses one that is not what its manifest says)."""
    png = f"{folder}/{name}.png"
    if subcategory:
        caption = f"../report/{caption or name}.rst"
        png = report(png, caption=caption, category="Figures", subcategory=subcategory)
    outputs = dict(png=png, svg=f"{folder}/{name}.svg", manifest=f"{folder}/{name}.png.manifest.json")
    return {key: restored_if_failed(path) for key, path in outputs.items()}


# ----------------------------------------------------------------------------- per-rule params


@functools.cache
def package_code(script):
    """Hash of the package modules the script runs. Every rule's params carry it: Snakemake reruns a job
    whose params changed, so a library edit reruns exactly the jobs that run the edited module."""
    return package_code_hash(
        os.path.join(workflow.basedir, "scripts", script), os.path.join(workflow.basedir, "kvcache_bench")
    )


def model_settings(wildcards):
    model = config["models"][wildcards.model]
    return dict(
        path=model["path"],
        dtype=model["dtype"],
        attn_implementation=model["attn_implementation"],
        trust_remote_code=model["trust_remote_code"],
        max_context_tokens=model["max_context_tokens"],
        device=GENERATION["device"],
        # only when pinned: an unpinned model's params (and so its cells) stay as they were
        **({"revision": model["revision"]} if model.get("revision") else {}),
        # likewise only when not transformers' own: fused kernels are a different model's numbers, so new cells
        **({"kernels": model["kernels"]} if model.get("kernels", "transformers") != "transformers" else {}),
        # only when set: a model without sliding layers never names it, and unset runs the documented default
        **({"sliding_layers": model["sliding_layers"]} if model.get("sliding_layers") else {}),
        # and only when off: raw prompts for a model whose tokenizer has a chat template (a base model) are new cells
        **({"chat_template": False} if not model.get("chat_template", True) else {}),
    )


MADE_MODEL_PATHS = {m["path"] for m in config["models"].values() if m.get("build") or m.get("from_package")}


def model_inputs(wildcards):
    """The model directory when this workflow makes it (built or from a package, maybe under another model's
    name: a second engine on the same weights), every file of a local model folder (ancient: it must exist, and
    its content, not its mtime, reruns the jobs that load it: model_content), nothing for hub weights."""
    model = config["models"][wildcards.model]
    if model["path"] in MADE_MODEL_PATHS:
        return {"model_dir": model["path"]}
    files = local_model_files(model)
    return {"model_files": [ancient(path) for path in files]} if files else {}


def model_content(wildcards):
    """{file: sha256} of a local model folder (which weights, in every manifest made from them); {} otherwise."""
    model = config["models"][wildcards.model]
    return {} if model["path"] in MADE_MODEL_PATHS else content_of(local_model_files(model))


def dataset_source_inputs(wildcards):
    """The local copy's files the data job reads for this task (ancient: their content reruns it and its cells,
    dataset_content, whatever their mtime)."""
    files = local_dataset_files(config["datasets"][wildcards.dataset], wildcards.task)
    return {"source_files": [ancient(path) for path in files]} if files else {}


def dataset_content(wildcards):
    return content_of(local_dataset_files(config["datasets"][wildcards.dataset], wildcards.task))


def tokenizer_content(dpath):
    """{file: sha256} of the local tokenizer folder at ``dpath`` of the config ({} for a hub id or a folder this
    workflow makes): a tokenizer replaced by other files reruns the data jobs sized with it."""
    folder = lookup(dpath=dpath, within=config, default=None)
    return lambda wildcards: content_of(local_tokenizer_files(folder(wildcards)))


def max_new_tokens(wildcards):
    return study.max_new_tokens(config, wildcards.task)


def multi_turn_history(wildcards):
    """What a multi_turn cell's later turns append as the previous answer (config multi_turn.history); None for the
    other question modes, which have no later turn."""
    return config["multi_turn"]["history"] if wildcards.question_mode == "multi_turn" else None


def method_kwargs(wildcards):
    return config["method_kwargs"].get(wildcards.method, {})


def custom_methods_needed(wildcards):
    """The custom_methods settings this method is built from (none for a built-in): only these reach its jobs."""
    return methods_needed(wildcards.method, config["custom_methods"])


def press_code(wildcards):
    """Hash of the presses/<file>.py this method imports: an edit reruns only the cells built from it."""
    return press_code_hash(wildcards.method, config["custom_methods"], os.getcwd())


def doctor_method_checks():
    """Every built-in method's check and the config's custom ones'."""
    names = list(METHODS) + list(config["custom_methods"])
    return [f"results/checks/methods/{name}.json" for name in names]


def cells_for_table():
    return [study.typed_cell(cell) for cell in SCORED_CELLS]


def expected_examples_per_cell():
    return [study.expected_examples(config, cell) for cell in SCORED_CELLS]

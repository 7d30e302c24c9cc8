"""The study a config describes: its cells, which of them the config check refuses, and where their files live.

Pure functions of the config (after ``apply_schema_defaults``), so "which cells does this config make?" is a
unit test (tests/test_study.py), not a dry run. rules/common.smk calls them once per parse.

A cell is a dict of wildcard strings (dataset, task, model, method, question_mode, retention, batch_size,
decode_batch_size; perf cells add context), exactly as they appear in paths: ``Cell(...).wildcards()`` writes one,
``Cell(**typed_cell(cell))`` reads it back.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

from kvcache_bench.methods.registry import attention_implementation_for, retentions_for
from kvcache_bench.study.prompts import max_new_tokens_for

# How a retention is written in paths and wildcards: ``retention_label`` writes it, this regex reads it back.
RETENTION_WILDCARD = r"[01]\.\d\d+"  # no braces: Snakemake reads them as wildcards
SETTING_PATTERN = "retention-{retention}_batch-{batch_size}_decode-{decode_batch_size}"
CELL_PATTERN = f"{{dataset}}/{{task}}/{{model}}/{{method}}/{{question_mode}}/{SETTING_PATTERN}"
PERF_PATTERN = "{dataset}/{task}/{model}/{method}/context-{context}/retention-{retention}_batch-{batch_size}"


def retention_label(retention: float) -> str:
    """The one place a retention (fraction of the KV cache kept) becomes text in a path: 0.5 -> "0.50",
    0.125 -> "0.125"; ``float(label) == retention`` always.

    Jobs read their retention back from the path, so the label must name exactly one float: two decimals
    when they are exact, otherwise the shortest decimal that reads back as the same float (never an exponent).
    """
    value = float(retention)
    two_decimals = f"{value:.2f}"
    if float(two_decimals) == value:
        return two_decimals
    return format(Decimal(repr(value)), "f")


def setting_slug(retention: float, batch_size: int, decode_batch_size: int = 1) -> str:
    return SETTING_PATTERN.format(
        retention=retention_label(retention), batch_size=batch_size, decode_batch_size=decode_batch_size
    )


def apply_schema_defaults(config: dict, schema: dict) -> dict:
    """Fill every default the schema states, in place, also inside maps (each model, each dataset).

    Snakemake's ``validate`` fills ``properties`` defaults only; models and datasets are
    ``additionalProperties`` maps, whose defaults (dtype, max_context_tokens, split) it leaves out.
    """
    for key, subschema in schema.get("properties", {}).items():
        if key not in config and "default" in subschema:
            config[key] = copy.deepcopy(subschema["default"])
        if isinstance(config.get(key), dict):
            apply_schema_defaults(config[key], subschema)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        for key, value in config.items():
            if key not in schema.get("properties", {}) and isinstance(value, dict):
                apply_schema_defaults(value, extra)
    return config


def batch_sizes_for(config: dict, method: str) -> list[int]:
    """batch_sizes applies to every method unless batch_size_overrides names the method."""
    return config["batch_size_overrides"].get(method, config["batch_sizes"])


def decode_batch_sizes_for(config: dict, batch_size: int) -> list[int]:
    """A padded prefill batch decodes together already: decode batching applies to batch size 1."""
    return [1] if batch_size > 1 else config["decode_batch_sizes"]


@dataclass(frozen=True)
class Cell:
    """One generation target: everything that decides what a predictions file contains."""

    dataset: str
    task: str
    model: str
    method: str
    question_mode: str
    retention: float
    batch_size: int  # prompts prefilled together (left-padded): refused with eviction
    decode_batch_size: int = 1  # compressed caches decoded together after prefilling each alone: always safe

    @property
    def target(self) -> str:
        return (
            f"{self.dataset}/{self.task}/{self.model}/{self.method}/{self.question_mode}/"
            f"{setting_slug(self.retention, self.batch_size, self.decode_batch_size)}"
        )

    def wildcards(self) -> dict:
        """The cell as its wildcards write it (``typed_cell`` reads them back)."""
        return {
            "dataset": self.dataset,
            "task": self.task,
            "model": self.model,
            "method": self.method,
            "question_mode": self.question_mode,
            "retention": retention_label(self.retention),
            "batch_size": str(self.batch_size),
            "decode_batch_size": str(self.decode_batch_size),
        }


# kvpress's pipeline (models.<name>.engine) generates one example at a time: its models get batch-1 cells only.
ONE_AT_A_TIME_ENGINE = "kvpress_pipeline"


def requested_cells(config: dict) -> list[dict]:
    """Every cell the config asks for, in config order, before the check."""
    return [
        Cell(dataset, task, model, method, mode, retention, batch_size, decode_batch_size).wildcards()
        for dataset, dataset_cfg in config["datasets"].items()
        for task in dataset_cfg["tasks"]
        for model in config["models"]
        for method in config["methods"]
        for mode in config["question_modes"]
        for retention in retentions_for(method, config["retentions"], config.get("custom_methods"))
        for batch_size in batch_sizes_for(config, method)
        for decode_batch_size in decode_batch_sizes_for(config, batch_size)
        if batch_size == decode_batch_size == 1 or config["models"][model].get("engine") != ONE_AT_A_TIME_ENGINE
    ]


def typed_cell(cell: dict) -> dict:
    """A cell's wildcards with their numeric types, as the checks and tables take them."""
    return {
        **cell,
        "retention": float(cell["retention"]),
        "batch_size": int(cell["batch_size"]),
        "decode_batch_size": int(cell["decode_batch_size"]),
    }


def split_by_check(cells: list[dict], problems_of: Callable[[dict], list[str]]) -> tuple[list[dict], list[dict]]:
    """(accepted, refused), each cell judged once by ``problems_of`` (``kvcache_bench.study.cell_checks.problems_of``).

    The check is passed in, not imported: the check names its targets with this module's ``setting_slug``.
    """
    accepted, refused = [], []
    for cell in cells:
        generation_cell = {key: value for key, value in cell.items() if key != "context"}
        (refused if problems_of(typed_cell(generation_cell)) else accepted).append(cell)
    return accepted, refused


def cell_path(stage: str, cell: dict, suffix: str) -> str:
    """results/<stage>/<dataset>/<task>/<model>/<method>/<mode>/<setting><suffix>"""
    return f"results/{stage}/{CELL_PATTERN.format(**cell)}{suffix}"


def expected_examples(config: dict, cell: dict) -> int | None:
    """How many examples the cell's table row should have (None: all the dataset has, unknown here)."""
    dataset_cfg = config["datasets"][cell["dataset"]]
    if dataset_cfg["source"] == "synthetic":  # asking for more rows than the generator makes is flagged, not capped
        from kvcache_bench.study.prompts import synthetic_row_count

        return dataset_cfg.get("num_examples") or synthetic_row_count(dataset_cfg.get("synthetic", {}))
    return dataset_cfg.get("num_examples")


def max_new_tokens(config: dict, task: str) -> int:
    return max_new_tokens_for(task, config["generation"]["max_new_tokens"].get(task))


# ----------------------------------------------------------------------------- the perf pass


def perf_dataset_and_task(config: dict) -> tuple[str, str]:
    """Contexts are cut from this dataset's documents; cells are checked as its task's cells."""
    perf = config["perf"]
    dataset = perf.get("dataset") or next(iter(config["datasets"]))
    task = perf.get("task") or config["datasets"][dataset]["tasks"][0]
    return dataset, task


def requested_perf_cells(config: dict) -> list[dict]:
    """Every perf cell the config's ``perf:`` section asks for (question-aware, decode batch 1)."""
    perf = config["perf"]
    dataset, task = perf_dataset_and_task(config)
    return [
        {
            **Cell(dataset, task, model, method, "question_aware", retention, batch_size, 1).wildcards(),
            "context": str(context),
        }
        for model in config["models"]
        if config["models"][model].get("engine") != ONE_AT_A_TIME_ENGINE  # the perf pass times this engine's steps
        for method in perf.get("methods") or config["methods"]
        for retention in retentions_for(
            method, perf.get("retentions") or config["retentions"], config.get("custom_methods")
        )
        for batch_size in perf["batch_sizes"]
        for context in perf["context_lengths"]
    ]


def perf_record_path(cell: dict) -> str:
    return f"results/perf/{PERF_PATTERN.format(**cell)}.jsonl"


# ----------------------------------------------------------------------------- the plan's jobs


def _worker_of(config: dict, cell: dict) -> str | None:
    """The model worker a generate job runs in (runtime.worker; one per GPU, the plan counts one), or None."""
    if not config["generation"].get("model_workers"):
        return None
    model = config["models"][cell["model"]]
    return (
        f"{cell['model']} "
        f"({attention_implementation_for(cell['method'], model['attn_implementation'], config.get('custom_methods'))}"
        " attention)"
    )


def plan_jobs(config: dict, study_cells: list[dict], perf_cells: list[dict]) -> list[dict]:
    """Every GPU job the config asks for, with what its cost depends on (kvcache_bench.perf.plan estimates it)."""
    perf = config["perf"]
    jobs = [
        dict(
            stage="generate",
            output=cell_path("predictions", cell, ".jsonl"),
            model=cell["model"],
            method=cell["method"],
            retention=float(cell["retention"]),
            batch_size=int(cell["batch_size"]),
            decode_batch_size=int(cell.get("decode_batch_size", 1)),
            runs=expected_examples(config, cell) or 0,
            prompt_tokens=None,
            max_context_tokens=config["models"][cell["model"]]["max_context_tokens"],
            new_tokens=max_new_tokens(config, cell["task"]),
            worker=_worker_of(config, cell),
        )
        for cell in study_cells
    ]
    jobs += [
        dict(
            stage="perf",
            output=perf_record_path(cell),
            model=cell["model"],
            method=cell["method"],
            retention=float(cell["retention"]),
            batch_size=int(cell["batch_size"]),
            runs=perf["warmup"] + perf["repeats"],
            prompt_tokens=int(cell["context"]),
            max_context_tokens=int(cell["context"]),
            new_tokens=perf["new_tokens"],
        )
        for cell in perf_cells
    ]
    return jobs

"""A study's cells in kvpress's evaluation layout, beside kvpress's own runs and its leaderboard tooling.

kvpress's ``evaluation/evaluate.py`` (NVIDIA/kvpress, unchanged from v0.5.4 to its main branch) writes one
directory per run, named by ``EvaluationConfig.get_results_dir``:
``<dataset>__<data_dir>__<model with / as -->__<press_name>__<compression_ratio:.2f>[__query_aware]``
(``__key_channel_cr<r:.2f>`` for a ThinK press), holding ``predictions.csv`` (the dataset's columns but
``context``, plus ``predicted_answer`` and ``compression_ratio``), ``metrics.json`` (its benchmark scorer's
output: a number for LongBench, ``{task: {"string_match": x}}`` for RULER) and ``config.yaml`` (the
``EvaluationConfig`` fields in their order, ``threshold`` and ``head_compression_ratio`` dropped when unset).
This module writes the same names, columns and keys from a study's files; it runs nothing.

What maps and what does not:
- ``question_aware`` is kvpress's ``query_aware`` (the question compressed with the context; kvpress then writes
  the question column empty, having moved it into the context) and ``question_agnostic`` its default. The
  ``other_question`` and ``same_question`` modes have no kvpress run: they are listed as not exported.
- The full cache is kvpress's ``no_press`` (compression ratio 0.00); every other method keeps its name (kvpress's
  registry name where it has one, ``kvcache_bench.methods.catalogue``); a custom press, its own.
- Only batch-1 cells at the smallest decode batch are exported (kvpress prefills alone and decodes one example
  at a time; decode batching does not change the answers); larger prefill batches are listed as not exported.
- Scores are this study's (LongBench's metrics, ``kvcache_bench.analysis.metrics``), mean x100 rounded to 2
  decimals as kvpress's scorers round. A RULER-style task (a ``string_match_*`` metric) takes kvpress's RULER
  layout (an ``answer`` column, ``{task: {"string_match": x}}``); every other task its LongBench layout.
- Prompts were truncated as LongBench's pred.py truncates them (``models.<name>.max_context_tokens``), not as
  kvpress's ``max_context_length`` would: config.yaml says ``max_context_length: null`` and each file's
  manifest says what truncation there was.
"""

from __future__ import annotations

import json
import os

import pandas as pd
import yaml

from kvcache_bench.analysis.aggregate import retention_percent
from kvcache_bench.files import read_jsonl
from kvcache_bench.methods.registry import METHODS, compression_ratio_for

NO_PRESS = "no_press"
QUERY_AWARE = {"question_aware": True, "question_agnostic": False}
EXPORT_ROOT = "results/kvpress"
FILES = ("predictions.csv", "metrics.json", "config.yaml")
# EvaluationConfig's fields, in its order (config.yaml is asdict() of it)
CONFIG_KEYS = [
    "dataset",
    "data_dir",
    "model",
    "device",
    "press_name",
    "compression_ratio",
    "key_channel_compression_ratio",
    "head_compression_ratio",
    "threshold",
    "fraction",
    "max_new_tokens",
    "max_context_length",
    "query_aware",
    "needle_depth",
    "compression_interval",
    "target_size",
    "hidden_states_buffer_size",
    "output_dir",
    "log_level",
    "model_kwargs",
    "press_init_command",
    "seed",
    "fp8",
]
DECODING_KEYS = ("compression_interval", "target_size", "hidden_states_buffer_size")


def model_id(name: str, model: dict, workdir: str = ".") -> str:
    """What kvpress calls the model (``--model``, a hub id): the config's path when it is a hub repository; the
    config's name for a model this workflow makes or reads from a local folder (it has no hub id)."""
    path = str(model["path"])
    local = (
        model.get("build")
        or model.get("from_package")
        or os.path.exists(os.path.join(workdir, path))
        or path.startswith(("/", "."))
    )
    return name if local or "/" not in path else path


def results_dir_name(
    dataset: str,
    data_dir: str | None,
    model: str,
    press_name: str,
    compression_ratio: float,
    query_aware: bool,
    key_channel_compression_ratio: float | None = None,
) -> str:
    """The directory ``EvaluationConfig.get_results_dir`` names for these settings (no fraction, no
    max_context_length, no needle depth: this export never sets them)."""
    components = [dataset, data_dir or "", model.replace("/", "--"), press_name, f"{compression_ratio:.2f}"]
    if query_aware:
        components.append("query_aware")
    if key_channel_compression_ratio is not None:
        components.append(f"key_channel_cr{key_channel_compression_ratio:.2f}")
    return "__".join(filter(None, components))


def _ratios(method: str, retention: float) -> tuple[float, float | None]:
    """(compression_ratio, key_channel_compression_ratio) as kvpress's config would say them."""
    family = METHODS[method].family if method in METHODS else None
    if method == "full_cache":
        return 0.0, None
    ratio = compression_ratio_for(retention)
    if method == "think":  # ThinKPress alone: the ratio is of key channels, not tokens
        return 0.0, ratio
    if family == "key channels":  # ThinK composed with a token press: both
        return ratio, ratio
    return ratio, None


def model_ids(config: dict, workdir: str = ".") -> dict[str, str]:
    """Each configured model's kvpress name; models sharing one hub id (a second engine on the same weights)
    keep their config names, so that no two cells write one directory."""
    ids = {name: model_id(name, model, workdir) for name, model in config["models"].items()}
    shared = {i for i in ids.values() if list(ids.values()).count(i) > 1}
    return {name: (name if i in shared else i) for name, i in ids.items()}


def plan_export(cells: list[dict], config: dict, workdir: str = ".") -> tuple[list[dict], list[dict]]:
    """(exported, not exported) among the study's accepted ``cells``: each exported cell with its kvpress
    directory and config.yaml; each other with why."""
    exported, left_out = [], []
    ids = model_ids(config, workdir)
    smallest_decode = {}
    for cell in cells:
        key = (cell["dataset"], cell["task"], cell["model"], cell["method"], cell["question_mode"], cell["retention"])
        smallest_decode[key] = min(smallest_decode.get(key, 10**9), int(cell["decode_batch_size"]))
    for cell in cells:
        key = (cell["dataset"], cell["task"], cell["model"], cell["method"], cell["question_mode"], cell["retention"])
        if cell["question_mode"] not in QUERY_AWARE:
            left_out.append(
                {**cell, "why": f"{cell['question_mode']} has no kvpress evaluation run (query_aware is true or false)"}
            )
            continue
        if int(cell["batch_size"]) != 1:
            left_out.append(
                {
                    **cell,
                    "why": f"prefill batch {cell['batch_size']}: kvpress's evaluation prefills one context at a time",
                }
            )
            continue
        if int(cell["decode_batch_size"]) != smallest_decode[key]:
            left_out.append(
                {
                    **cell,
                    "why": f"decode batch {cell['decode_batch_size']}: the same answers as decode batch "
                    f"{smallest_decode[key]}, which is exported",
                }
            )
            continue
        model = config["models"][cell["model"]]
        ratio, key_ratio = _ratios(cell["method"], float(cell["retention"]))
        press = NO_PRESS if cell["method"] == "full_cache" else cell["method"]
        model_name = ids[cell["model"]]
        kwargs = config["method_kwargs"].get(cell["method"], {})
        settings = {
            "dataset": cell["dataset"],
            "data_dir": cell["task"],
            "model": model_name,
            "device": config["generation"]["device"],
            "press_name": press,
            "compression_ratio": ratio,
            "key_channel_compression_ratio": key_ratio,
            "fraction": 1.0,
            "max_new_tokens": None,
            "max_context_length": None,
            "query_aware": QUERY_AWARE[cell["question_mode"]],
            "needle_depth": None,
            **{k: kwargs.get(k) for k in DECODING_KEYS},
            "output_dir": EXPORT_ROOT,
            "log_level": "INFO",
            "model_kwargs": {"attn_implementation": model["attn_implementation"], "dtype": model["dtype"]},
            "press_init_command": None,
            "seed": config["seed"],
            "fp8": False,
        }
        directory = results_dir_name(
            cell["dataset"], cell["task"], model_name, press, ratio, settings["query_aware"], key_ratio
        )
        exported.append({"cell": cell, "directory": f"{EXPORT_ROOT}/{directory}", "settings": settings})
    return exported, left_out


def construction_repr(construction: dict | None) -> str | None:
    """``str(press)`` as kvpress's config records it (a dataclass repr), from a record's construction."""
    if construction is None:
        return None

    def value(v):
        if isinstance(v, dict) and "class" in v:
            return construction_repr(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(item) for item in v) + "]"
        return repr(v)

    arguments = ", ".join(f"{k}={value(v)}" for k, v in sorted((construction.get("kwargs") or {}).items()))
    return f"{construction['class'].rpartition('.')[2]}({arguments})"


def ruler_layout(metric: str) -> bool:
    """A RULER-style task (string matching): kvpress's RULER columns and metrics; else its LongBench ones."""
    return metric.startswith("string_match")


def export_cell(
    entry: dict, score_file: str, prediction_file: str, rows_by_id: dict[str, dict], max_new_tokens: int
) -> dict:
    """The three files' contents for one exported cell: {"predictions.csv": DataFrame, "metrics.json": value,
    "config.yaml": dict} and the facts its manifests record."""
    scores = read_jsonl(score_file)
    predictions = {r["id"]: r for r in read_jsonl(prediction_file)}
    settings = dict(entry["settings"], max_new_tokens=max_new_tokens)
    task = settings["data_dir"]
    metric = scores[0]["metric"] if scores else ""
    records = []
    for score in scores:
        row = rows_by_id[score["id"]]
        question = "" if settings["query_aware"] else row.get("input", "")  # kvpress moved it into the context
        answers = row.get("answers") or score.get("references") or []
        record = {"question": question}
        if ruler_layout(metric):
            record["answer"] = list(answers)
        else:
            record.update(
                answers=list(answers),
                length=row.get("length"),
                dataset=row.get("dataset"),
                language=row.get("language"),
                all_classes=row.get("all_classes"),
                _id=row.get("_id", score["id"]),
            )
        record.update(
            answer_prefix="",
            task=task,
            max_new_tokens=max_new_tokens,
            predicted_answer=score["prediction"],
            compression_ratio=settings["compression_ratio"],
        )
        records.append(record)
    frame = pd.DataFrame(records)
    mean = round(100 * sum(float(s["score"]) for s in scores) / len(scores), 2) if scores else float("nan")
    metrics = {task: {"string_match": mean}} if ruler_layout(metric) else mean
    first = next(iter(predictions.values()), {})
    settings["press_init_command"] = construction_repr(first.get("construction"))
    config_yaml = {key: settings[key] for key in CONFIG_KEYS if key in settings}
    for unset in ("threshold", "head_compression_ratio"):  # save_config drops them when unset
        config_yaml.pop(unset, None)
    truncated = [bool(s.get("truncated")) for s in scores]
    facts = {
        "cell": entry["cell"],
        "metric": metric,
        "n": len(scores),
        "truncated_share": round(sum(truncated) / len(truncated), 4) if truncated else None,
        "scores_from": score_file,
        "predictions_from": prediction_file,
    }
    return {"predictions.csv": frame, "metrics.json": metrics, "config.yaml": config_yaml, "facts": facts}


def index_frame(exported: list[dict], left_out: list[dict], summaries: list[dict]) -> pd.DataFrame:
    """One row per study cell: where it was exported, or why not."""
    rows = [
        {
            **e["cell"],
            "retention": retention_percent(float(e["cell"]["retention"])),
            "directory": e["directory"],
            "n": s["facts"]["n"],
            "metrics": json.dumps(s["metrics.json"]),
            "why_not_exported": "",
        }
        for e, s in zip(exported, summaries)
    ]
    rows += [
        {
            **{k: v for k, v in c.items() if k != "why"},
            "retention": retention_percent(float(c["retention"])),
            "directory": "",
            "n": None,
            "metrics": "",
            "why_not_exported": c["why"],
        }
        for c in left_out
    ]
    frame = pd.DataFrame(rows)
    if "n" in frame:
        frame["n"] = frame["n"].astype("Int64")  # a count, blank where the cell was not exported
    return frame


def dump_config(config_yaml: dict) -> str:
    """config.yaml as kvpress's save_config writes it (yaml.dump, block style, indent 2, fields in order)."""
    return yaml.dump(config_yaml, default_flow_style=False, indent=2, sort_keys=False)

"""Checks of the whole study config when the workflow is parsed, before any job runs.

Each guards against an input that used to change what was measured without a word: a retention
rounded in its path, method_kwargs filed under a name no method has, a model path that does not exist
(reported once per job, as a malformed hub id). The per-target check (batching with eviction, ...)
stays in ``checks.py``; this module judges what only the whole config can tell.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from pathlib import Path

from kvcache_bench.methods.custom import custom_method_problems, known_names
from kvcache_bench.study.cells import RETENTION_WILDCARD, retention_label  # noqa: F401  (the one home of path labels)
from kvcache_bench.study.context_limits import context_setting_problem, longest_answer, model_context
from kvcache_bench.study.input_bounds import data_file_problem
from kvcache_bench.study.model_folders import model_folder_problems, tokenizer_folder_problems
from kvcache_bench.study.packaged_files import packaged_model_problems
from kvcache_bench.study.press_values import method_kwargs_value_problems
from kvcache_bench.study.setting_checks import setting_problems

# Two decimals when they are exact (the paths every study so far has used), more digits only when needed.
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


class StudyConfigError(ValueError):
    pass


def method_kwargs_problems(config: dict) -> list[str]:
    """kwargs under a name no method has are never used (a typo runs the method with kvpress's defaults): refuse
    them, and compression_ratio. kwargs of a known method this study does not run are harmless and allowed."""
    configured = list(dict.fromkeys(list(config["methods"]) + list((config.get("perf") or {}).get("methods") or [])))
    problems, known = [], known_names(config)
    for name, kwargs in (config.get("method_kwargs") or {}).items():
        if name not in known:
            close = difflib.get_close_matches(name, configured, n=1) or difflib.get_close_matches(name, known, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            problems.append(
                f"method_kwargs names {name!r}, which is not a method (this study runs: {', '.join(configured)}); "
                f"its settings would be ignored.{hint}"
            )
        if "compression_ratio" in (kwargs or {}):
            problems.append(
                f"method_kwargs.{name} sets compression_ratio: how much cache each cell keeps is set by `retentions` "
                "(the fraction KEPT; kvpress's compression_ratio is the fraction dropped), one cell per retention. "
                "Remove it."
            )
    for name, spec in (config.get("custom_methods") or {}).items():
        if "compression_ratio" in ((spec or {}).get("kwargs") or {}):  # it was replaced by the retention without a word
            problems.append(
                f"custom_methods.{name}.kwargs sets compression_ratio: each cell's is 1 - its retention (`retentions`, "
                "the fraction KEPT), one cell per retention, so this value would be replaced. Remove it."
            )
    return problems


def _looks_local(path: str, workdir: Path) -> bool:
    """A path a user meant as a folder: rooted, relative by dots or ~, deeper than org/name,
    or under a folder that exists here."""
    if path.startswith(("/", "./", "../", "~")) or path.count("/") >= 2 or "\\" in path:
        return True
    first = path.split("/", 1)[0]
    return "/" in path and (workdir / first).is_dir()


def json_file_problem(path: Path) -> str | None:
    try:
        json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as error:
        return f"{path} is not UTF-8 text (byte {error.start})"
    except json.JSONDecodeError as error:
        return f"{path} is not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})"
    return None


def model_path_problems(models: dict, workdir: str | os.PathLike = ".") -> list[str]:
    """Tell a local model folder from a hub id, and say plainly when the folder is not there."""
    workdir = Path(workdir)
    problems = []
    made = {settings["path"] for settings in models.values() if settings.get("build") or settings.get("from_package")}
    for name, settings in models.items():
        if settings["path"] in made:
            continue  # the workflow makes it (rules/models.smk), maybe under another model's name
        path = settings["path"]
        local = Path(os.path.expanduser(path))
        local = local if local.is_absolute() else workdir / local
        where = f"models.{name}.path {path!r}"
        if settings.get("revision") and (local.exists() or _looks_local(path, workdir)):
            problems.append(
                f"models.{name}.revision {settings['revision']!r} pins a hub commit, but {where} is a local folder "
                "(its files are the jobs' inputs): drop revision, or give the hub id as path"
            )
        if local.exists():
            if not local.is_dir():
                problems.append(f"{where} is a file; a model path is a directory holding config.json and the weights")
            elif not (local / "config.json").is_file():
                problems.append(f"{where} is a directory without config.json, so not a Hugging Face model folder")
            elif problem := json_file_problem(local / "config.json"):
                problems.append(f"{where}: {problem}")
            else:  # a readable config.json: what transformers would make of the folder (study.model_folders)
                problems += model_folder_problems(where, local, settings)
        elif _looks_local(path, workdir):
            problems.append(
                f"{where} is a local directory that does not exist ({local}). Fix the path, or give a hub id "
                "(org/name, e.g. meta-llama/Llama-3.1-8B-Instruct)."
            )
        elif not HUB_ID.match(path):
            problems.append(f"{where} is neither an existing directory nor a hub id of the form org/name")
    return problems


def dataset_path_problems(datasets: dict, workdir: str | os.PathLike = ".") -> list[str]:
    """A local copy must be there, with a file for every task: its files are the data jobs' inputs."""
    from kvcache_bench.study.sources import DatasetUnavailableError, local_source_files

    problems = []
    for name, dataset in datasets.items():
        local_path = dataset.get("local_path")
        if dataset.get("revision") and dataset["source"] != "hub":
            problems.append(
                f"datasets.{name}.revision {dataset['revision']!r} pins a hub commit, but the dataset's source is "
                f"{dataset['source']!r}: drop revision, or read it from the hub (source: hub, hub_id)"
            )
        if dataset["source"] == "local" and not local_path:
            problems.append(
                f"datasets.{name} has source: local but no local_path (a .parquet/.jsonl file or a directory)"
            )
        if not local_path:
            continue
        where = Path(workdir, local_path)
        if not where.exists():
            problems.append(f"datasets.{name}.local_path {local_path!r} does not exist ({where})")
            continue
        for task in dataset["tasks"]:
            try:
                files = local_source_files(task, str(where), dataset.get("data_dir"))
            except DatasetUnavailableError as error:
                problems.append(f"datasets.{name}.local_path: {error}")
                continue
            # by size alone, before the DAG hashes the file (a param of its data job) or the data job reads it
            for problem in filter(None, map(data_file_problem, files)):
                if f"datasets.{name}.local_path: {problem}" not in problems:  # RULER's tasks share their files
                    problems.append(f"datasets.{name}.local_path: {problem}")
    return problems


def expand_home_in_paths(config: dict) -> dict:
    """`~` means the home directory in every path of the config, the one rule for all: expanded here, once,
    so the parse-time checks, the DAG's inputs and every job's loader see the same path."""

    def expand(holder: dict, key: str) -> None:
        if isinstance(holder.get(key), str) and holder[key].startswith("~"):
            holder[key] = os.path.expanduser(holder[key])

    for model in config["models"].values():
        expand(model, "path")
        for key in ("model_config", "tokenizer"):
            expand(model.get("build") or {}, key)
    for dataset in config["datasets"].values():
        expand(dataset, "local_path")
        expand(dataset.get("ruler_haystack") or {}, "tokenizer")
    records = ((config.get("perf") or {}).get("estimate") or {}).get("records") or []
    records[:] = [os.path.expanduser(record) for record in records]
    return config


def _unknown(kind: str, key: str, name: str, known: list[str]) -> str | None:
    if name in known:
        return None
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return f"{key} names {kind} {name!r}, which this study does not have (it has: {', '.join(known) or 'none'}).{hint}"


def per_task_map_problems(config: dict) -> list[str]:
    """Settings filed under a task, a dataset or a model the study does not have are never used: a typo
    (`max_new_tokens: {Qasper: 32}`) would run every task with its default, without a word."""
    tasks = list(dict.fromkeys(task for dataset in config["datasets"].values() for task in dataset["tasks"]))
    datasets = list(config["datasets"])
    problems = [
        _unknown("task", "generation.max_new_tokens", task, tasks)
        for task in (config.get("generation") or {}).get("max_new_tokens") or {}
    ]
    perf = config.get("perf") or {}
    if perf.get("dataset"):
        problems.append(_unknown("dataset", "perf.dataset", perf["dataset"], datasets))
    if perf.get("task") and perf.get("dataset") in config["datasets"]:
        problems.append(_unknown("task", "perf.task", perf["task"], config["datasets"][perf["dataset"]]["tasks"]))
    for section, probe in (config.get("probes") or {}).items():  # a probe's task need not make cells: not checked
        probe_datasets = probe.get("datasets") or [probe.get("dataset")]
        problems += [_unknown("dataset", f"probes.{section}", name, datasets) for name in probe_datasets if name]
    same_cost = ((perf.get("estimate") or {}).get("same_cost_as")) or {}
    problems += [_unknown("model", "perf.estimate.same_cost_as", name, list(config["models"])) for name in same_cost]
    return [problem for problem in problems if problem]


def model_context_problems(config: dict, workdir: str | os.PathLike = ".") -> list[str]:
    """``max_context_tokens`` past the positions a local model folder's config.json says it was trained on
    (``study.context_limits``). A folder the workflow makes (build, from_package) is not read here: it does not
    exist at a first parse, and at a later one it may be a stale copy its rule is about to remake; the job that
    loads it holds the same check against the model it loaded."""
    made = {
        settings["path"]
        for settings in config["models"].values()
        if settings.get("build") or settings.get("from_package")
    }
    answer_tokens, task = longest_answer(config)
    problems = []
    for name, settings in config["models"].items():
        path, limit = settings["path"], settings.get("max_context_tokens")
        folder = Path(os.path.expanduser(path))
        config_file = (folder if folder.is_absolute() else Path(workdir, folder)) / "config.json"
        if path in made or limit is None or not config_file.is_file() or json_file_problem(config_file):
            continue  # a hub id is checked by its job; a broken config.json is named by model_path_problems
        context = model_context(json.loads(config_file.read_text(encoding="utf-8")))
        if context is not None and (
            problem := context_setting_problem(
                f"models.{name}.max_context_tokens",
                limit,
                context,
                f"{os.path.join(path, 'config.json')}",
                answer_tokens,
                task,
            )
        ):
            problems.append(problem)
    return problems


MADE_MODELS_DIR = "results/models"


def made_model_path_problems(models: dict) -> list[str]:
    """A model the workflow makes (build, from_package) is made at results/models/<name>: any other path would
    be loaded as it is (another model's weights, in a table labelled with this one) or never made."""
    problems = []
    for name, model in models.items():
        maker = "build" if model.get("build") else "from_package" if model.get("from_package") else None
        expected = f"{MADE_MODELS_DIR}/{name}"
        if maker and os.path.normpath(model["path"]) != expected:
            problems.append(
                f"models.{name} has {maker}:, which makes the model at {expected}, but its path is {model['path']!r}"
                f"{' (an existing folder, which would be loaded instead)' if Path(model['path']).exists() else ''}. "
                f"Set path: {expected}, or remove {maker}: to load {model['path']!r} as it is."
            )
        if maker and model.get("revision"):
            problems.append(
                f"models.{name}.revision pins a hub commit, but the workflow makes this model ({maker}:): drop revision"
            )
    return problems


def study_config_problems(config: dict, workdir: str | os.PathLike = ".") -> list[str]:
    return (
        method_kwargs_problems(config)
        + custom_method_problems(config, workdir)
        + model_path_problems(config["models"], workdir)
        + model_context_problems(config, workdir)
        + made_model_path_problems(config["models"])
        + packaged_model_problems(config["models"], workdir)
        + dataset_path_problems(config["datasets"], workdir)
        + tokenizer_folder_problems(config, workdir)
        + per_task_map_problems(config)
        + method_kwargs_value_problems(config)
        + device_problems(config)
        + multi_turn_problems(config)
        + setting_problems(config, workdir)
    )


def multi_turn_problems(config: dict) -> list[str]:
    """kvpress's pipeline engine has no conversation to run: a multi_turn cell of one of its models would be run as
    question_agnostic, so the config is refused."""
    if "multi_turn" not in (config.get("question_modes") or []):
        return []
    problems = []
    # kvpress's pipeline answers each question of a context from the compressed context alone: it has no conversation
    pipeline_models = [name for name, model in config["models"].items() if model.get("engine") == "kvpress_pipeline"]
    if pipeline_models:
        problems.append(
            f"the multi_turn mode runs on this benchmark's engine only, and models {pipeline_models} use engine: "
            "kvpress_pipeline, which has no multi-turn conversation; remove multi_turn from question_modes or run "
            "those models in a study of their own"
        )
    return problems


DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def device_problems(config: dict) -> list[str]:
    device = str((config.get("generation") or {}).get("device", "auto"))
    if DEVICE.match(device):
        return []
    return [
        f"generation.device {device!r} is not a device torch knows: "
        "use auto (a GPU when there is one), cpu, cuda or cuda:N"
    ]


def check_study_config(config: dict, workdir: str | os.PathLike = ".") -> None:
    problems = study_config_problems(config, workdir)
    if problems:
        raise StudyConfigError(
            "the study config is refused before any job runs:\n" + "\n".join(f"  - {p}" for p in problems)
        )


def remote_code_files(path: str | os.PathLike) -> list[str]:
    """The Python a model folder would run with trust_remote_code: its .py files and its config's auto_map."""
    folder = Path(path)
    if not folder.is_dir():
        return []
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.py"))
    config_file = folder / "config.json"
    if config_file.is_file():
        auto_map = json.loads(config_file.read_text(encoding="utf-8")).get("auto_map") or {}
        for reference in auto_map.values():
            for item in reference if isinstance(reference, list) else [reference]:
                if item:
                    files.append(f"auto_map: {item}")
    return files


def remote_code_warning(settings: dict, name: str | None = None) -> str | None:
    """A warning naming the model and the code it runs, when trust_remote_code is on; None otherwise."""
    if not settings.get("trust_remote_code"):
        return None
    path = settings["path"]
    files = remote_code_files(path)
    if files:
        code = ", ".join(files)
    elif Path(path).is_dir():
        code = "no .py file and no auto_map: nothing to run, so trust_remote_code can be false"
    else:
        code = "whatever the hub repository's config auto_map names, downloaded at load time"
    model = f"models.{name}" if name else f"model {path!r}"
    return f"{model} has trust_remote_code: true, so loading {path!r} runs that model's own Python code ({code})"


def lock_holder_warning(workdir: str | os.PathLike = ".") -> str | None:
    """Another Snakemake run's locks in this directory: its outputs look incomplete only because it is writing them."""
    locks = sorted(Path(workdir, ".snakemake", "locks").glob("*.lock"))
    if not locks:
        return None
    return (
        "another Snakemake run holds this working directory (lock files in .snakemake/locks). "
        "Files it is writing will be reported as incomplete: do NOT --rerun-incomplete them. Wait for it to "
        "finish, or run the second study from its own copy of the workflow. If no other run is "
        "alive (it was killed), remove its lock with `snakemake --unlock` first."
    )

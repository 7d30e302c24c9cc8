"""Settings a library would refuse only mid-job, with its own traceback (or accept and run on with wrong numbers):
named here when the workflow is parsed, with the config key and what to write instead (issue 27 item 6).

Parse time: imports no torch, transformers or kvpress (a dry run must stay fast and run where they are not
installed); what is installed is read with importlib.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import yaml

FLASH_ATTENTION = "flash_attention_2"
PARQUET_MAGIC = b"PAR1"  # a parquet file starts and ends with these four bytes


def flash_attention_problems(config: dict, flash_attn_installed: bool | None = None) -> list[str]:
    """flash_attention_2 on a CPU, or without the flash_attn package: transformers refuses it only when a job
    loads the model. Which package is installed is judged in this Python (the one the jobs run in, unless a
    job's own environment is made elsewhere)."""
    if flash_attn_installed is None:
        flash_attn_installed = importlib.util.find_spec("flash_attn") is not None
    device = str((config.get("generation") or {}).get("device", "auto"))
    problems = []
    for name, model in config["models"].items():
        if model.get("attn_implementation") != FLASH_ATTENTION:
            continue
        key = f"models.{name}.attn_implementation"
        if device in ("cpu", "mps"):
            problems.append(
                f"{key} is {FLASH_ATTENTION}, but generation.device is {device!r}: FlashAttention runs on CUDA GPUs "
                "only. Use sdpa (or eager), or a cuda device."
            )
        elif not flash_attn_installed:
            problems.append(
                f"{key} is {FLASH_ATTENTION}, but the flash_attn package is not installed in this environment: "
                "install it (pip install flash-attn), or use sdpa."
            )
    return problems


def fused_kernel_problems(config: dict) -> list[str]:
    """kernels: liger on a CPU: Liger-Kernel is Triton, which the job would find out only after loading its model.
    Whether liger-kernel is installed is the job's environment's business (envs/generate.post-deploy.sh installs it)."""
    device = str((config.get("generation") or {}).get("device", "auto"))
    return [
        f"models.{name}.kernels is liger, but generation.device is {device!r}: Liger-Kernel's Triton kernels run on "
        "CUDA GPUs only. Use kernels: transformers (or leave it out), or a cuda device."
        for name, model in config["models"].items()
        if model.get("kernels") == "liger" and device in ("cpu", "mps")
    ]


def _is_integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def seed_problems(config: dict) -> list[str]:
    """A press's seed that is no integer: torch's generator raises a TypeError in the job, after the model loaded."""
    kwargs_by_key = {f"method_kwargs.{name}": kwargs for name, kwargs in (config.get("method_kwargs") or {}).items()}
    kwargs_by_key |= {
        f"custom_methods.{name}.kwargs": (spec or {}).get("kwargs")
        for name, spec in (config.get("custom_methods") or {}).items()
    }
    return [
        f"{key}.seed is {kwargs['seed']!r}: a seed is a whole number (e.g. 0); or remove it to use the press's own"
        for key, kwargs in kwargs_by_key.items()
        if "seed" in (kwargs or {}) and not _is_integer(kwargs["seed"])
    ]


def hub_dataset_problems(datasets: dict) -> list[str]:
    """source: hub reads hub_id: without it (and no local copy) the data job fails on the hub's own error."""
    return [
        f"datasets.{name} has source: hub but no hub_id: set hub_id to the Hugging Face dataset id (org/name), "
        "or read a local copy (source: local, local_path)"
        for name, dataset in datasets.items()
        if dataset.get("source") == "hub" and not dataset.get("hub_id") and not dataset.get("local_path")
    ]


def parquet_problems(datasets: dict, workdir: str | os.PathLike = ".") -> list[str]:
    """A local_path named .parquet that is not parquet (a renamed text file): pyarrow's error in the data job
    would name neither the key nor the file's real kind."""
    problems = []
    for name, dataset in datasets.items():
        local_path = dataset.get("local_path") or ""
        path = Path(workdir, local_path)
        if not local_path.endswith(".parquet") or not path.is_file():
            continue  # a missing file is dataset_path_problems'
        with open(path, "rb") as handle:
            head = handle.read(4)
            handle.seek(max(path.stat().st_size - 4, 0))
            tail = handle.read(4)
        if head != PARQUET_MAGIC or tail != PARQUET_MAGIC:
            problems.append(
                f"datasets.{name}.local_path {local_path!r} is not a parquet file (it does not start and end with "
                f"PAR1; it starts with {head!r}): give the real .parquet file, or a .jsonl file of rows"
            )
    return problems


def setting_problems(config: dict, workdir: str | os.PathLike = ".") -> list[str]:
    return (
        flash_attention_problems(config)
        + fused_kernel_problems(config)
        + seed_problems(config)
        + hub_dataset_problems(config["datasets"])
        + parquet_problems(config["datasets"], workdir)
    )


def perf_nothing_to_measure(config: dict, cells: int, refused: int) -> str | None:
    """Why `snakemake perf_all` has no cell to measure, or None: the summary's library would fail on no records."""
    if cells:
        return None
    if refused:
        return (
            f"perf_all has nothing to measure: each of its {refused} perf cell(s) is refused (why is printed above). "
            "Change perf.methods or perf.retentions as each refusal says."
        )
    perf = config.get("perf") or {}
    empty = "perf.context_lengths is empty" if not perf.get("context_lengths") else "no model or method is left"
    return (
        f"perf_all has nothing to measure: {empty}. Add a perf: section with context_lengths (e.g. [4096]), "
        "as config/demo.yaml does."
    )


def _short(value, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + " ..."


def validation_error_message(error) -> str:
    """A jsonschema ValidationError in a few lines: the key path, its value and the rule it breaks. Snakemake
    prints the whole schema and the whole config (1,900 lines for a misspelt top-level key)."""
    from jsonschema.exceptions import best_match

    if error.context:  # anyOf/oneOf: the branch that came closest says what is wrong
        error = best_match(error.context)
    path = ".".join(str(part) for part in error.absolute_path)
    where = f"config key {path}" if path else "the config's top level"
    value = f" (value {_short(error.instance)})" if path else ""
    rule = error.schema.get("description") if isinstance(error.schema, dict) else None
    lines = [
        f"the config does not fit schemas/config.schema.yaml: {where}{value}: {error.message}",
        f"  rule broken: {error.validator}: {_short(error.validator_value)}",
    ]
    if rule and path:
        lines.append(f"  {path.rsplit('.', 1)[-1]}: {rule}")
    return "\n".join(lines)


LOCAL_EXECUTORS = {"local", "dryrun", "touch"}
CUDA_DEVICE = re.compile(r"^cuda(?::(\d+))?$")


def _profile_executor(profile: str) -> str | None:
    """The executor a profile's config.yaml sets ("local" when it sets none), None when it cannot be read."""
    for folder in (Path(profile), Path.home() / ".config/snakemake" / profile):
        if (folder / "config.yaml").is_file():
            settings = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8")) or {}
            return str(settings.get("executor", "local"))
    return None


def jobs_run_here(argv: list[str], environ) -> bool:
    """Whether this run's jobs run on the machine that parses the workflow: no executor other than the local one,
    on the command line or in a profile (profiles/slurm sets executor: slurm). Unsure counts as no."""
    executors, profiles = [], [environ.get("SNAKEMAKE_PROFILE")]
    for flag, value in zip(argv, [*argv[1:], ""]):
        for name, found in (("--executor", executors), ("-e", executors), ("--profile", profiles)):
            if flag == name:
                found.append(value)
            elif flag.startswith(f"{name}="):
                found.append(flag.split("=", 1)[1])
    executors += [_profile_executor(profile) for profile in profiles if profile]
    return all(executor in LOCAL_EXECUTORS for executor in executors)


def visible_gpu_count(environ, detected) -> int:
    """GPUs a job started here may use: CUDA_VISIBLE_DEVICES when set, else ``detected()`` (NVML, nvidia-smi)."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([device for device in visible.split(",") if device.strip() and device.strip() != "-1"])
    return detected()


def missing_gpu_problem(config: dict, gpu_count) -> str | None:
    """generation.device names a GPU this machine (where the jobs run) does not have: torch would refuse it in
    every job, once the model is on its way. ``gpu_count()`` is asked only for a cuda device."""
    device = str((config.get("generation") or {}).get("device", "auto"))
    match = CUDA_DEVICE.match(device)
    if not match or int(match.group(1) or 0) < (gpus := gpu_count()):
        return None
    return (
        f"generation.device is {device!r}, but this machine, where this run's jobs run, has {gpus} GPU(s) "
        "(CUDA_VISIBLE_DEVICES, NVML, nvidia-smi): set generation.device: cpu (or auto), or run on a GPU machine"
    )

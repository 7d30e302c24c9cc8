"""The inputs a number depends on that the workflow does not make: local data files and model folders, hub copies.

A local file enters the DAG as a Snakemake input of the job that reads it, so editing it in place reruns
exactly the jobs (and cells) made from it; its path alone in a param would not. A hub copy has no file in
the DAG: the commit it resolved to is recorded in the manifest of what was made from it (``hub_revision``).
A config may pin one (``revision:`` of a dataset or model): the pin is a param of the jobs that read it, so a
new pin reruns exactly them.
"""

from __future__ import annotations

import os
from pathlib import Path


def local_dataset_files(dataset: dict, task: str) -> list[str]:
    """The files of a local copy the data job reads for ``task`` (nothing for hub, synthetic or generated data)."""
    if not dataset.get("local_path"):
        return []
    from kvcache_bench.data.longbench import DatasetUnavailableError, local_source_files

    try:
        return local_source_files(task, dataset["local_path"], dataset.get("data_dir"))
    except DatasetUnavailableError:
        return []  # the data job says what is missing, naming the path (config_checks refuses it first)


def local_model_files(model: dict) -> list[str]:
    """Every file of a local model folder (config, weights, tokenizer, code): from_pretrained reads them from
    the folder's top level. Empty for a hub id, and for a model the workflow makes (its rule's output is the input)."""
    if model.get("build") or model.get("from_package"):
        return []
    folder = Path(model["path"])
    if not folder.is_dir():
        return []
    return sorted(str(path) for path in folder.iterdir() if path.is_file() and not path.name.startswith("."))


def hub_cache_dir() -> Path:
    """Where huggingface_hub keeps downloads (its own rule, without importing it)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(os.path.expanduser(home)) / "hub"


def hub_revision(repo_id: str, repo_type: str = "model", ref: str = "main") -> str | None:
    """The commit sha the local Hugging Face cache resolves ``repo_id`` to (what from_pretrained and
    load_dataset read offline and after a download); None when the repository is not cached or not a hub id."""
    if not repo_id or Path(repo_id).exists() or repo_id.count("/") != 1:
        return None
    ref_file = hub_cache_dir() / f"{repo_type}s--{repo_id.replace('/', '--')}" / "refs" / ref
    try:
        return ref_file.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def resolved_revision(repo_id: str, repo_type: str = "model", pinned: str | None = None) -> str | None:
    """The commit a job read: a pinned full sha as given, a pinned tag or branch (or ``main``) as the local
    cache resolves it."""
    if pinned and len(pinned) == 40 and all(c in "0123456789abcdef" for c in pinned.lower()):
        return pinned
    return hub_revision(repo_id, repo_type, ref=pinned or "main")

"""The inputs a number depends on that the workflow does not make: local data files and model folders, hub copies.

A local file enters the DAG as an ``ancient`` input of the job that reads it (it must exist; its mtime is not
asked) and by its content as a param (``content_of``): a file whose bytes changed reruns exactly the jobs (and
cells) made from it, whatever its mtime (``cp -p``, ``tar x`` and ``rsync -a`` leave an older one), and a
replacement with the same bytes reruns nothing. The hashes are kept in the workflow directory and reused while
a file's size, mtime and inode are unchanged, so an 8B model's weights are read once, not at every parse.
A hub copy has no file in the DAG: the commit it resolved to is recorded in the manifest of what was made from
it (``hub_revision``). A config may pin one (``revision:`` of a dataset or model): the pin is a param of the
jobs that read it, so a new pin reruns exactly them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

HASH_CACHE = Path(".snakemake/kvcache-bench/source-hashes.json")


class DatasetUnavailableError(RuntimeError):
    """A dataset that cannot be read from where the config points (the message says where to point it)."""


def local_data_files(local_path: str, task: str) -> tuple[str, list[str]]:
    """A local copy's files for a LongBench-schema task, with the ``datasets`` builder that reads them."""
    path = Path(local_path)
    if path.is_file():
        candidates = [path]
    elif path.is_dir():
        candidates = [p for p in (path / f"{task}.parquet", path / f"{task}.jsonl") if p.exists()]
        if not candidates:
            candidates = sorted((path / task).glob("*.parquet")) + sorted((path / task).glob("*.jsonl"))
    else:
        raise DatasetUnavailableError(f"local_path {local_path!r} does not exist")
    if not candidates:
        raise DatasetUnavailableError(
            f"no data for task {task!r} under {local_path!r}: expected {task}.parquet, {task}.jsonl or {task}/*.parquet"
        )
    suffixes = {p.suffix for p in candidates}
    if len(suffixes) != 1:
        raise DatasetUnavailableError(f"mixed file types for task {task!r}: {sorted(map(str, candidates))}")
    builder = {".parquet": "parquet", ".jsonl": "json", ".json": "json"}.get(suffixes.pop())
    if builder is None:
        raise DatasetUnavailableError(f"unsupported file type for {candidates[0]} (use .parquet or .jsonl)")
    return builder, [str(p) for p in candidates]


def local_ruler_files(local_path: str, data_dir: str | None) -> list[str]:
    """A local RULER copy's parquet files (kvpress's layout: one folder per length, ``data_dir``)."""
    root = Path(local_path)
    folder = root / data_dir if data_dir and (root / data_dir).is_dir() else root
    if folder.is_file():
        files = [folder]
    elif folder.is_dir():
        files = sorted(folder.glob("*.parquet"))
    else:
        raise DatasetUnavailableError(f"local_path {local_path!r} does not exist")
    if not files:
        raise DatasetUnavailableError(f"no parquet files for RULER data_dir {data_dir!r} under {local_path!r}")
    return [str(f) for f in files]


def local_source_files(task: str, local_path: str, data_dir: str | None = None) -> list[str]:
    """The files a local copy's task is read from: the data job's Snakemake inputs, so an edit in place
    reruns that task's data job and every cell made from it."""
    from kvcache_bench.study.prompts import RULER_TASKS

    if task in RULER_TASKS:
        return local_ruler_files(local_path, data_dir)
    return local_data_files(local_path, task)[1]


@functools.cache
def _hash_cache() -> dict:
    try:
        return json.loads(HASH_CACHE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes, read once while its size, mtime and inode stay as they were (the cache is
    written back by ``content_of``, once for all the files it hashed)."""
    stat = os.stat(path)
    key = os.path.realpath(path)
    identity = [stat.st_size, stat.st_mtime_ns, stat.st_ino]
    cached = _hash_cache().get(key)
    if cached and cached[:3] == identity:
        return cached[3]
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 24), b""):
            digest.update(block)
    _hash_cache()[key] = [*identity, digest.hexdigest()]
    return digest.hexdigest()


def content_of(paths: list[str]) -> dict[str, str]:
    """{file: sha256} of local source files: the param that reruns their jobs when (and only when) their bytes
    change, recorded in every manifest made from them (which weights, which data)."""
    before = dict(_hash_cache())
    content = {str(path): file_sha256(path) for path in sorted(paths)}
    if _hash_cache() != before:  # something was hashed now: kept for the next parse
        try:
            from kvcache_bench.files import write_json_atomic

            HASH_CACHE.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(HASH_CACHE, _hash_cache())
        except OSError:
            pass  # a read-only checkout hashes again next time; nothing is wrong with the result
    return content


def local_dataset_files(dataset: dict, task: str) -> list[str]:
    """The files of a local copy the data job reads for ``task`` (nothing for hub, synthetic or generated data)."""
    if not dataset.get("local_path"):
        return []
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


def local_tokenizer_files(path: str | None) -> list[str]:
    """The files of a local tokenizer folder the workflow does not make (none for a hub id or a results/ output)."""
    if not path or str(path).startswith("results/") or not os.path.isdir(path):
        return []
    return sorted(str(p) for p in Path(path).iterdir() if p.is_file() and not p.name.startswith("."))


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

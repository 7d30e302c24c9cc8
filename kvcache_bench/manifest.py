"""Provenance written beside every pipeline output: which code, config, packages and device made it."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path

from .io import write_json_atomic

TRACKED_PACKAGES = (
    "torch",
    "transformers",
    "kvpress",
    "datasets",
    "tokenizers",
    "snakemake",
    "pandas",
    "numpy",
    "matplotlib",
    "rouge",
    "fuzzywuzzy",
    "nvidia-ml-py",
)

# Never let a credential reach an output, even if a caller passes the environment or a config through.
SECRET_KEY_MARKERS = ("token", "secret", "password", "api_key")


def manifest_path_for(output: str | os.PathLike) -> Path:
    return Path(f"{output}.manifest.json")


def config_hash(params: dict) -> str:
    """Stable hash of the parameters that determined an output (key order does not matter)."""
    canonical = json.dumps(scrub_secrets(params), sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def scrub_secrets(obj):
    if isinstance(obj, dict):
        return {
            key: ("<redacted>" if any(m in str(key).lower() for m in SECRET_KEY_MARKERS) else scrub_secrets(value))
            for key, value in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        return [scrub_secrets(item) for item in obj]
    return obj


def git_commit(repo_dir: str | os.PathLike | None = None) -> str:
    """HEAD commit of the checkout, suffixed ``-dirty`` when tracked files differ from it.

    A copy without ``.git`` (a GPU machine's working tree) can name its commit in KVBENCH_GIT_COMMIT.
    """
    if os.environ.get("KVBENCH_GIT_COMMIT"):
        return os.environ["KVBENCH_GIT_COMMIT"]
    cwd = repo_dir or Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True, text=True
        ).stdout.strip()
        return commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in TRACKED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def device_description() -> dict[str, str]:
    """The accelerator this process computes on, without importing torch when it is not loaded yet."""
    description = {"host": platform.node(), "cpu": platform.processor() or platform.machine()}
    try:
        import sys

        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            index = torch.cuda.current_device()
            description["device"] = f"cuda:{index}"
            description["gpu_name"] = torch.cuda.get_device_name(index)
        else:
            description["device"] = "cpu"
    except Exception as error:  # a broken CUDA setup must not lose the result it describes
        description["device"] = f"unknown ({error})"
    return description


def build_manifest(outputs: list[str], params: dict, seed: int | None, extra: dict | None = None) -> dict:
    manifest = {
        "outputs": [str(path) for path in outputs],
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "config_hash": config_hash(params),
        "params": scrub_secrets(params),
        "seed": seed,
        "packages": package_versions(),
        "device": device_description(),
    }
    if extra:
        manifest.update(scrub_secrets(extra))
    return manifest


def write_manifest(output: str | os.PathLike, params: dict, seed: int | None = None, extra: dict | None = None) -> Path:
    path = manifest_path_for(output)
    write_json_atomic(path, build_manifest([str(output)], params, seed, extra))
    return path

"""Provenance written beside every pipeline output: which code, config, packages and device made it."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path

from kvcache_bench.files import count_records, sha256_of, write_json_atomic

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
# Judged by name (a key that names a credential; not every key containing "token": max_new_tokens is a
# setting) and by value (the shapes of common tokens, and the value of any secret-named variable set in
# the environment, wherever it appears).
SECRET_KEY_PATTERN = re.compile(
    r"^(?:[a-z0-9]+_)*(?:token|secret|password|passwd|passphrase|api_?key|credentials?|private_key)$"
    r"|secret|password|api_?key|credential",
    re.IGNORECASE,
)
NOT_SECRET_KEYS = frozenset(
    {"pad_token", "bos_token", "eos_token", "unk_token", "sep_token", "cls_token", "mask_token"}
)
SECRET_VALUE_PATTERN = re.compile(
    r"\bhf_[A-Za-z0-9]{20,}"  # Hugging Face
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"  # GitHub
    r"|\bsk-[A-Za-z0-9_-]{20,}"  # OpenAI-style API keys
    r"|\bxox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
    r"|\bAKIA[0-9A-Z]{16}\b"  # AWS access key ids
)
REDACTED = "<redacted>"


def manifest_path_for(output: str | os.PathLike) -> Path:
    return Path(f"{output}.manifest.json")


def config_hash(params: dict) -> str:
    """Stable hash of every parameter that determined an output (key order does not matter).

    Secrets are redacted before hashing: they decide whether a download is allowed, never what it holds.
    """
    canonical = json.dumps(scrub_secrets(params), sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def is_secret_key(key) -> bool:
    name = str(key).lower()
    return name not in NOT_SECRET_KEYS and bool(SECRET_KEY_PATTERN.search(name))


def secret_values_in_environment() -> list[str]:
    """Values of the environment's secret-named variables (HF_TOKEN, ...), longest first."""
    values = {value for name, value in os.environ.items() if is_secret_key(name) and len(value) >= 8}
    return sorted(values, key=len, reverse=True)


def scrub_secrets(obj, _environment_secrets: list[str] | None = None):
    environment_secrets = secret_values_in_environment() if _environment_secrets is None else _environment_secrets
    if isinstance(obj, dict):
        return {
            key: (REDACTED if is_secret_key(key) else scrub_secrets(value, environment_secrets))
            for key, value in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        return [scrub_secrets(item, environment_secrets) for item in obj]
    if isinstance(obj, str):
        for secret in environment_secrets:
            obj = obj.replace(secret, REDACTED)
        return SECRET_VALUE_PATTERN.sub(REDACTED, obj)
    return obj


def git_commit(repo_dir: str | os.PathLike | None = None) -> str:
    """HEAD commit of the checkout, suffixed ``-dirty`` when tracked files differ from it.

    A copy without ``.git`` (a GPU machine's working tree) can name its commit in KVCACHE_BENCH_GIT_COMMIT.
    """
    if os.environ.get("KVCACHE_BENCH_GIT_COMMIT"):
        return os.environ["KVCACHE_BENCH_GIT_COMMIT"]
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


@functools.cache
def cpu_model() -> str:
    """The host processor's model name. One-at-a-time decoding (kvpress's pipeline, decode batch 1) launches each
    step's kernels from Python, so its examples/s follow the host: two leases of the same GPU differed by 40% there.
    Read once per process: a model worker writes a manifest per cell, and /proc/cpuinfo is slow to make on a host
    of many cores."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_description() -> dict[str, str | int]:
    """The accelerator this process computes on and the host that drives it, without importing torch when it is
    not loaded yet."""
    description: dict[str, str | int] = {
        "host": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_model": cpu_model(),
        # the cores this process may run on (a SLURM or taskset allotment), not the machine's
        "cpu_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0,
    }
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
        "workdir": os.getcwd(),  # which run made it: another directory's run may share results/ (study.shared_results)
        "params": scrub_secrets(params),
        "seed": seed,
        "packages": package_versions(),
        "device": device_description(),
    }
    if extra:
        manifest.update(scrub_secrets(extra))
    return manifest


def write_manifest(output: str | os.PathLike, params: dict, seed: int | None = None, extra: dict | None = None) -> Path:
    """The manifest beside ``output``, with the file's checksum (and, for JSONL, its record count)."""
    path = manifest_path_for(output)
    manifest = build_manifest([str(output)], params, seed, extra)
    if Path(output).is_file():
        manifest["content"] = content_facts(output)
    write_json_atomic(path, manifest)
    return path


class ManifestMismatchError(RuntimeError):
    """An input is not the file its manifest describes: it was edited, cut or replaced after it was written."""


def content_facts(path: str | os.PathLike) -> dict:
    facts = {"sha256": sha256_of(path)}
    if str(path).endswith(".jsonl"):
        facts["records"] = count_records(path)
    return facts


def forcerun_remedy(paths: list[str | os.PathLike]) -> str:
    """The command that remakes ``paths`` and every file made from them. Not ``rm``: Snakemake 9 does not remake a
    deleted file while the files made from it still exist ("Nothing to be done"), so a deletion left the tables
    as they were."""
    listed = " ".join(str(path) for path in paths)
    them = "it" if len(paths) == 1 else "them"
    return (
        f"Remake {them} and every file made from {them}: run your snakemake command again with "
        f"`--forcerun {listed}` at its end (after your targets and --configfile)."
    )


def verify_against_manifest(path: str | os.PathLike) -> dict:
    """Refuse a file that is not byte for byte what its producing job wrote; return its manifest."""
    manifest_path = manifest_path_for(path)
    remedy = forcerun_remedy([path])
    if not manifest_path.exists():
        raise ManifestMismatchError(
            f"{path} has no manifest ({manifest_path}), so nothing proves how it was made. {remedy}"
        )
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    expected = manifest.get("content")
    if not expected:
        raise ManifestMismatchError(f"{path}: its manifest records no checksum (written by an older version). {remedy}")
    found = content_facts(path)
    if found != expected:

        def describe(facts):
            records = f"{facts['records']} records, " if "records" in facts else ""
            return f"{records}sha256 {facts['sha256'][:12]}"

        raise ManifestMismatchError(
            f"{path} is not the file its manifest describes: the manifest says {describe(expected)}, "
            f"the file has {describe(found)}. It was changed after it was written (edited, cut or copied over); "
            f"refusing to use it. {remedy}"
        )
    return manifest


def _flat(value, prefix: str = "") -> dict:
    if isinstance(value, dict):
        flat = {}
        for key, item in value.items():
            flat.update(_flat(item, f"{prefix}{key}."))
        return flat
    return {prefix.rstrip("."): value}


def settings_differences(made_with: dict, expected: dict) -> list[str]:
    """'key: <there> there, <here> here' for every setting of ``expected`` that ``made_with`` disagrees on."""

    def shown(value) -> str:
        return f"{len(value)} items" if isinstance(value, list) and len(value) > 3 else json.dumps(value, default=str)

    there, here = _flat(scrub_secrets(made_with)), _flat(scrub_secrets(expected))
    return [
        f"{key}: {shown(there.get(key))} there, {shown(value)} here"
        for key, value in here.items()
        if json.dumps(there.get(key), sort_keys=True, default=str) != json.dumps(value, sort_keys=True, default=str)
    ]


def require_made_with(path: str | os.PathLike, manifest: dict, expected: dict) -> None:
    """Refuse an input its manifest says was made for other settings than the job reading it expects."""
    differences = settings_differences(manifest.get("params") or {}, expected)
    if differences:
        raise ManifestMismatchError(
            f"{path} was made under other settings than this job reads it for ({'; '.join(differences)}): "
            f"another study's file, or one copied over this one. {forcerun_remedy([path])}"
        )

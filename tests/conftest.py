"""Shared fixtures. Workflow-level tests run the demo once per session, in a copy of the checkout."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def snakemake_command(*args) -> list[str]:
    return [sys.executable, "-m", "snakemake", *args]


def copy_checkout(destination: Path) -> Path:
    """The files git would commit (tracked + untracked, not ignored): no results/, logs/ or .snakemake/."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, check=True,
    ).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


def run_snakemake(workdir: Path, *args, check=True, timeout=1200) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(workdir)}
    result = subprocess.run(snakemake_command(*args), cwd=workdir, capture_output=True, text=True, env=env,
                            timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result


@pytest.fixture(scope="session")
def demo_workdir(tmp_path_factory) -> Path:
    """A copy of the checkout in which the demo has run to completion (once per test session).

    KVCACHE_BENCH_DEMO_WORKDIR may name such a finished copy to reuse while developing; tests must
    not modify it (they copy it first).
    """
    reuse = os.environ.get("KVCACHE_BENCH_DEMO_WORKDIR")
    if reuse:
        return Path(reuse)
    workdir = copy_checkout(tmp_path_factory.mktemp("demo"))
    run_snakemake(workdir, "--cores", str(min(2, os.cpu_count() or 1)), "--configfile", "config/demo.yaml",
                  timeout=2400)
    return workdir

"""The README's set-up command prepares what the tests need, or says why a test will skip."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from conftest import REPO, copy_workflow


def test_without_root_system_packages_are_skipped_with_a_reason_not_an_error(tmp_path):
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "id").write_text("#!/bin/sh\necho 1000\n")  # a user who is not root
    (stubs / "id").chmod(0o755)
    path = f"{stubs}:/usr/bin:/bin"
    result = subprocess.run(["bash", str(REPO / "tools/system_packages.sh")], capture_output=True, text=True,
                            env={**os.environ, "PATH": path}, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(": ", 1) for line in result.stdout.splitlines())
    assert set(lines) == {"chromium", "slurm"}
    for name, status in lines.items():
        assert status == "ready" or re.fullmatch(r"skipped \(.+\)", status), (name, status)
    if not (shutil.which("chromium", path=path) or shutil.which("chromium-browser", path=path)):
        assert "root" in lines["chromium"]


def test_ci_and_the_readme_share_one_set_up_script():
    assert "bash tools/system_packages.sh" in (REPO / "tools/bootstrap.sh").read_text()
    assert "bash tools/bootstrap.sh" in (REPO / ".ci/run").read_text()
    assert "bash tools/bootstrap.sh" in (REPO / "README.md").read_text()


def test_every_environment_variable_of_the_project_has_one_prefix():
    """Two prefixes (the old KV-BENCH one beside KVCACHE_BENCH_) leave a user guessing which one a setting takes."""
    names = set()
    for folder in ("kvcache_bench", "scripts", "tools", "tests", ".ci", "profiles", "rules", "docs"):
        for path in REPO.joinpath(folder).rglob("*"):
            if path.is_file() and path.suffix in {".py", ".sh", ".smk", ".yaml", ".md", ""}:
                names |= set(re.findall(r"\b(KV[A-Z_]*BENCH_[A-Z_]+)\b", path.read_text(errors="ignore")))
    names |= set(re.findall(r"\b(KV[A-Z_]*BENCH_[A-Z_]+)\b", (REPO / "README.md").read_text()))
    assert names and all(name.startswith("KVCACHE_BENCH_") for name in names), sorted(names)


def test_a_workflow_copy_leaves_out_the_committed_runs_so_the_suite_fits_a_ci_disk(tmp_path):
    """The suite makes well over a hundred workflow copies; with reference/'s GPU runs in each (209 MB a copy) they
    filled CI's disk and the stop failed. A copy keeps what rules read: reference_runs=True adds the runs' tables
    and probes."""
    copy = copy_workflow(tmp_path / "workflow")
    size = sum(path.stat().st_size for path in copy.rglob("*") if path.is_file())
    assert size < 30e6, f"a workflow copy is {size / 1e6:.0f} MB: tests/conftest.py copy_workflow copies something big"
    assert (copy / "Snakefile").is_file() and not (copy / "reference").exists()
    with_runs = copy_workflow(tmp_path / "with_runs", reference_runs=True)
    assert sorted(path.relative_to(with_runs) for path in with_runs.glob("reference/*/tables/summary.csv")) == sorted(
        path.relative_to(REPO) for path in REPO.glob("reference/*/tables/summary.csv"))
    assert not list(with_runs.glob("reference/*/predictions"))

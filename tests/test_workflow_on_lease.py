"""tools/gpu/workflow_on_lease.sh, rehearsed on CPU: one device call of a workflow run, whose outputs come back as one
archive whether the run finished or its time ran out, and which the next call carries on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile

from tests.conftest import copy_workflow

TARGET = "results/data/synthetic/synthetic_qa.jsonl"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def lease_call(workflow, out, name: str, budget_s: int, **env) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KVCACHE_BENCH_GIT_COMMIT")}
    environment.update(NO_WHEELS="1", OUT=str(out), NAME=name, BUDGET_S=str(budget_s), SNAKEMAKE_RESOURCES="",
                       PATH=os.path.dirname(sys.executable) + os.pathsep + environment["PATH"], **env)
    return subprocess.run(["bash", "tools/gpu/workflow_on_lease.sh", TARGET, "--configfile", "config/demo.yaml"],
                          cwd=workflow, env=environment, capture_output=True, text=True, timeout=600)


def test_a_cut_off_call_still_brings_its_log_back_and_the_next_call_finishes_the_run(tmp_path):
    workflow, out = copy_workflow(tmp_path / "workflow"), tmp_path / "out"

    refused = lease_call(workflow, out, "no-commit", 60)
    assert refused.returncode != 0 and "KVCACHE_BENCH_GIT_COMMIT" in refused.stderr  # a manifest would name no commit

    cut_off = lease_call(workflow, out, "first", 1, KVCACHE_BENCH_GIT_COMMIT=COMMIT)
    assert cut_off.returncode == 124, cut_off.stdout[-2000:] + cut_off.stderr[-2000:]
    assert "cut off by BUDGET_S=1" in cut_off.stdout
    with tarfile.open(out / "first.tar.gz") as archive:
        assert "first.snakemake.log" in archive.getnames()

    finished = lease_call(workflow, out, "second", 300, KVCACHE_BENCH_GIT_COMMIT=COMMIT)
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    with tarfile.open(out / "second.tar.gz") as archive:
        names = archive.getnames()
        assert TARGET in names and "logs/make_synthetic_dataset/synthetic/synthetic_qa.log" in names
        manifest = json.load(archive.extractfile(TARGET + ".manifest.json"))
    assert json.dumps(manifest).count(COMMIT) >= 1  # the manifest names the commit the device's copy came from
    assert sorted(p.name for p in out.iterdir()) == ["first.tar.gz", "second.tar.gz"]  # one file per call, nothing else

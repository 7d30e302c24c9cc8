"""Warm start: a generate job run by a warm process writes what a fresh process writes, and fails as loudly."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid

import pytest
from conftest import REPO

from kvcache_bench.data.synthetic import make_synthetic_rows
from kvcache_bench.generation.warm_start import socket_path
from kvcache_bench.io import read_jsonl, write_jsonl_atomic
from kvcache_bench.manifest import write_manifest

MODEL = {"path": str(REPO / "resources/canary"), "dtype": "float32", "attn_implementation": "sdpa",
         "trust_remote_code": False, "max_context_tokens": 4096, "device": "cpu"}


def _params(method, retention, warm, key, **extra):
    return {"code": key, "task": "synthetic_qa", "model_settings": MODEL, "method": method, "retention": retention,
            "batch_size": 1, "decode_batch_size": 1, "question_mode": "question_aware", "max_new_tokens": 8,
            "method_kwargs": extra.pop("method_kwargs", {}), "seed": 3, "warm_start": warm, **extra}


def _generate(tmp_path, name, params):
    out = tmp_path / f"{name}.jsonl"
    result = subprocess.run(
        [sys.executable, "scripts/generate.py", "--input", f"rows={tmp_path / 'rows.jsonl'}",
         "--output", f"predictions={out}", "--params", json.dumps(params), "--log", str(tmp_path / f"{name}.log")],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO), "TQDM_DISABLE": "1"},
    )
    return result, out


def _without_timings(path):
    return [{k: v for k, v in record.items() if "second" not in k} for record in read_jsonl(path)]


@pytest.fixture
def warm_key(tmp_path, monkeypatch):
    key = f"test-{uuid.uuid4().hex}"
    # the jobs run with this PYTHONPATH (_generate), and the server's socket is keyed on the environment
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    write_jsonl_atomic(tmp_path / "rows.jsonl", make_synthetic_rows(2, seed=5, min_words=40, max_words=60))
    write_manifest(tmp_path / "rows.jsonl", {"rows": "2 synthetic rows"})  # generate refuses data its manifest does not describe
    yield key
    log = socket_path(key).with_suffix(".log")
    for pid in re.findall(r"warm-start server (\d+) listening", log.read_text() if log.exists() else ""):
        os.kill(int(pid), signal.SIGTERM)


def test_a_warm_job_writes_what_a_fresh_process_writes_and_reuses_the_server(tmp_path, warm_key):
    for method, retention in (("snapkv", 0.5), ("random", 0.25)):
        fresh, fresh_out = _generate(tmp_path, f"fresh-{method}", _params(method, retention, False, warm_key))
        warm, warm_out = _generate(tmp_path, f"warm-{method}", _params(method, retention, True, warm_key))
        assert fresh.returncode == 0 and warm.returncode == 0, fresh.stderr[-2000:] + warm.stderr[-2000:]
        assert _without_timings(warm_out) == _without_timings(fresh_out)
        manifest = json.loads(warm_out.with_name(warm_out.name + ".manifest.json").read_text())
        assert manifest["params"]["method"] == method and manifest["records"] == len(read_jsonl(tmp_path / "rows.jsonl"))
        assert f"method={method}" in (tmp_path / f"warm-{method}.log").read_text()  # the job's log, not the server's
    server_log = socket_path(warm_key).with_suffix(".log").read_text()
    assert len(re.findall("listening", server_log)) == 1  # the second warm job found the first one's server


def test_a_warm_job_that_fails_fails_its_job_with_the_reason(tmp_path, warm_key):
    result, out = _generate(tmp_path, "broken", _params("snapkv", 0.5, True, warm_key, method_kwargs={"no_such_option": 1}))
    assert result.returncode != 0
    assert "the job failed in its warm process" in result.stderr and "no_such_option" in result.stderr
    assert not out.exists()


def test_warm_start_is_for_local_cpu_jobs_only(monkeypatch):
    from kvcache_bench.generation.warm_start import applies_to
    from kvcache_bench.workflow import ScriptJob

    def job(device, warm=True):
        return ScriptJob({}, {}, {"warm_start": warm, "model_settings": {**MODEL, "device": device}}, [])

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert applies_to(job("cpu")) and not applies_to(job("cpu", warm=False))
    assert not applies_to(job("cuda")) and not applies_to(job("auto"))
    monkeypatch.setenv("SLURM_JOB_ID", "42")  # a server started in one job's allocation dies with that job
    assert not applies_to(job("cpu"))

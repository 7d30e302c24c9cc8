"""Every GPU job enters through one place (runtime.gpu_job): its own GPU, threads, log, verified data, model."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO

from kvcache_bench.manifest import write_manifest


def gpu_rules() -> dict[str, str]:
    """{rule: its body} for every rule whose ``resources:`` declare a GPU, read from rules/*.smk."""
    rules = {}
    for smk in sorted((REPO / "rules").glob("*.smk")):
        for name, body in re.findall(r"^rule (\w+):\n((?:[ \t]+.*\n|\n)*)", smk.read_text(), flags=re.M):
            if re.search(r"^\s+resources:\n(?:\s{8,}.*\n)*?\s{8,}gpu\s*=", body, flags=re.M):
                rules[name] = body
    return rules


def test_the_gpu_rules_are_found_from_their_resources():
    assert {"generate", "perf", "probe_attention_sink", "probe_padding", "train_canary"} <= set(gpu_rules())


@pytest.mark.parametrize("rule", sorted(gpu_rules()))
def test_every_gpu_rule_runs_its_script_through_the_gpu_job_entry_and_is_benchmarked(rule):
    body = gpu_rules()[rule]
    assert re.search(r"^    benchmark:\n", body, flags=re.M), f"{rule} has no benchmark:"
    script = re.search(r'^    script:\n\s+"\.\./scripts/([\w.]+)"', body, flags=re.M).group(1)
    tree = ast.parse((REPO / "scripts" / script).read_text())
    entered = [
        item.context_expr.func.id
        for node in ast.walk(tree) if isinstance(node, ast.With)
        for item in node.items if isinstance(item.context_expr, ast.Call) and isinstance(item.context_expr.func, ast.Name)
    ]
    assert entered == ["gpu_job"], f"scripts/{script} does not run its work inside `with gpu_job(job...)`"


def _enter(tmp_path, rows_text: str, extra_env: dict):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"_id": "a"}\n')
    write_manifest(rows, {"rows": "one row"})
    rows.write_text(rows_text)
    code = textwrap.dedent(
        f"""
        import os, sys
        from kvcache_bench.runtime.gpu_job import gpu_job
        from kvcache_bench.workflow import ScriptJob
        job = ScriptJob({{"rows": {str(rows)!r}}}, {{}}, {{"model_settings": {{"device": "auto"}}}}, [{str(tmp_path / "job.log")!r}])
        job.resources = {{"gpu": 1}}
        with gpu_job(job, load=False) as entered:
            print(os.environ["CUDA_VISIBLE_DEVICES"], entered.pin.source, "torch" in sys.modules)
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID")}
    env.update(PYTHONPATH=str(REPO), KVCACHE_BENCH_GPU_COUNT="2", KVCACHE_BENCH_GPU_LOCK_DIR=str(tmp_path / "locks"), **extra_env)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_a_gpu_job_claims_its_own_gpu_before_anything_else(tmp_path):
    result = _enter(tmp_path, '{"_id": "a"}\n', {})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0", "lock", "False"]  # a light job (load=False) never imports torch
    assert "GPU: CUDA_VISIBLE_DEVICES=0 (lock" in (tmp_path / "job.log").read_text()


def test_a_gpu_job_refuses_data_its_manifest_does_not_describe_and_says_so_in_its_log(tmp_path):
    result = _enter(tmp_path, '{"_id": "b"}\n', {})
    assert result.returncode != 0
    log = (tmp_path / "job.log").read_text()
    assert "is not the file its manifest describes" in log and "job failed" in log
    assert json.loads((tmp_path / "rows.jsonl.manifest.json").read_text())["content"]

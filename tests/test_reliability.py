"""Failures a user must be able to read: offline hub access, interrupted jobs, inconsistent environments."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import yaml
from conftest import REPO, run_snakemake

from kvcache_bench.files import atomic_path, read_jsonl, write_jsonl_atomic
from kvcache_bench.manifest import write_manifest
from kvcache_bench.methods.registry import compression_ratio_for, retentions_for

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def test_retention_is_converted_to_kvpress_compression_ratio_in_one_place():
    assert compression_ratio_for(0.1) == pytest.approx(0.9)
    assert compression_ratio_for(0.5) == pytest.approx(0.5)
    assert compression_ratio_for(1.0) == 0.0
    with pytest.raises(ValueError):
        compression_ratio_for(0.0)
    from kvcache_bench.methods.registry import build_press

    assert build_press("snapkv", 0.25).compression_ratio == pytest.approx(0.75)
    assert build_press("full_cache", 1.0) is None
    assert retentions_for("full_cache", [0.5, 0.1]) == [1.0]
    offenders = [
        str(path.relative_to(REPO))
        for path in [*REPO.joinpath("kvcache_bench").glob("*.py"), *REPO.joinpath("scripts").glob("*.py")]
        if re.search(r"1(\.0)?\s*-\s*[a-z_]*retention", path.read_text()) and path.name != "methods.py"
    ]
    assert offenders == []


def test_offline_download_says_how_to_use_a_local_copy(workflow_copy):
    result = run_snakemake(workflow_copy, "--cores", "1", "results/data/longbench/qasper.jsonl", env=OFFLINE)
    assert result.returncode != 0
    log = (workflow_copy / "logs/download_dataset/longbench/qasper.log").read_text()
    assert "local_path" in log and "HF_HUB_OFFLINE" in log and "HF_TOKEN" in log
    assert not (workflow_copy / "results/data/longbench/qasper.jsonl").exists()


def test_download_reads_a_local_parquet_copy_of_longbench(workflow_copy, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {"input": f"question {i}?", "context": f"paper text {i} " * 50, "answers": [f"answer {i}"], "length": 100,
         "dataset": "qasper", "language": "en", "all_classes": None, "_id": f"id{i}"}
        for i in range(5)
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "qasper.parquet")
    config = yaml.safe_load((workflow_copy / "config.yaml").read_text())
    config["datasets"]["longbench"].update(local_path=str(tmp_path), num_examples=3)
    (workflow_copy / "config/local.yaml").write_text(yaml.safe_dump(config))
    result = run_snakemake(workflow_copy, "results/data/longbench/qasper.jsonl", "--cores", "1", "--configfile", "config/local.yaml", env=OFFLINE)
    assert result.returncode == 0, result.stderr[-3000:]
    written = read_jsonl(workflow_copy / "results/data/longbench/qasper.jsonl")
    assert [r["_id"] for r in written] == ["id0", "id1", "id2"] and written[0]["answers"] == ["answer 0"]
    manifest = json.loads((workflow_copy / "results/data/longbench/qasper.jsonl.manifest.json").read_text())
    assert manifest["dataset"]["rows"] == 3 and len(manifest["dataset"]["sha256"]) == 64


def test_unloadable_model_names_the_variables_to_set():
    code = (
        "from kvcache_bench.engine.loading import load_model, ModelUnavailableError\n"
        "import torch\n"
        "try:\n"
        "    load_model('meta-llama/Llama-3.1-8B-Instruct', 'bfloat16', 'sdpa', torch.device('cpu'))\n"
        "except ModelUnavailableError as e:\n"
        "    print(e)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**os.environ, **OFFLINE}, capture_output=True, text=True, timeout=120)
    assert "HF_TOKEN" in result.stdout and "HF_HUB_OFFLINE" in result.stdout and "models.<name>.path" in result.stdout


def test_failed_write_leaves_neither_file_nor_temporary(tmp_path):
    target = tmp_path / "predictions.jsonl"

    def records():
        yield {"id": 1}
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_jsonl_atomic(target, records())
    assert list(tmp_path.iterdir()) == []
    with atomic_path(target) as tmp:
        tmp.write_text("complete\n")
    assert target.read_text() == "complete\n"


def test_killed_generate_job_leaves_no_predictions_file(demo_run, tmp_path):
    rows = read_jsonl(demo_run / "results/data/synthetic/synthetic_qa.jsonl")
    many = tmp_path / "rows.jsonl"
    total = write_jsonl_atomic(many, [{**r, "_id": f"{r['_id']}-{k}"} for k in range(40) for r in rows])
    write_manifest(many, {"rows": "40 copies of the demo's rows"})  # generate refuses data its manifest does not describe
    output = tmp_path / "out" / "predictions.jsonl"
    log = tmp_path / "generate.log"
    params = {
        "task": "synthetic_qa", "method": "snapkv", "retention": 0.5, "batch_size": 1, "decode_batch_size": 1,
        "question_mode": "question_aware",
        "max_new_tokens": 8, "seed": 0, "method_kwargs": {},
        "model_settings": {"path": str(REPO / "resources/canary"), "dtype": "float32", "attn_implementation": "sdpa",
                  "trust_remote_code": False, "max_context_tokens": 4096, "device": "cpu"},
    }
    process = subprocess.Popen(
        [sys.executable, "scripts/generate.py", "--input", f"rows={many}", "--output", f"predictions={output}",
         "--params", json.dumps(params), "--log", str(log)],
        cwd=REPO, start_new_session=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline and not re.search(rf"\b[1-9]\d*/{total}\b", log.read_text() if log.exists() else ""):
        time.sleep(0.2)
    assert process.poll() is None, "generation finished before it could be interrupted"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert not output.exists()


def _pip_pins(lines):
    pins = {}
    for line in lines:
        line = str(line).split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==")
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def test_conda_envs_are_pinned_and_agree_with_requirements():
    requirements = _pip_pins((REPO / "requirements.txt").read_text().splitlines())
    envs = sorted(REPO.joinpath("envs").glob("*.yaml"))
    assert envs
    for env_file in envs:
        spec = yaml.safe_load(env_file.read_text())
        pip_section = next(d["pip"] for d in spec["dependencies"] if isinstance(d, dict) and "pip" in d)
        assert all("==" in str(line) for line in pip_section), f"{env_file.name}: unpinned pip package"
        for name, version in _pip_pins(pip_section).items():
            assert requirements.get(name) == version, f"{env_file.name} pins {name}=={version}, requirements.txt {requirements.get(name)}"
    rules_text = "".join(p.read_text() for p in REPO.joinpath("rules").glob("*.smk"))
    for env_name in re.findall(r'conda:\s*\n\s*"\.\./envs/([\w-]+\.yaml)"', rules_text):
        assert (REPO / "envs" / env_name).exists()

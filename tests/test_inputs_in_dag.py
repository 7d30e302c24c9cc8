"""Inputs that used to give a wrong number and exit 0 (issue 23): a source outside the DAG, a checkpoint that
does not load whole, a typo in a per-task map, a duplicate YAML key, asked and measured retention apart, outputs
only their owner can read. Each case asserts what the user reads; parse-time cases are dry runs of a copy of the
workflow, the rest call the function the job calls.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import copy_workflow
from test_bad_inputs import GOOD_ROW, run_with, small_config


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return copy_workflow(tmp_path_factory.mktemp("inputs_in_dag") / "workflow")


def local_dataset(workdir: Path, name: str = "mine", task: str = "qasper") -> dict:
    folder = workdir / "data" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{task}.jsonl").write_text("".join(json.dumps({**GOOD_ROW, "_id": f"r{i}"}) + "\n" for i in range(3)))
    return {"source": "local", "local_path": f"data/{name}", "tasks": [task], "num_examples": 3}


def dry_run_jobs(output: str, rule: str) -> list[str]:
    """The ``input:`` line of every planned job of ``rule`` in a dry run's output."""
    lines = output.splitlines()
    return [lines[i + 1] for i, line in enumerate(lines[:-1]) if line == f"rule {rule}:"]


# ------------------------------------------------------------------------------------------ 1. sources in the DAG


def test_a_local_dataset_and_model_folder_are_inputs_of_the_jobs_that_read_them(workdir):
    """Snakemake reruns a job whose input is newer than its output: an edit in place of the data file reruns
    its data job (and so its cells), a replaced model.safetensors reruns the model's generate jobs."""
    config = small_config(workdir, datasets={"mine": local_dataset(workdir)})
    result, output = run_with(workdir, config, "-n")
    assert result.returncode == 0, output[-3000:]
    [data_job] = dry_run_jobs(output, "download_dataset")
    assert "data/mine/qasper.jsonl" in data_job
    generate_jobs = dry_run_jobs(output, "generate")
    assert len(generate_jobs) == 2
    for job in generate_jobs:
        assert "resources/canary/model.safetensors" in job and "resources/canary/config.json" in job


# ------------------------------------------------------------------------------------------ 2. a model loads whole


def _tiny_checkpoint(folder: Path) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder / "model.safetensors"


def _drop_o_proj(weights: Path):
    from safetensors.torch import load_file, save_file

    tensors = load_file(weights)
    save_file({k: v for k, v in tensors.items() if "o_proj" not in k}, weights, metadata={"format": "pt"})


def _rename_a_tensor(weights: Path):
    from safetensors.torch import load_file, save_file

    tensors = load_file(weights)
    tensors["model.layers.0.mlp.up_proj.weight_old"] = tensors.pop("model.layers.0.mlp.up_proj.weight")
    save_file(tensors, weights, metadata={"format": "pt"})


def _cut_in_half(weights: Path):
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])


def _config_not_json(weights: Path):
    (weights.parent / "config.json").write_text('{"model_type": "llama",')


# (case, damage, error class name, what the user reads, what they must not read)
CHECKPOINT_CASES = [
    ("o_proj tensors removed", _drop_o_proj, "IncompleteCheckpointError",
     ["did not load whole", "missing from the checkpoint, so newly initialized at random",
      "model.layers.0.self_attn.o_proj.weight, model.layers.1.self_attn.o_proj.weight"], []),
    ("a tensor renamed", _rename_a_tensor, "IncompleteCheckpointError",
     ["missing from the checkpoint, so newly initialized at random: model.layers.0.mlp.up_proj.weight",
      "in the checkpoint but not in the model (ignored): model.layers.0.mlp.up_proj.weight_old"], []),
    ("safetensors cut in half", _cut_in_half, "ModelUnavailableError",
     ["damaged file(s)", "model.safetensors: its tensors need", "cut short"], ["HF_TOKEN"]),
    ("config.json that is not JSON", _config_not_json, "ModelUnavailableError",
     ["damaged file(s)", "config.json: not valid JSON"], ["HF_TOKEN"]),
]


@pytest.mark.parametrize("case, damage, error, messages, absent", CHECKPOINT_CASES, ids=[c[0] for c in CHECKPOINT_CASES])
def test_a_checkpoint_that_does_not_load_whole_fails_naming_tensors_or_file(tmp_path, case, damage, error, messages, absent):
    from kvcache_bench.generation.loading import load_model, pick_device

    weights = _tiny_checkpoint(tmp_path / "model")
    load_model(str(weights.parent), "float32", "sdpa", pick_device("cpu"))  # whole: loads
    damage(weights)
    with pytest.raises(Exception) as raised:
        load_model(str(weights.parent), "float32", "sdpa", pick_device("cpu"))
    assert type(raised.value).__name__ == error
    for message in messages:
        assert message in str(raised.value)
    for message in absent:
        assert message not in str(raised.value)

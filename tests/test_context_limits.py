"""A model is not run past the positions it was trained on (issue 51, case 4).

Before: a model folder whose config.json says ``max_position_embeddings: 64`` ran 729-token prompts, its records saying
``truncated: false``; RoPE computes any position, so nothing failed, and the model that answered was another one.
Now ``max_context_tokens`` above the trained context is refused (at parse for a local folder, else by the job), and a
prompt that leaves its answer no room is cut in its middle as LongBench cuts, its record saying which limit cut it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from kvcache_bench.study.config_checks import study_config_problems

CANARY = REPO / "resources/canary"


def short_context_canary(destination: Path, positions: int = 64) -> Path:
    """The trained canary (4096 positions) with a config.json that says it was trained on ``positions``."""
    shutil.copytree(CANARY, destination)
    config = json.loads((destination / "config.json").read_text())
    (destination / "config.json").write_text(json.dumps({**config, "max_position_embeddings": positions}))
    return destination


def demo_config(model_path: str, max_context_tokens: int, **model) -> dict:
    config = yaml.safe_load((REPO / "config/demo.yaml").read_text())
    config["models"]["canary"].update(path=model_path, max_context_tokens=max_context_tokens, **model)
    return config


CONFIGS = [
    ("llama", {"model_type": "llama", "max_position_embeddings": 4096}, (4096, "max_position_embeddings")),
    # Gemma 3 as Gemma3ForConditionalGeneration saves it: the language model's length sits in text_config
    ("gemma3 multimodal", {"model_type": "gemma3", "text_config": {"model_type": "gemma3_text", "max_position_embeddings": 131072}},
     (131072, "text_config.max_position_embeddings")),
    ("gemma3_text (270M)", {"model_type": "gemma3_text", "max_position_embeddings": 32768}, (32768, "max_position_embeddings")),
    ("gpt2", {"model_type": "gpt2", "n_positions": 1024}, (1024, "n_positions")),
    # Qwen2.5's YaRN recipe declares 4 x 32768; Llama 3.1's llama3 scaling (8 x 8192) stays below its own 131072
    ("qwen2 + yarn", {"max_position_embeddings": 32768, "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}},
     (131072, "rope_scaling: original_max_position_embeddings 32768 x yarn factor 4.0")),
    ("llama 3.1", {"max_position_embeddings": 131072, "rope_parameters": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}},
     (131072, "max_position_embeddings")),
    ("no length named", {"model_type": "mamba"}, None),
]


@pytest.mark.parametrize("case, config, expected", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_a_models_trained_context_is_read_where_its_architecture_keeps_it(case, config, expected):
    from kvcache_bench.study.context_limits import ModelContext, model_context

    assert model_context(config) == (ModelContext(*expected) if expected else None)


def test_max_context_tokens_above_a_local_folders_trained_context_is_refused_at_parse_with_both_numbers(tmp_path):
    folder = short_context_canary(tmp_path / "short")
    [problem] = study_config_problems(demo_config(str(folder), 4096), REPO)
    assert problem == (
        f"models.canary.max_context_tokens is 4096, but {folder}/config.json gives the model 64 positions "
        "(max_position_embeddings): a prompt of 65 to 4096 tokens would be read at positions it was never trained on, "
        "as another model. Set models.canary.max_context_tokens to at most 64; a prompt is then cut further, to 56 "
        "tokens, where it must leave room for its answer (max_new_tokens for task synthetic_qa is 8)."
    )
    assert study_config_problems(demo_config(str(folder), 64), REPO) == []  # at the limit: the job cuts what must be
    # no room left for any prompt once the answer is counted
    config = demo_config(str(folder), 64)
    config["generation"]["max_new_tokens"] = {"synthetic_qa": 60}
    [problem] = study_config_problems(config, REPO)
    assert problem.startswith(f"{folder}/config.json gives the model 64 positions (max_position_embeddings), and "
                              "max_new_tokens for task synthetic_qa is 60: that leaves 4 for a prompt.")


def test_a_folder_the_workflow_makes_is_left_to_its_job(tmp_path):
    """A made model's folder may be absent at parse, or a stale copy its rule is about to remake: not read."""
    config = yaml.safe_load((REPO / "config/demo-random.yaml").read_text())
    name = next(iter(config["models"]))
    short_context_canary(tmp_path / "results/models" / name, positions=64)
    config["models"][name]["max_context_tokens"] = 4096
    assert not [p for p in study_config_problems(config, tmp_path) if "max_context_tokens" in p]


@pytest.fixture(scope="module")
def short_canary(tmp_path_factory) -> str:
    return str(short_context_canary(tmp_path_factory.mktemp("model") / "short-canary"))


@pytest.fixture(scope="module")
def long_rows():
    from kvcache_bench.data.longbench import normalise_rows
    from kvcache_bench.data.synthetic import make_synthetic_rows

    rows = make_synthetic_rows(2, seed=3, min_words=300, max_words=400, questions_per_document=1)
    return normalise_rows(rows, "synthetic_qa", None)


def run_cell_on(model_path: str, rows, max_context_tokens: int) -> list[dict]:
    from kvcache_bench.engine.cell_runner import run_cell
    from kvcache_bench.engine.loading import ModelSettings
    from kvcache_bench.study.cell import CellRun

    settings = ModelSettings(path=model_path, dtype="float32", device="cpu", max_context_tokens=max_context_tokens)
    run = CellRun(task="synthetic_qa", model_settings=settings, method="full_cache", retention=1.0,
                  question_mode="question_aware", max_new_tokens=8, seed=0)
    return list(run_cell(rows, run, progress=False))


def test_a_prompt_past_the_trained_context_is_cut_as_longbench_cuts_and_the_record_says_which_limit(short_canary, long_rows):
    records = run_cell_on(short_canary, long_rows, max_context_tokens=64)
    for record in records:
        assert record["original_prompt_tokens"] > 300  # the rows are long: before, all of it ran
        assert record["truncated"] and record["truncated_by"] == "model_context"
        assert record["prompt_tokens"] + 8 <= 64  # the prompt and its 8-token answer fit the 64 positions
        assert record["prompt_tokens"] >= 48  # cut to fit, not to a sliver
        assert (record["model_context_tokens"], record["model_context_source"]) == (64, "max_position_embeddings")
    # a tighter max_context_tokens cuts first, and is named
    tighter = run_cell_on(short_canary, long_rows, max_context_tokens=32)
    assert all(r["truncated_by"] == "max_context_tokens" and r["prompt_tokens"] <= 32 for r in tighter)


def test_the_job_refuses_max_context_tokens_above_the_loaded_models_context_naming_both(short_canary, long_rows):
    """What a made model (build, from_package) meets: its folder is not read at parse, so its job holds the check."""
    with pytest.raises(ValueError) as refused:
        run_cell_on(short_canary, long_rows, max_context_tokens=4096)
    assert str(refused.value).startswith(
        f"models.<name>.max_context_tokens is 4096, but the config of the model at {short_canary!r} gives the model 64 "
        "positions "
        "(max_position_embeddings)"
    )


def test_kvpress_pipeline_engine_refuses_a_prompt_it_would_run_past_the_trained_context(short_canary, long_rows):
    """kvpress's pipeline keeps the first max_context_tokens context tokens and puts the question and the answer after
    them; cut otherwise it would not be kvpress's pipeline, so what would not fit is refused before any example."""
    from kvcache_bench.engine.kvpress_pipeline import run_cell_on_kvpress_pipeline
    from kvcache_bench.engine.loading import ModelSettings
    from kvcache_bench.study.cell import CellRun

    settings = ModelSettings(path=short_canary, dtype="float32", device="cpu", max_context_tokens=56)
    run = CellRun(task="synthetic_qa", model_settings=settings, method="full_cache", retention=1.0,
                  question_mode="question_agnostic", max_new_tokens=8, seed=0)
    with pytest.raises(ValueError, match=r"kvpress's pipeline would read \d+ positions \(its first 56 context tokens, "
                                         r"then the question, the answer prefix and 8 answer tokens\), but the config of "
                                         r"the model at .* gives the model 64 \(max_position_embeddings\)"):
        list(run_cell_on_kvpress_pipeline(long_rows, run))

"""Random-init models of a named shape (``build: {shape: ..., seed: ...}``): Llama 3.1's architecture and
tokenizer, so a cost run's prompt lengths and stop tokens are Llama 3.1's, and a manifest that says random-init."""

import json

import pytest
import torch
from conftest import planned_jobs, run_snakemake, write_config
from llama_models.datatypes import RawMessage
from llama_models.llama3.chat_format import ChatFormat
from llama_models.llama3.tokenizer import Tokenizer as MetaTokenizer

from kvcache_bench.data.model_shapes import build_random_model
from kvcache_bench.data.shaped_model import SHAPES, ShapedModelError, build_shaped_model, shaped_config
from kvcache_bench.engine.loading import load_model, load_tokenizer, stop_token_ids
from kvcache_bench.study.prompt_tokens import build_prompt_tokens
from kvcache_bench.study.prompts import PROMPTS

QASPER_LIKE = (
    "Introduction\nLarge language models keep a key-value cache whose size grows with the context. We compare "
    "eviction methods (SnapKV, TOVA, StreamingLLM) at 50%, 25% and 10% retention on 4,096-token prompts; "
    "accuracy fell from 81.5% to 62.0% under the strongest compression (Table 2).\n"
) * 40


@pytest.fixture(scope="module")
def tiny_model_dir(llama3_tokenizer_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("shaped") / "tiny"
    facts = build_shaped_model("llama-3.1-tiny", 0, llama3_tokenizer_dir, out, "float32", "cpu")
    return out, facts


def test_the_8b_shape_has_llama_3_1_8b_s_parameter_count_and_vocabulary(llama3_tokenizer):
    settings = shaped_config("llama-3.1-8b", llama3_tokenizer)
    model = build_random_model(settings, torch.bfloat16, torch.device("meta"), seed=0)
    assert sum(p.numel() for p in model.parameters()) == 8_030_261_248  # meta-llama/Llama-3.1-8B's count
    assert model.config.vocab_size == len(llama3_tokenizer) == 128_256
    # meta-llama/Llama-3.1-8B's config.json, the shape the reference records claim
    assert (settings["hidden_size"], settings["num_hidden_layers"], settings["num_attention_heads"], settings["num_key_value_heads"],
            settings["intermediate_size"]) == (4096, 32, 32, 8, 14336)
    assert settings["rope_parameters"] == {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def test_a_built_model_stops_and_counts_tokens_as_llama_3_1(tiny_model_dir):
    out, facts = tiny_model_dir
    meta = MetaTokenizer.get_instance()
    tokenizer = load_tokenizer(str(out))
    model = load_model(str(out), "float32", "sdpa", torch.device("cpu"))
    assert stop_token_ids(model, tokenizer) == set(meta.stop_tokens)
    prompt = build_prompt_tokens(tokenizer, "qasper", QASPER_LIKE, "Which method kept the most accuracy?", 127_500)
    raw = PROMPTS["qasper"].format(context=QASPER_LIKE, input="Which method kept the most accuracy?")
    assert prompt.length == len(ChatFormat(meta).encode_dialog_prompt([RawMessage(role="user", content=raw)]).tokens)
    assert facts["random_init"] is True and facts["shape"] == "llama-3.1-tiny"
    assert model.config.num_hidden_layers == SHAPES["llama-3.1-tiny"]["num_hidden_layers"]


def test_the_same_seed_gives_the_same_weights_and_another_seed_others(llama3_tokenizer_dir, tiny_model_dir, tmp_path):
    _, facts = tiny_model_dir
    again = build_shaped_model("llama-3.1-tiny", 0, llama3_tokenizer_dir, tmp_path / "again", "float32", "cpu")
    other = build_shaped_model("llama-3.1-tiny", 1, llama3_tokenizer_dir, tmp_path / "other", "float32", "cpu")

    def weights(f):
        return next(entry["sha256"] for entry in f["files"] if entry["path"] == "model.safetensors")

    assert weights(again) == weights(facts) != weights(other)


def test_a_tokenizer_that_does_not_fit_the_shape_is_refused(smollm2_tokenizer):
    with pytest.raises(ShapedModelError, match="128256 embeddings but the tokenizer 49152 tokens"):
        shaped_config("llama-3.1-8b", smollm2_tokenizer)


@pytest.mark.slow
def test_a_config_naming_a_shape_makes_the_tokenizer_then_the_model_with_a_random_init_manifest(workflow_copy):
    config = write_config(
        workflow_copy, "config/demo-random.yaml", "shaped.yaml",
        models={"tiny-llama-3.1-random": {"path": "results/models/tiny-llama-3.1-random", "build": {"shape": "llama-3.1-tiny", "seed": 3},
                                          "dtype": "float32", "max_context_tokens": 2048}},
    )
    dry = run_snakemake(workflow_copy, "-n", "--configfile", str(config))
    assert dry.returncode == 0, dry.stderr[-3000:]
    jobs = planned_jobs(dry.stdout)
    assert jobs["materialise_llama3_tokenizer"] == 1 and jobs["build_shaped_model"] == 1
    run_snakemake(workflow_copy, "--cores", "1", "results/models/tiny-llama-3.1-random", "--configfile", str(config), check=True)
    manifest = json.loads((workflow_copy / "results/models/tiny-llama-3.1-random/config.json.manifest.json").read_text())
    assert manifest["random_init"] is True and manifest["shape"] == "llama-3.1-tiny" and manifest["seed"] == 3
    tokenizer_manifest = json.loads((workflow_copy / "results/tokenizers/llama-3.1/tokenizer.json.manifest.json").read_text())
    assert tokenizer_manifest["source"]["package"] == "llama-models" and tokenizer_manifest["stop_token_ids"] == [128001, 128008, 128009]

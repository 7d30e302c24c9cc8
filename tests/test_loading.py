"""One loader: every job that runs a model loads it (and its tokenizer, device and stop tokens) the same way."""

from __future__ import annotations

import ast

import pytest
from conftest import REPO

from kvcache_bench.engine.loading import ModelSettings, load_for_settings

CANARY = ModelSettings(path=str(REPO / "resources/canary"), max_context_tokens=4096, dtype="float32", device="cpu")


def test_the_loader_gives_the_model_its_tokenizer_device_and_stop_tokens():
    loaded = load_for_settings(CANARY)
    assert loaded.device.type == "cpu" and next(loaded.model.parameters()).device.type == "cpu"
    assert loaded.tokenizer.eos_token_id in loaded.stop_ids
    assert loaded.attn_implementation == "sdpa" and loaded.model.config._attn_implementation == "sdpa"
    assert loaded.load_seconds > 0


def test_a_method_that_reads_attention_weights_gets_the_attention_it_asked_for():
    loaded = load_for_settings(CANARY, attn_implementation="eager", tokenizer=False)
    assert loaded.model.config._attn_implementation == "eager" and loaded.attn_implementation == "eager"
    assert loaded.tokenizer is None


@pytest.mark.parametrize("name", ["load_model", "load_tokenizer"])
def test_no_job_loads_a_model_or_tokenizer_but_through_the_loader(name):
    """trust_remote_code, the device and the stop tokens were each dropped by one of five copies of this code."""
    callers = []
    for path in [*REPO.joinpath("kvcache_bench").rglob("*.py"), *REPO.joinpath("scripts").glob("*.py")]:
        if path.name == "loading.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            called = getattr(node, "func", None)
            if isinstance(node, ast.Call) and getattr(called, "id", getattr(called, "attr", None)) == name:
                callers.append(str(path.relative_to(REPO)))
    assert callers == []

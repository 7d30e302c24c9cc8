"""The method registry resolves against the installed kvpress (and quantisation backend) or fails early."""

import re

import pytest
import yaml

from kvcache_bench.methods.registry import (
    METHODS,
    UnknownMethodError,
    attention_implementation_for,
    build_press,
    cache_factory_for,
    compression_ratio_for,
    doctor,
    retentions_for,
)
from tests.fixtures.tiny_models import tiny_llama


def test_every_method_resolves_with_the_installed_versions():
    rows = {row["method"]: row for row in doctor()}
    assert set(rows) == set(METHODS)
    assert all(row["status"] == "ok" for row in rows.values()), rows
    assert rows["snapkv"]["press"] == "SnapKVPress()"
    assert rows["kv_quant_2bit"]["press"].startswith("transformers.QuantizedCache(2-bit, optimum-quanto")


def test_every_method_name_fits_the_schema_and_the_result_paths():
    schema = yaml.safe_load(open("schemas/config.schema.yaml"))
    pattern = schema["properties"]["methods"]["items"]["pattern"]
    assert schema["properties"]["batch_size_overrides"]["propertyNames"]["pattern"] == pattern
    assert all(re.fullmatch(pattern.strip("^$"), name) for name in METHODS)


def test_retention_becomes_kvpress_compression_ratio():
    press = build_press("snapkv", 0.25, {"window_size": 8})
    assert type(press).__name__ == "SnapKVPress"
    assert press.compression_ratio == pytest.approx(0.75) == compression_ratio_for(0.25)
    assert press.window_size == 8


def test_h2o_forces_eager_attention_and_others_keep_the_configured_one():
    assert attention_implementation_for("h2o", "sdpa") == "eager"
    assert attention_implementation_for("snapkv", "sdpa") == "sdpa"


def test_misconfigured_methods_fail_naming_the_kwarg():
    with pytest.raises(UnknownMethodError, match="window"):
        build_press("snapkv", 0.5, {"window": 8})
    with pytest.raises(UnknownMethodError, match="bits"):
        build_press("kv_quant_4bit", 1.0, {"bits": 3})
    with pytest.raises(UnknownMethodError, match="did you mean 'snapkv'"):
        build_press("snap_kv", 0.5)


def test_non_evicting_methods_have_one_cell_at_full_retention():
    assert retentions_for("kv_quant_4bit", [0.5, 0.25]) == [1.0]
    assert retentions_for("snapkv", [0.5, 0.25]) == [0.5, 0.25]
    with pytest.raises(ValueError, match="retention must be 1.0"):
        build_press("kv_quant_2bit", 0.5)


def test_kv_quant_builds_a_quantised_cache_at_its_bits():
    from transformers import DynamicCache, QuantizedCache

    model = tiny_llama(vocab_size=64)
    assert type(cache_factory_for("snapkv", model)()) is DynamicCache
    cache = cache_factory_for("kv_quant_2bit", model, {"residual_length": 32})()
    assert isinstance(cache, QuantizedCache)
    assert {layer.nbits for layer in cache.layers} == {2}
    assert {layer.residual_length for layer in cache.layers} == {32}
    # 2 KV heads x 16 dims: the default group must divide 32 so that any prompt length quantises
    assert {layer.q_group_size for layer in cache_factory_for("kv_quant_4bit", model)().layers} == {32}
    with pytest.raises(UnknownMethodError, match="must divide"):
        cache_factory_for("kv_quant_4bit", model, {"q_group_size": 64})


def test_default_quantised_cache_handles_odd_prompt_lengths():
    import torch

    from kvcache_bench.engine.prefill import prefill

    model = tiny_llama(vocab_size=64)
    cache = cache_factory_for("kv_quant_4bit", model)()
    with torch.inference_mode():
        prefill(model, cache, [3 + i % 60 for i in range(71)])
    assert cache.get_seq_length() == 71


def test_building_a_press_does_not_import_datasets_yet_datasets_stays_importable():
    """`datasets` was a third of a generate job's start-up: kvpress imports it only for presses we never build."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from kvcache_bench.methods.registry import build_press\n"
        "build_press('snapkv', 0.5, {'window_size': 8})\n"
        "assert 'datasets' not in sys.modules and 'pandas' not in sys.modules, 'datasets came in with kvpress'\n"
        "import datasets\n"
        "assert datasets.load_dataset.__module__.startswith('datasets'), 'a stand-in survived the kvpress import'\n"
        "from kvpress.presses import duo_attention_press\n"
        "print(duo_attention_press.load_dataset.__qualname__)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "deferred" in result.stdout  # DuoAttention's load_dataset imports the real one when called

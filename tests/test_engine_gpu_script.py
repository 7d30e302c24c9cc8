"""The H200 engine script (tools/gpu/engine_h200.py) runs end to end with --tiny on CPU."""

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "gpu" / "engine_h200.py"


def load_script():
    spec = importlib.util.spec_from_file_location("engine_h200", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tiny_run_writes_every_method_and_mode(tmp_path):
    script = load_script()
    out = tmp_path / "engine.json"
    script.main(["--tiny", "--out", str(out), "--contexts", "1", "--questions-per-context", "2", "--context-tokens", "96"])
    report = json.loads(out.read_text())
    settings = {(r["method"], r["question_mode"]) for r in report["results"]}
    assert settings == {(m, q) for m, _ in script.METHODS for q in script.QUESTION_MODES}
    for row in report["results"]:
        assert row["examples"] == 2 and row["seconds_per_example"] > 0
        assert row["generated_tokens_mean"] == report["max_new_tokens"]
        expected = 1.0 if row["method"] == "full_cache" else 0.5
        assert abs(row["effective_retention_mean"] - expected) < 0.02
        assert row["peak_memory_gib"] is None  # CPU: there is no CUDA peak to report


def test_the_full_shape_is_llama_31_8b():
    shape = load_script().LLAMA_31_8B
    assert (shape["hidden_size"], shape["num_hidden_layers"], shape["num_attention_heads"], shape["num_key_value_heads"]) == (4096, 32, 32, 8)
    assert (shape["intermediate_size"], shape["vocab_size"]) == (14336, 128256)
    expected_rope = {
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    assert shape["rope_parameters"] == expected_rope
    from transformers import LlamaConfig

    assert LlamaConfig(**shape).rope_parameters == expected_rope  # what the model is actually built with

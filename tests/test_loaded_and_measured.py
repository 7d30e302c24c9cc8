"""A model that does not load whole, and a cell measured other than it asked (issue 23): the job fails naming
the tensors or the damaged file, and the table flags the cell. Each case asserts what the user reads.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
    from kvcache_bench.engine.loading import load_model, pick_device

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



# ------------------------------------------------------------------------------------------ 5. asked vs measured


def _scores(path: Path, kept: int, pressed: int, prompt_tokens: int, original: int, n: int = 4) -> str:
    rows = [
        {"id": f"r{i}", "metric": "qa_f1", "score": 1.0, "prediction": "x", "references": ["x"],
         "effective_retention": kept / pressed, "truncated": prompt_tokens < original,
         "prompt_tokens": prompt_tokens, "original_prompt_tokens": original}
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _cell(method: str, retention: float) -> dict:
    return {"dataset": "d", "task": "qasper", "model": "m", "method": method, "question_mode": "question_aware",
            "retention": retention, "batch_size": 1, "decode_batch_size": 1}


# (case, asked retention, kept of 333 pressed, prompt tokens of 334, flag the user reads or None)
MEASURED_CASES = [
    ("kept as asked", 0.1, 33, 334, None),
    ("1e-6 keeps one token", 1e-6, 1, 334, "KV kept 0.3003%, asked 0.0001%"),
    ("prompts cut to 15 tokens", 0.5, 166, 15, "context cut: prompts lost 95.51% of their tokens to truncation (100% of prompts truncated)"),
]


@pytest.mark.parametrize("case, retention, kept, prompt_tokens, flag", MEASURED_CASES, ids=[c[0] for c in MEASURED_CASES])
def test_a_cell_measured_other_than_asked_is_flagged_in_table_and_markdown(tmp_path, case, retention, kept, prompt_tokens, flag):
    from kvcache_bench.analysis.aggregate import build_summary
    from kvcache_bench.analysis.measured import flagged_caption
    from kvcache_bench.analysis.summary_markdown import summary_markdown

    files = [_scores(tmp_path / "full.jsonl", 333, 333, 334, 334), _scores(tmp_path / "cell.jsonl", kept, 333, prompt_tokens, 334)]
    summary = build_summary(files, [_cell("full_cache", 1.0), _cell("snapkv", retention)], n_resamples=50)
    row = summary[summary["method"] == "snapkv"].iloc[0]
    assert row["effective_retention"] == pytest.approx(kept / 333, abs=1e-6)
    assert row["truncated_share"] == (1.0 if prompt_tokens < 334 else 0.0)
    markdown = summary_markdown(summary)
    if flag is None:
        assert not row["retention_off"] and not row["context_cut"]
        assert "measured other than they asked" not in markdown and flagged_caption(summary) is None
    else:
        assert "cells were measured other than they asked" in markdown and flag in markdown
        assert flag in flagged_caption(summary)


def test_a_press_that_compresses_while_decoding_is_not_flagged_for_keeping_less_than_the_retention_it_never_asked(tmp_path):
    """Its cells ask retention 1.0 and a budget in tokens (target_size): keeping 64 of 300 is what they asked."""
    from kvcache_bench.analysis.aggregate import build_summary
    from kvcache_bench.analysis.metrics import score_records
    from kvcache_bench.analysis.summary_markdown import summary_markdown

    predictions = [
        {"id": f"r{i}", "prediction": "x", "references": ["x"], "effective_retention": 64 / 300, "truncated": False,
         "prompt_tokens": 290, "original_prompt_tokens": 290, "compressed_while_decoding": True}
        for i in range(4)
    ]
    decoding = tmp_path / "decoding.jsonl"
    decoding.write_text("".join(json.dumps(r) + "\n" for r in score_records("qasper", predictions)))
    files = [_scores(tmp_path / "full.jsonl", 333, 333, 334, 334), str(decoding)]
    summary = build_summary(files, [_cell("full_cache", 1.0), _cell("decoding_knorm", 1.0)], n_resamples=50)
    row = summary[summary["method"] == "decoding_knorm"].iloc[0]
    assert row["effective_retention"] == pytest.approx(64 / 300, abs=1e-6)  # still reported: the share the budget left
    assert not row["retention_off"] and "measured other than they asked" not in summary_markdown(summary)

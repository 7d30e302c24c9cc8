"""The export in kvpress's evaluation layout: the directory names, columns and keys kvpress's
evaluation/evaluate.py writes (NVIDIA/kvpress, the same from v0.5.4 to its main branch), from a study's files."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from conftest import FAKE_HF_TOKEN, run_snakemake, write_config

from kvcache_bench.analysis.kvpress_export import dump_config, export_cell, plan_export, results_dir_name

# EvaluationConfig's fields in evaluate.py, in their order (config.yaml is its asdict(); save_config drops
# threshold and head_compression_ratio when they are None)
EVALUATION_CONFIG_FIELDS = [
    "dataset", "data_dir", "model", "device", "press_name", "compression_ratio", "key_channel_compression_ratio",
    "head_compression_ratio", "threshold", "fraction", "max_new_tokens", "max_context_length", "query_aware",
    "needle_depth", "compression_interval", "target_size", "hidden_states_buffer_size", "output_dir", "log_level",
    "model_kwargs", "press_init_command", "seed", "fp8",
]


@pytest.mark.parametrize("settings, name", [
    # evaluation/leaderboard.sh's runs, as get_results_dir names them
    (("ruler", "4096", "Qwen/Qwen3-8B", "no_press", 0.0, False), "ruler__4096__Qwen--Qwen3-8B__no_press__0.00"),
    (("ruler", "4096", "Qwen/Qwen3-8B", "snapkv", 0.25, True), "ruler__4096__Qwen--Qwen3-8B__snapkv__0.25__query_aware"),
    (("ruler", "4096", "Qwen/Qwen3-8B", "knorm", 0.875, False), "ruler__4096__Qwen--Qwen3-8B__knorm__0.88"),
    (("loogle", None, "meta-llama/Meta-Llama-3.1-8B-Instruct", "tova", 0.5, False),
     "loogle__meta-llama--Meta-Llama-3.1-8B-Instruct__tova__0.50"),  # no data_dir: no empty component
])
def test_directory_names_are_kvpresss(settings, name):
    assert results_dir_name(*settings) == name
    # ThinK's key-channel ratio comes after query_aware, as get_results_dir appends it
    assert results_dir_name("ruler", "4096", "m/x", "think", 0.0, True, 0.5) == "ruler__4096__m--x__think__0.00__query_aware__key_channel_cr0.50"


def config(models=None):
    return {
        "seed": 7, "generation": {"device": "cuda"}, "method_kwargs": {"decoding_knorm": {"compression_interval": 8, "target_size": 64}},
        "models": models or {"llama": {"path": "meta-llama/Llama-3.1-8B-Instruct", "attn_implementation": "sdpa", "dtype": "bfloat16"}},
    }


def cell(method, retention="0.50", mode="question_aware", batch="1", decode="1", model="llama"):
    return dict(dataset="longbench", task="qasper", model=model, method=method, question_mode=mode, retention=retention,
                batch_size=batch, decode_batch_size=decode)


def test_cells_map_to_kvpress_runs_and_those_without_one_are_listed_with_why(tmp_path):
    cells = [cell("full_cache", "1.00"), cell("snapkv", "0.125", mode="question_agnostic"), cell("snapkv"),
             cell("snapkv", mode="other_question"), cell("full_cache", "1.00", batch="4"),
             cell("tova", decode="1"), cell("tova", decode="32"), cell("think", "0.25")]
    exported, left_out = plan_export(cells, config(), str(tmp_path))
    assert [e["directory"] for e in exported] == [
        "results/kvpress/longbench__qasper__meta-llama--Llama-3.1-8B-Instruct__no_press__0.00__query_aware",
        "results/kvpress/longbench__qasper__meta-llama--Llama-3.1-8B-Instruct__snapkv__0.88",  # keeps 12.5%, drops 0.875
        "results/kvpress/longbench__qasper__meta-llama--Llama-3.1-8B-Instruct__snapkv__0.50__query_aware",
        "results/kvpress/longbench__qasper__meta-llama--Llama-3.1-8B-Instruct__tova__0.50__query_aware",
        "results/kvpress/longbench__qasper__meta-llama--Llama-3.1-8B-Instruct__think__0.00__query_aware__key_channel_cr0.75",
    ]
    why = {(c["method"], c["question_mode"], c["batch_size"], c["decode_batch_size"]): c["why"] for c in left_out}
    assert "other_question has no kvpress evaluation run" in why[("snapkv", "other_question", "1", "1")]
    assert "prefill batch 4" in why[("full_cache", "question_aware", "4", "1")]
    assert "the same answers as decode batch 1, which is exported" in why[("tova", "question_aware", "1", "32")]
    assert exported[1]["settings"]["compression_ratio"] == 0.875 and exported[1]["settings"]["query_aware"] is False


def test_a_model_without_a_hub_id_or_sharing_one_is_named_by_its_config_name(tmp_path):
    (tmp_path / "resources/canary").mkdir(parents=True)
    models = {
        "canary": {"path": "resources/canary", "attn_implementation": "sdpa", "dtype": "float32"},
        "a": {"path": "org/model", "attn_implementation": "sdpa", "dtype": "bfloat16"},
        "b": {"path": "org/model", "attn_implementation": "sdpa", "dtype": "bfloat16"},  # a second engine on the same weights
    }
    exported, _ = plan_export([cell("knorm", model=m) for m in models], config(models), str(tmp_path))
    assert [e["settings"]["model"] for e in exported] == ["canary", "a", "b"]  # one directory each


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def exported_files(tmp_path, metric, mode="question_aware"):
    (entry,), _ = plan_export([cell("snapkv", mode=mode)], config(), str(tmp_path))
    scores = write_jsonl(tmp_path / "s.jsonl", [
        {"id": f"e{i}", "metric": metric, "score": s, "prediction": f" answer {i}", "references": ["a"], "truncated": i == 0}
        for i, s in enumerate([1.0, 0.5, 0.0])])
    predictions = write_jsonl(tmp_path / "p.jsonl", [
        {"id": f"e{i}", "construction": {"class": "kvpress.presses.snapkv_press.SnapKVPress",
                                         "kwargs": {"compression_ratio": 0.5, "window_size": 64}}} for i in range(3)])
    rows = {f"e{i}": {"_id": f"e{i}", "input": f"question {i}?", "context": "long text", "answers": ["a", "b"], "length": 9,
                      "dataset": "qasper", "language": "en", "all_classes": None} for i in range(3)}
    return export_cell(entry, scores, predictions, rows, max_new_tokens=128)


def test_a_longbench_cell_has_kvpresss_columns_metric_and_config(tmp_path):
    files = exported_files(tmp_path, "qa_f1")
    frame = files["predictions.csv"]
    assert "context" not in frame  # evaluate.py drops it before saving
    assert {"question", "answers", "all_classes", "task", "predicted_answer", "compression_ratio", "max_new_tokens", "answer_prefix"} <= set(frame)
    assert list(frame["question"]) == ["", "", ""]  # query-aware: kvpress moved the question into the context
    assert list(frame["predicted_answer"]) == [" answer 0", " answer 1", " answer 2"] and set(frame["compression_ratio"]) == {0.5}
    assert files["metrics.json"] == 50.0  # LongBench's scorer: one number, x100, 2 decimals
    written = dump_config(files["config.yaml"])
    loaded = yaml.safe_load(written)
    assert list(loaded) == [k for k in EVALUATION_CONFIG_FIELDS if k not in ("threshold", "head_compression_ratio")]
    assert loaded["press_name"] == "snapkv" and loaded["compression_ratio"] == 0.5 and loaded["query_aware"] is True
    assert loaded["model"] == "meta-llama/Llama-3.1-8B-Instruct" and loaded["data_dir"] == "qasper" and loaded["max_new_tokens"] == 128
    assert loaded["press_init_command"] == "SnapKVPress(compression_ratio=0.5, window_size=64)"
    assert files["facts"]["truncated_share"] == pytest.approx(1 / 3, abs=1e-4)  # said in the manifest, not in kvpress's keys


def test_a_ruler_style_cell_has_kvpresss_ruler_layout(tmp_path):
    files = exported_files(tmp_path, "string_match_all", mode="question_agnostic")
    frame = files["predictions.csv"]
    assert "answer" in frame and "answers" not in frame  # the RULER scorer reads df["answer"] and df["task"]
    assert list(frame["question"]) == ["question 0?", "question 1?", "question 2?"]  # agnostic: the question stays
    assert files["metrics.json"] == {"qasper": {"string_match": 50.0}}


def test_the_rule_writes_the_study_in_kvpresss_layout(workflow_copy):
    demo = yaml.safe_load((workflow_copy / "config/demo.yaml").read_text())
    synthetic = {**demo["datasets"]["synthetic"], "num_examples": 3}
    synthetic["synthetic"] = {**synthetic["synthetic"], "n_documents": 1, "questions_per_document": 3}
    write_config(workflow_copy, "config/demo.yaml", "export.yaml", methods=["full_cache", "snapkv"], retentions=[0.5],
                 question_modes=["question_aware", "question_agnostic", "other_question"], datasets={"synthetic": synthetic},
                 batch_size_overrides={})
    run_snakemake(workflow_copy, "kvpress_export", "results/tables/summary.csv", "--cores", "2", "--configfile", "config/export.yaml",
                  env={"HF_TOKEN": FAKE_HF_TOKEN}, check=True)
    root = workflow_copy / "results/kvpress"
    directories = sorted(p.name for p in root.iterdir() if p.is_dir())
    assert directories == ["synthetic__synthetic_qa__canary__no_press__0.00", "synthetic__synthetic_qa__canary__no_press__0.00__query_aware",
                           "synthetic__synthetic_qa__canary__snapkv__0.50", "synthetic__synthetic_qa__canary__snapkv__0.50__query_aware"]
    summary = pd.read_csv(workflow_copy / "results/tables/summary.csv")
    for name in directories:
        for file in ("predictions.csv", "metrics.json", "config.yaml"):
            assert (root / name / file).exists() and (root / name / f"{file}.manifest.json").exists(), (name, file)
        press = "full_cache" if "no_press" in name else "snapkv"
        mode = "question_aware" if name.endswith("query_aware") else "question_agnostic"
        score = summary[(summary["method"] == press) & (summary["question_mode"] == mode)]["score"].iloc[0]
        assert json.loads((root / name / "metrics.json").read_text()) == pytest.approx(score, abs=0.01)  # the study's number
        assert len(pd.read_csv(root / name / "predictions.csv")) == 3
    index = pd.read_csv(root / "index.csv")
    assert len(index) == 6 and set(index.loc[index["directory"].isna(), "question_mode"]) == {"other_question"}

"""Inputs that used to change the measurement silently (issue 13): each now ends in a clear error before any
generation job, or runs exactly as asked. Every case names the message a user sees.

Parse-time cases run Snakemake on a copy of config/demo.yaml; data-row cases call the loader the data job
calls; one small real run (the canary, 3 examples, 2 cells) backs the cases about written outputs.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import copy_workflow, run_snakemake

from kvcache_bench.data.longbench import DataRowError, load_longbench_rows, normalise_rows
from kvcache_bench.files import write_jsonl_atomic
from kvcache_bench.manifest import (
    ManifestMismatchError,
    config_hash,
    scrub_secrets,
    verify_against_manifest,
    write_manifest,
)
from kvcache_bench.study.config_checks import remote_code_files, remote_code_warning, retention_label

CELL = "synthetic/synthetic_qa/canary"


def small_config(workdir: Path, **changes) -> dict:
    """config/demo.yaml cut to 2 methods, 1 retention, 1 question mode and a few rows; ``changes`` on top."""
    config = yaml.safe_load((workdir / "config/demo.yaml").read_text())
    config.pop("perf")
    config.update(
        methods=["full_cache", "snapkv"], retentions=[0.5], question_modes=["question_aware"],
        batch_size_overrides={}, method_kwargs={"snapkv": {"window_size": 8}},
    )
    config["datasets"]["synthetic"]["num_examples"] = 3
    config["datasets"]["synthetic"]["synthetic"].update(n_documents=1, min_words=256, max_words=320)
    for key, value in changes.items():
        if callable(value):
            value(config)
        else:
            config[key] = value
    return config


def run_with(workdir: Path, config: dict, *args: str, name: str = "case.yaml"):
    (workdir / "config" / name).write_text(yaml.safe_dump(config, sort_keys=False))
    result = run_snakemake(workdir, *args, "--configfile", f"config/{name}", timeout=600)
    return result, result.stdout + result.stderr


def set_model(key, value):
    def change(config):
        config["models"]["canary"][key] = value

    return change


# (case, config changes, snakemake arguments, must succeed, what the user must read [, how often])
PARSE_TIME_CASES = [
    ("misspelt method_kwargs name", {"method_kwargs": {"snapkvv": {"window_size": 8}}}, ["--cores", "1"], False,
     ["method_kwargs names 'snapkvv', which is not a method", "Did you mean 'snapkv'?"]),
    ("kwargs of a known method this study does not run", {"method_kwargs": {"snapkv": {}, "pyramidkv": {"window_size": 8}}},
     ["-n"], True, []),
    ("compression_ratio in method_kwargs", {"method_kwargs": {"snapkv": {"compression_ratio": 0.7}}}, ["--cores", "1"], False,
     ["method_kwargs.snapkv sets compression_ratio", "`retentions`"]),
    ("model directory that does not exist", {"models": set_model("path", "resources/canaryy")}, ["--cores", "1"], False,
     ["models.canary.path 'resources/canaryy' is a local directory that does not exist"]),
    ("model path that is a file", {"models": set_model("path", "resources/canary/config.json")}, ["--cores", "1"], False,
     ["models.canary.path 'resources/canary/config.json' is a file"]),
    ("model directory without config.json", {"models": set_model("path", "resources")}, ["--cores", "1"], False,
     ["models.canary.path 'resources' is a directory without config.json"]),
    ("two retentions that are one number", {"retentions": [0.5, 0.50]}, ["--cores", "1"], False,
     ["has non-unique elements"]),
    ("eviction with batching, dry run", {"batch_sizes": [1, 2]}, ["-n"], True,
     [f"refused target {CELL}/snapkv/question_aware/retention-0.50_batch-2_decode-1, not run (listed in "
      "results/tables/summary.md): snapkv removes tokens and batch size is 2: left padding would be scored"]),
    ("trust_remote_code", {"models": set_model("trust_remote_code", True)}, ["-n"], True,
     ["WARNING: models.canary has trust_remote_code: true, so loading 'resources/canary' runs that model's own Python code"]),
]


@pytest.fixture(scope="module")
def parse_workdir(tmp_path_factory) -> Path:
    return copy_workflow(tmp_path_factory.mktemp("bad_inputs") / "workflow")


@pytest.mark.parametrize("case, changes, args, succeeds, messages", PARSE_TIME_CASES, ids=[c[0] for c in PARSE_TIME_CASES])
def test_bad_config_is_named_before_any_job(parse_workdir, case, changes, args, succeeds, messages):
    result, output = run_with(parse_workdir, small_config(parse_workdir, **changes), *args)
    assert (result.returncode == 0) == succeeds, output[-3000:]
    for message in messages:
        assert message in output, output[-3000:]
        assert output.count(message) == 1, f"said {output.count(message)} times"  # once, not once per job
    assert not (parse_workdir / "results/predictions").exists()


def test_retentions_run_as_asked_not_as_rounded(parse_workdir):
    """0.125 used to run as 0.12, and 0.5 and 0.501 as one job: every value now has its own exact path."""
    result, output = run_with(parse_workdir, small_config(parse_workdir, retentions=[0.5, 0.501, 0.125, 0.001]), "-n")
    assert result.returncode == 0, output[-3000:]
    for label in ("0.50", "0.501", "0.125", "0.001"):
        assert f"results/predictions/{CELL}/snapkv/question_aware/retention-{label}_batch-1_decode-1.jsonl" in output
    assert "retention-0.12_" not in output and "retention-0.00_" not in output


@pytest.mark.parametrize("value", [0.5, 0.25, 0.1, 1.0, 0.125, 0.501, 0.001, 1e-5, 0.1 + 0.2, 0.3333333333333333, 0.999999])
def test_retention_label_reads_back_as_the_same_number(value):
    label = retention_label(value)
    assert float(label) == value and "e" not in label
    assert len(label.split(".")[1]) >= 2  # the two-decimal paths of earlier studies are unchanged


def test_refused_cells_alone_write_no_table_or_figure(parse_workdir):
    config = small_config(parse_workdir, methods=["snapkv"], batch_sizes=[2])
    result, output = run_with(parse_workdir, config, "--cores", "1", "--keep-going")
    assert result.returncode != 0
    assert f"refused target {CELL}/snapkv/question_aware/retention-0.50_batch-2_decode-1, nothing runs" in output
    assert "every one of this study's 1 cell(s) is refused" in output
    assert not (parse_workdir / "results/tables").exists() and not (parse_workdir / "results/figures").exists()


def test_another_run_holding_the_directory_is_named(parse_workdir):
    locks = parse_workdir / ".snakemake/locks"
    locks.mkdir(parents=True, exist_ok=True)
    (locks / "0.output.lock").write_text(str(parse_workdir / "results/predictions/x.jsonl") + "\n")
    try:
        result, output = run_with(parse_workdir, small_config(parse_workdir), "-n")
    finally:
        shutil.rmtree(locks)
    assert "another Snakemake run holds this working directory" in output
    assert "do NOT --rerun-incomplete" in output and "snakemake --unlock" in output


# ------------------------------------------------------------------------------------------ data rows

GOOD_ROW = {"input": "what is it?", "context": "a long document " * 20, "answers": ["it"], "length": 60, "_id": "r0"}


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


DATA_CASES = [
    ("row without input", [GOOD_ROW, {**GOOD_ROW, "_id": "r1", "input": None}], "line 2: field 'input' (the question) is empty"),
    ("row missing input key", [GOOD_ROW, {k: v for k, v in GOOD_ROW.items() if k not in ("input", "_id")}], "line 2: field 'input' (the question) is missing"),
    ("row without answers", [{k: v for k, v in GOOD_ROW.items() if k != "answers"}], "line 1: field 'answers' (the references the prediction is scored against) is missing"),
    ("empty references", [GOOD_ROW, {**GOOD_ROW, "_id": "r1", "answers": []}], "line 2: field 'answers' must be a non-empty reference"),
    ("blank reference", [{**GOOD_ROW, "answers": [" "]}], "line 1: field 'answers' must be a non-empty reference"),
    ("empty context", [{**GOOD_ROW, "context": ""}], "line 1: field 'context' is empty or not text"),
    ("answers of the wrong type", [{**GOOD_ROW, "answers": 42}], "line 1: field 'answers' must be a non-empty reference"),
    ("length that is not a number", [{**GOOD_ROW, "length": "long"}], "line 1: field 'length' must be an integer"),
    ("repeated id", [GOOD_ROW, GOOD_ROW], "line 2: field '_id' 'r0' repeats"),
    ("malformed line", [GOOD_ROW, GOOD_ROW | {"_id": "r1"}, '{"input": "broken'], "line 3: not valid JSON"),
    ("a line that is not an object", [GOOD_ROW, "[1, 2]"], "line 2: a row must be a JSON object"),
    ("empty file", [], "empty, no rows of task 'qasper'"),
]


@pytest.mark.parametrize("case, rows, message", DATA_CASES, ids=[c[0] for c in DATA_CASES])
def test_bad_data_rows_name_file_line_and_field(tmp_path, case, rows, message):
    path = _jsonl(tmp_path / "qasper.jsonl", rows)
    with pytest.raises(DataRowError) as raised:
        normalise_rows(load_longbench_rows("qasper", local_path=str(path)), "qasper", None)
    assert message in str(raised.value)
    assert str(path) in str(raised.value)


def test_a_summary_task_may_have_no_question(tmp_path):
    """gov_report's prompt has no question: LongBench's empty input is valid there, not a missing field."""
    path = _jsonl(tmp_path / "gov_report.jsonl", [{**GOOD_ROW, "input": ""}])
    rows = normalise_rows(load_longbench_rows("gov_report", local_path=str(path)), "gov_report", None)
    assert rows[0]["input"] == "" and rows[0]["answers"] == ["it"]


def test_bad_row_stops_the_workflow_before_generation(parse_workdir, tmp_path):
    data = _jsonl(tmp_path / "qasper.jsonl", [GOOD_ROW, {**GOOD_ROW, "_id": "r1", "input": ""}])

    def local_dataset(config):
        config["datasets"] = {"mine": {"source": "local", "local_path": str(data), "tasks": ["qasper"]}}

    result, output = run_with(parse_workdir, small_config(parse_workdir, datasets=local_dataset), "--cores", "1")
    assert result.returncode != 0
    log = (parse_workdir / "logs/download_dataset/mine/qasper.log").read_text()
    assert f"{data}, line 2: field 'input' (the question) is empty" in log
    assert not (parse_workdir / "results/data/mine/qasper.jsonl").exists()
    assert not (parse_workdir / "results/predictions").exists()


# ------------------------------------------------------------------------------------------ outputs


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    """2 cells (full cache, SnapKV at 0.125) on 3 synthetic examples; 4 asked for, so the cells are incomplete."""
    workdir = copy_workflow(tmp_path_factory.mktemp("bad_inputs_run") / "workflow")
    config = small_config(workdir, retentions=[0.125])
    config["datasets"]["synthetic"]["num_examples"] = 4
    result, output = run_with(workdir, config, "--cores", "2", name="small.yaml")
    assert result.returncode == 0, output[-4000:]
    return workdir


SNAPKV = f"{CELL}/snapkv/question_aware/retention-0.125_batch-1_decode-1"


@pytest.mark.slow
def test_retention_in_the_table_is_the_one_configured(small_run):
    summary = pd.read_csv(small_run / "results/tables/summary.csv")
    assert sorted(summary["retention"]) == [0.125, 1.0]
    manifest = json.loads((small_run / f"results/predictions/{SNAPKV}.jsonl.manifest.json").read_text())
    assert manifest["params"]["retention"] == 0.125
    records = [json.loads(line) for line in (small_run / f"results/predictions/{SNAPKV}.jsonl").read_text().splitlines()]
    assert {record["retention"] for record in records} == {0.125}
    assert "| 12.5% |" in (small_run / "results/tables/summary.md").read_text()


@pytest.mark.slow
def test_more_examples_asked_than_synthetic_data_has_is_flagged(small_run):
    summary = pd.read_csv(small_run / "results/tables/summary.csv")
    assert (summary["n"] == 3).all() and (summary["expected_n"] == 4).all() and summary["incomplete"].all()
    log = (small_run / "logs/make_synthetic_dataset/synthetic/synthetic_qa.log").read_text()
    assert "num_examples is 4 but task 'synthetic_qa' has only 3 rows" in log


@pytest.mark.slow
def test_manifests_show_generation_settings_and_checksums(small_run):
    manifest = json.loads((small_run / f"results/predictions/{SNAPKV}.jsonl.manifest.json").read_text())
    assert manifest["params"]["max_new_tokens"] == 8
    assert manifest["params"]["model_settings"]["max_context_tokens"] == 4096
    assert manifest["content"]["records"] == 3 and len(manifest["content"]["sha256"]) == 64
    scores = json.loads((small_run / f"results/scores/{SNAPKV}.jsonl.manifest.json").read_text())
    assert scores["predictions_sha256"] == manifest["content"]["sha256"] and scores["content"]["records"] == 3


def _cut_to_first_line(path: Path):
    path.write_text(path.read_text().splitlines(keepends=True)[0])


def _cut_mid_line(path: Path):
    text = path.read_text()
    path.write_text(text[: len(text) // 2])


def _edit_a_prediction(path: Path):
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[0]["prediction"] = "an answer typed in by hand"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


TAMPERING_CASES = [
    ("predictions cut to one line", "predictions", _cut_to_first_line, "the manifest says 3 records", "the file has 1 records"),
    ("predictions cut mid-line", "predictions", _cut_mid_line, "the manifest says 3 records", "It was changed after it was written"),
    ("prediction edited by hand", "predictions", _edit_a_prediction, "the manifest says 3 records, sha256", "It was changed after it was written"),
    ("scores cut to one line", "scores", _cut_to_first_line, "the manifest says 3 records", "the file has 1 records"),
]


@pytest.mark.slow
@pytest.mark.parametrize("case, stage, tamper, said, found", TAMPERING_CASES, ids=[c[0] for c in TAMPERING_CASES])
def test_a_changed_output_is_refused_not_tabulated(small_run, tmp_path, case, stage, tamper, said, found):
    workdir = Path(shutil.copytree(small_run, tmp_path / "copy", symlinks=True))
    table_before = (workdir / "results/tables/summary.csv").read_text()
    target = workdir / f"results/{stage}/{SNAPKV}.jsonl"
    tamper(target)
    finished = {path: path.read_bytes() for path in sorted((workdir / "results").rglob("*")) if path.is_file() and path != target}
    result, text = run_with(workdir, yaml.safe_load((workdir / "config/small.yaml").read_text()), "--cores", "1", name="small.yaml")
    assert result.returncode != 0
    # refused while the workflow is parsed, before any job: once the score or aggregate job refused it, and Snakemake
    # had removed that job's finished outputs (the score file, or summary.csv, summary.md and per_example.csv)
    assert "stopped before any job" in text and "Finished job" not in text, text[-3000:]
    assert f"results/{stage}/{SNAPKV}.jsonl is not the file its manifest describes" in text
    assert said in text and found in text and f"`--forcerun results/{stage}/{SNAPKV}.jsonl` at its end" in text
    table = workdir / "results/tables/summary.csv"
    assert table.read_text() == table_before  # nothing tabulated from the changed file
    assert {path: path.read_bytes() for path in finished} == finished  # and nothing finished removed
    if case == "prediction edited by hand":  # the printed remedy, run as printed, remakes the cell and its table
        remedy = re.search(r"`--forcerun ([^`]+)`", text).group(1).split()
        result, output = run_with(workdir, yaml.safe_load((workdir / "config/small.yaml").read_text()), "--cores", "1",
                                  "--forcerun", *remedy, name="small.yaml")
        assert result.returncode == 0, output[-3000:]
        assert "an answer typed in by hand" not in target.read_text()
        assert table.read_text() == table_before


# ------------------------------------------------------------------------------------------ units


def test_settings_that_change_outputs_are_shown_and_hashed(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_kvbench_fake_token_never_written_8d1f")
    params = {
        "max_new_tokens": 128, "model": {"max_context_tokens": 4096}, "tokenizer": "resources/canary",
        "hf_token": "x", "use_auth_token": "y",
        "note": "pulled with hf_kvbench_fake_token_never_written_8d1f and hf_abcdefghijklmnopqrstuvwxyz0123",
    }
    scrubbed = scrub_secrets(params)
    assert scrubbed["max_new_tokens"] == 128 and scrubbed["model"]["max_context_tokens"] == 4096
    assert scrubbed["tokenizer"] == "resources/canary"
    assert scrubbed["hf_token"] == scrubbed["use_auth_token"] == "<redacted>"
    assert scrubbed["note"] == "pulled with <redacted> and <redacted>"
    assert config_hash({"max_new_tokens": 128}) != config_hash({"max_new_tokens": 4})
    assert config_hash({"model": {"max_context_tokens": 4096}}) != config_hash({"model": {"max_context_tokens": 512}})


def test_a_file_without_a_checksummed_manifest_is_refused(tmp_path):
    path = tmp_path / "predictions.jsonl"
    write_jsonl_atomic(path, [{"id": 1}])
    with pytest.raises(ManifestMismatchError, match="has no manifest"):
        verify_against_manifest(path)
    write_manifest(path, {"task": "qasper"})
    assert verify_against_manifest(path)["content"]["records"] == 1


def test_a_killed_writers_temporary_is_removed_when_the_file_is_written_again(tmp_path):
    target = tmp_path / "predictions.jsonl"
    stale = tmp_path / ".predictions.jsonl.k1ll3d.partial"
    stale.write_text('{"id": 1}\n')
    other = tmp_path / ".other.jsonl.k1ll3d.partial"  # another output's writer may still be running
    other.write_text("")
    write_jsonl_atomic(target, [{"id": 1}])
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.jsonl.k1ll3d.partial", "predictions.jsonl"]


def test_remote_code_warning_names_the_code_files(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"auto_map": {"AutoModelForCausalLM": "modeling_x.XForCausalLM"}}))
    (tmp_path / "modeling_x.py").write_text("print('runs at load time')\n")
    assert remote_code_files(tmp_path) == ["modeling_x.py", "auto_map: modeling_x.XForCausalLM"]
    warning = remote_code_warning({"path": str(tmp_path), "trust_remote_code": True}, "mine")
    assert warning.startswith("models.mine has trust_remote_code: true") and "modeling_x.py" in warning
    assert remote_code_warning({"path": str(tmp_path), "trust_remote_code": False}, "mine") is None


def test_a_broken_jsonl_line_is_named_by_file_and_line(tmp_path):
    from kvcache_bench.files import JsonlError, read_jsonl

    path = tmp_path / "scores.jsonl"
    path.write_text('{"id": 1}\n{"id": 2, "sco\n')
    with pytest.raises(JsonlError, match=rf"{path}, line 2: not valid JSON"):
        read_jsonl(path)


@pytest.mark.parametrize("generator", [
    {"n_documents": 2}, {"n_documents": 3, "questions_per_document": 5, "facts_per_document": 2},
    {"n_documents": 1, "questions_per_document": 3, "facts_per_document": 6, "min_words": 256, "max_words": 300},
])
def test_the_expected_count_of_synthetic_rows_is_the_count_written(generator):
    from kvcache_bench.data.synthetic import make_synthetic_rows
    from kvcache_bench.study.prompts import synthetic_row_count

    assert synthetic_row_count(generator) == len(make_synthetic_rows(seed=0, **generator))

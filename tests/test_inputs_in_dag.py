"""Inputs that used to give a wrong number and exit 0 (issue 23): a source outside the DAG, a typo in a per-task
map, a duplicate YAML key, another study's files in results/, outputs only their owner can read. Each case
asserts what the user reads; parse-time cases are dry runs of a copy of the workflow, the rest call the
function the job calls (tests/test_loaded_and_measured.py: checkpoints and asked vs measured).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import copy_workflow, run_snakemake
from test_bad_inputs import CELL, GOOD_ROW, run_with, set_model, small_config


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


# ------------------------------------------------------------------------------------------ 4, 6. refused at parse


def build_into_another_folder(config):
    config["models"]["canary"]["build"] = {"model_config": "resources/demo/model_config.json", "tokenizer": "resources/demo/tokenizer"}


def long_model_name(config):
    config["models"] = {"m" * 264: config["models"]["canary"]}


def broken_model_folder(workdir: Path):
    (workdir / "broken").mkdir(exist_ok=True)
    (workdir / "broken/config.json").write_text('{"model_type": "llama",\n  "hidden_size": }\n')


# (case, config changes, files made first, must succeed, what the user must read)
PARSE_TIME_CASES = [
    ("per-task map naming no task", {"generation": {"max_new_tokens": {"synthetic-qa": 2}, "device": "cpu"}}, None, False,
     ["generation.max_new_tokens names task 'synthetic-qa', which this study does not have (it has: synthetic_qa). Did you mean 'synthetic_qa'?"]),
    ("per-task map naming a task of the study", {"generation": {"max_new_tokens": {"synthetic_qa": 2}, "device": "cpu"}}, None, True, []),
    ("build: with a path that is another model", {"models": build_into_another_folder}, None, False,
     ["models.canary has build:, which makes the model at results/models/canary, but its path is 'resources/canary' "
      "(an existing folder, which would be loaded instead)"]),
    ("generation.device that is no device", {"generation": {"device": "gpu"}}, None, False,
     ["generation.device 'gpu' is not a device torch knows"]),
    ("config.json that is not JSON", {"models": set_model("path", "broken")}, broken_model_folder, False,
     ["models.canary.path 'broken': ", "broken/config.json is not valid JSON (line 2, column 18"]),
    ("a model name too long for a file name", {"models": long_model_name}, None, False, ["is too long"]),
    ("a path starting with ~", {"models": set_model("path", "~/kvbench-no-such-model/canary")}, None, False,
     [f"models.canary.path '{Path.home()}/kvbench-no-such-model/canary' is a local directory that does not exist"]),
    ("press kwarg of the wrong type", {"method_kwargs": {"snapkv": {"window_size": "8"}}}, None, False,
     ["method_kwargs.snapkv.window_size is '8': it must be a whole number of tokens (an integer), not str"]),
    ("negative press kwarg", {"method_kwargs": {"snapkv": {"window_size": -4}}}, None, False,
     ["method_kwargs.snapkv.window_size is -4: it must be at least 1"]),
    ("local dataset that is not there", {"datasets": {"mine": {"source": "local", "local_path": "data/nothere", "tasks": ["qasper"]}}},
     None, False, ["datasets.mine.local_path 'data/nothere' does not exist"]),
]


@pytest.mark.parametrize("case, changes, prepare, succeeds, messages", PARSE_TIME_CASES, ids=[c[0] for c in PARSE_TIME_CASES])
def test_a_config_that_would_run_other_than_asked_is_refused_at_parse(workdir, case, changes, prepare, succeeds, messages):
    if prepare:
        prepare(workdir)
    result, output = run_with(workdir, small_config(workdir, **changes), "-n")
    assert (result.returncode == 0) == succeeds, output[-3000:]
    for message in messages:
        assert message in output, output[-3000:]
    assert "Traceback" not in output or succeeds


def test_a_key_written_twice_is_refused_naming_key_and_lines(workdir):
    text = yaml.safe_dump(small_config(workdir, methods=["full_cache", "snapkv"]), sort_keys=False)
    text += "methods: [full_cache]\n"  # the second `methods:` would silently drop snapkv
    (workdir / "config/twice.yaml").write_text(text)
    result = run_snakemake(workdir, "-n", "--configfile", "config/twice.yaml")
    output = result.stdout + result.stderr
    assert result.returncode != 0
    first = next(n for n, line in enumerate(text.splitlines(), start=1) if line.startswith("methods:"))
    last = len(text.splitlines())
    assert f"config/twice.yaml, line {last}: key 'methods' is written twice in the same mapping (first at line {first})" in output


def test_config_on_the_command_line_alone_keeps_config_yaml(workdir):
    """`--config seed=7` used to replace the whole of config.yaml by {seed: 7} (a schema error); it is applied on top."""
    result = run_snakemake(workdir, "-n", "--config", "seed=7")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "--config seed applied on top of config.yaml (the rest of config.yaml kept)" in output
    assert "rule generate:" in output  # the real study's cells, from config.yaml


def test_key_order_is_no_setting_but_the_studys_models_and_datasets_keep_theirs():
    """Two configs that differ only in the order they write keys give the same params (Snakemake compares their
    repr: another order would rerun every cell, tests/test_rerun.py); the study's rows keep the written order."""
    from kvcache_bench.study.config_files import sort_setting_keys

    def config(generator, kwargs):
        return {"models": {"zeta": {"path": "z", "dtype": "bf16"}, "alpha": {"dtype": "bf16", "path": "a"}},
                "datasets": {"synthetic": {"synthetic": generator, "tasks": ["t2", "t1"]}, "another": {"tasks": ["t"]}},
                "method_kwargs": {"snapkv": kwargs}, "seed": 1}

    one = sort_setting_keys(config({"n_documents": 6, "min_words": 256}, {"window_size": 8, "kernel_size": 5}))
    two = sort_setting_keys(config({"min_words": 256, "n_documents": 6}, {"kernel_size": 5, "window_size": 8}))
    assert repr(one) == repr(two)
    assert list(one["models"]) == ["zeta", "alpha"] and list(one["datasets"]) == ["synthetic", "another"]
    assert one["datasets"]["synthetic"]["tasks"] == ["t2", "t1"]


def test_a_window_longer_than_the_shortest_prompt_is_refused_with_both_numbers():
    from kvcache_bench.study.press_values import prompt_length_problem

    problem = prompt_length_problem("snapkv", {"window_size": 1000}, [512, 333, 700])
    assert problem.startswith("method_kwargs.snapkv.window_size is 1000, but the shortest prompt the press compresses has 333 tokens")
    assert "Lower window_size below 333" in problem
    assert prompt_length_problem("snapkv", {"window_size": 8}, [512, 333]) is None
    assert "n_sink is 400" in prompt_length_problem("streaming_llm", {"n_sink": 400}, [333])


def test_a_data_file_that_is_not_utf8_names_file_and_line(tmp_path):
    from kvcache_bench.data.longbench import DataRowError, load_longbench_rows

    path = tmp_path / "qasper.jsonl"
    path.write_bytes((json.dumps(GOOD_ROW) + "\n").encode() + b'{"input": "caf\xe9"}\n')
    with pytest.raises(DataRowError, match=rf"{path}, line 2: not UTF-8 text \(byte 15 of the line\)"):
        load_longbench_rows("qasper", local_path=str(path))


def test_home_is_expanded_in_every_path_of_the_config():
    from kvcache_bench.study.config_checks import expand_home_in_paths

    config = {
        "models": {"m": {"path": "~/m", "build": {"model_config": "~/c.json", "tokenizer": "tok"}}},
        "datasets": {"d": {"local_path": "~/d", "ruler_haystack": {"tokenizer": "~/t"}}},
        "perf": {"estimate": {"records": ["~/r.jsonl"]}},
    }
    expand_home_in_paths(config)
    home = str(Path.home())
    assert config["models"]["m"]["path"] == f"{home}/m" and config["models"]["m"]["build"] == {"model_config": f"{home}/c.json", "tokenizer": "tok"}
    assert config["datasets"]["d"] == {"local_path": f"{home}/d", "ruler_haystack": {"tokenizer": f"{home}/t"}}
    assert config["perf"]["estimate"]["records"] == [f"{home}/r.jsonl"]


# ------------------------------------------------------------------------------------------ 7, 3. files on a shared results/


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_outputs_and_manifests_are_as_readable_as_the_umask_says(tmp_path, umask, mode):
    import os

    from kvcache_bench.files import write_jsonl_atomic, write_text_atomic
    from kvcache_bench.manifest import write_manifest

    previous = os.umask(umask)
    try:
        write_jsonl_atomic(tmp_path / "predictions.jsonl", [{"id": 1}])
        manifest = write_manifest(tmp_path / "predictions.jsonl", {"task": "qasper"})
        write_text_atomic(tmp_path / "summary.md", "# Summary\n")
    finally:
        os.umask(previous)
    for path in (tmp_path / "predictions.jsonl", manifest, tmp_path / "summary.md"):
        assert path.stat().st_mode & 0o777 == mode, f"{path.name}: {oct(path.stat().st_mode & 0o777)}"


def test_a_concurrent_writers_temporary_is_kept_a_dead_writers_removed(tmp_path):
    import os
    import subprocess
    import sys

    from kvcache_bench.files import _WRITER, write_jsonl_atomic

    host = _WRITER.rsplit("-", 1)[0]
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    live = tmp_path / f".predictions.jsonl.{host}-{os.getppid()}.a1b2c3.partial"  # another run, still writing
    killed = tmp_path / f".predictions.jsonl.{host}-{dead}.d4e5f6.partial"
    for path in (live, killed):
        path.write_text('{"id": 1}\n')
    write_jsonl_atomic(tmp_path / "predictions.jsonl", [{"id": 1}])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, "predictions.jsonl"])


def _manifest_from(path: Path, workdir: str, **params) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"id": "r0"}\n')
    Path(f"{path}.manifest.json").write_text(json.dumps({"workdir": workdir, "params": params}))


def test_another_directorys_file_made_under_other_settings_is_refused_naming_keys(tmp_path, monkeypatch):
    from kvcache_bench.study.shared_results import foreign_output_problems, foreign_outputs_refusal

    monkeypatch.chdir(tmp_path)
    expected = {"max_new_tokens": 8, "model": {"path": "resources/canary", "max_context_tokens": 4096}, "seed": 1}
    _manifest_from(tmp_path / "results/p/a.jsonl", "/elsewhere/clone-b", max_new_tokens=2,
                   model={"path": "resources/canary", "max_context_tokens": 16}, seed=1)
    _manifest_from(tmp_path / "results/p/b.jsonl", str(tmp_path), max_new_tokens=2, seed=1)  # made here: Snakemake reruns it
    [problem] = foreign_output_problems({"results/p/a.jsonl": expected, "results/p/b.jsonl": expected}, tmp_path)
    assert problem.startswith("results/p/a.jsonl was made by the run in /elsewhere/clone-b under other settings (")
    assert "max_new_tokens: 2 there, 8 here; model.max_context_tokens: 16 there, 4096 here" in problem
    refusal = foreign_outputs_refusal({"results/p/a.jsonl": expected, "results/p/b.jsonl": expected}, tmp_path)
    assert "`--forcerun results/p/a.jsonl` at its end" in refusal and "rm " not in refusal
    # the run the remedy starts remakes that file, so it is no longer refused
    assert foreign_output_problems({"results/p/a.jsonl": expected}, tmp_path, forced={"results/p/a.jsonl"}) == []


def test_a_directory_moved_with_its_records_still_owns_what_it_made_there(tmp_path, monkeypatch):
    from kvcache_bench.study.shared_results import foreign_output_problems, record_this_path

    made, expected = "results/tables/summary.csv", {"cells": ["a", "b"]}  # the table a second config asks for
    first = tmp_path / "study"
    first.mkdir()
    record_this_path(first)  # the run that made its files there
    _manifest_from(first / made, str(first), cells=["a", "b", "c"])
    moved = tmp_path / "study-moved"
    first.rename(moved)
    monkeypatch.chdir(moved)
    assert foreign_output_problems({made: expected}, moved) == []  # Snakemake's records came along: they rerun it
    clone = tmp_path / "clone"  # the same results/, records of its own
    shutil.copytree(moved / "results", clone / "results")
    monkeypatch.chdir(clone)
    [problem] = foreign_output_problems({made: expected}, clone)
    assert problem.startswith(f"{made} was made by the run in {first} under other settings (")


def test_another_studys_predictions_in_results_stop_the_dry_run(workdir):
    config = small_config(workdir)
    cell = f"results/predictions/{CELL}/snapkv/question_aware/retention-0.50_batch-1_decode-1.jsonl"
    _manifest_from(workdir / cell, "/elsewhere/clone-b", max_new_tokens=2)
    try:
        result, output = run_with(workdir, config, "-n")
        # the printed remedy, run as printed (dry): it plans that cell's generate job and everything made from it
        remedy = re.search(r"`--forcerun ([^`]+)`", output)
        remade, remade_output = run_with(workdir, config, "-n", *(["--forcerun", *remedy.group(1).split()] if remedy else []))
    finally:
        import shutil

        shutil.rmtree(workdir / "results")
    assert result.returncode != 0
    assert f"{cell} was made by the run in /elsewhere/clone-b under other settings (" in output
    assert "max_new_tokens: 2 there, 8 here" in output
    assert remedy and remedy.group(1) == cell, output[-2000:]
    assert remade.returncode == 0, remade_output[-3000:]
    assert re.search(rf"rule generate:\n\s+input: [^\n]*\n\s+output: {re.escape(cell)}", remade_output), remade_output[-3000:]


def test_another_studys_data_made_under_other_settings_is_refused_first(workdir):
    """Two clones on one results/: B, with other synthetic-data settings, once read A's questions. The data's
    manifest is now held to the settings of the rule that makes it here (evaluated from that rule's params)."""
    data = "results/data/synthetic/synthetic_qa.jsonl"
    config = small_config(workdir)
    try:
        made, made_output = run_with(workdir, config, "--cores", "1", data)
        assert made.returncode == 0, made_output[-3000:]
        manifest_path = workdir / f"{data}.manifest.json"
        manifest = json.loads(manifest_path.read_text())
        manifest_path.write_text(json.dumps({**manifest, "workdir": "/elsewhere/clone-a"}))  # A's file
        same, same_output = run_with(workdir, config, "-n")  # A's settings are this config's: nothing to refuse
        other = small_config(workdir)
        other["datasets"]["synthetic"]["synthetic"]["min_words"] = 300
        refused, refused_output = run_with(workdir, other, "-n")
    finally:
        import shutil

        shutil.rmtree(workdir / "results")
    assert same.returncode == 0, same_output[-3000:]
    assert refused.returncode != 0
    assert f"{data} was made by the run in /elsewhere/clone-a under other settings (generator.min_words: 256 there, 300 here)" in refused_output
    assert f"`--forcerun {data}` at its end" in refused_output


def test_a_second_run_of_another_directory_on_the_same_results_is_refused(tmp_path):
    import os
    import subprocess
    import sys

    from kvcache_bench.study.shared_results import RUN_CLAIM, claim_results_dir

    results = tmp_path / "results"
    results.mkdir()
    (results / RUN_CLAIM).write_text(json.dumps({"host": __import__("socket").gethostname(), "pid": os.getppid(), "workdir": "/elsewhere/clone-b"}))
    problem = claim_results_dir(results, tmp_path)
    assert problem.startswith(f"{results}/ is being written by another run (pid {os.getppid()}")
    assert "from /elsewhere/clone-b" in problem and f"remove {results / RUN_CLAIM}" in problem
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    (results / RUN_CLAIM).write_text(json.dumps({"host": __import__("socket").gethostname(), "pid": int(dead), "workdir": "/elsewhere/clone-b"}))
    assert claim_results_dir(results, tmp_path) is None  # the killed run's claim is taken over
    assert json.loads((results / RUN_CLAIM).read_text())["pid"] == os.getpid()


def test_a_run_is_refused_before_any_job_while_another_directorys_run_writes_results(workdir):
    """The claim is taken when jobs start (onstart): Snakemake parses the workflow before it knows whether it runs any."""
    import os
    import socket

    from kvcache_bench.study.shared_results import RUN_CLAIM

    claim = workdir / "results" / RUN_CLAIM
    claim.parent.mkdir(parents=True, exist_ok=True)
    claim.write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "workdir": "/elsewhere/clone-b"}))
    try:
        run, output = run_with(workdir, small_config(workdir), "--cores", "1", "results/data/synthetic/synthetic_qa.jsonl")
        made = (workdir / "results/data/synthetic/synthetic_qa.jsonl").exists()
    finally:
        shutil.rmtree(workdir / "results")
    assert run.returncode != 0 and not made
    assert f"results/ is being written by another run (pid {os.getpid()} on {socket.gethostname()}, from /elsewhere/clone-b)" in output


# ------------------------------------------------------------------------------------------ one real run


@pytest.mark.slow
def test_an_edit_in_place_reruns_exactly_the_jobs_made_from_it(tmp_path):
    """The canary (3 cells, 3 examples) from a local model folder on a local data file: editing the data file
    reruns its data job and every cell; replacing model.safetensors reruns every cell but not the data job.
    The outputs are readable by the group and others under umask 022, and the table says what was measured:
    SnapKV asked to keep 0.1% keeps 1 token of ~326, and is flagged in the table and in its jobs' logs."""
    import hashlib
    import os
    import shutil

    import pandas as pd
    from conftest import planned_jobs

    from kvcache_bench.data.synthetic import make_synthetic_rows

    workdir = copy_workflow(tmp_path / "workflow")
    shutil.copytree(workdir / "resources/canary", workdir / "models/mycanary")
    data = workdir / "data/mine/synthetic_qa.jsonl"
    data.parent.mkdir(parents=True)
    rows = make_synthetic_rows(seed=0, n_documents=1, min_words=256, max_words=320, facts_per_document=6, questions_per_document=3)
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = small_config(
        workdir, datasets={"mine": {"source": "local", "local_path": "data/mine", "tasks": ["synthetic_qa"], "num_examples": 3}},
        models=set_model("path", "models/mycanary"), retentions=[0.5, 0.001],
    )
    previous = os.umask(0o022)
    try:
        result, output = run_with(workdir, config, "--cores", "2", name="local.yaml")
    finally:
        os.umask(previous)
    assert result.returncode == 0, output[-4000:]
    for output_file in ("results/tables/summary.csv", "results/tables/summary.md.manifest.json", "results/figures/quality_vs_retention.png"):
        assert (workdir / output_file).stat().st_mode & 0o777 == 0o644, output_file
    summary = pd.read_csv(workdir / "results/tables/summary.csv")
    snapkv = summary[summary["method"] == "snapkv"].set_index("retention")
    assert abs(snapkv.loc[0.5, "effective_retention"] - 0.5) < 0.02 and not snapkv.loc[0.5, "retention_off"]
    assert snapkv.loc[0.001, "retention_off"] and snapkv.loc[0.001, "truncated_share"] == 0
    kept = f"{round(100 * snapkv.loc[0.001, 'effective_retention'], 4):g}%"
    assert f"KV kept {kept}, asked 0.1%" in (workdir / "results/tables/summary.md").read_text()
    cell = "mine/synthetic_qa/canary/snapkv/question_aware/retention-0.001_batch-1_decode-1.log"
    for log in (f"logs/generate/{cell}", f"logs/score/{cell}", "logs/aggregate.log"):
        assert "measured other than asked: " in (workdir / log).read_text() and f"KV kept {kept}, asked 0.1%" in (workdir / log).read_text(), log

    def planned_after(change) -> dict:
        before = {path: (path.read_bytes(), path.stat()) for path in (data, workdir / "models/mycanary/model.safetensors")}
        change()
        result, output = run_with(workdir, config, "-n", name="local.yaml")
        for path, (content, stat) in before.items():  # put it back as it was, mtime included
            path.write_bytes(content)
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        assert result.returncode == 0, output[-3000:]
        return planned_jobs(output)

    assert planned_after(lambda: None) == {}  # nothing to do before an edit
    edited = rows[0] | {"answers": ["an answer edited in place"]}
    edit_data = lambda: data.write_text("".join(json.dumps(row) + "\n" for row in [edited, *rows[1:]]))  # noqa: E731
    after_data_edit = planned_after(edit_data)
    assert after_data_edit["download_dataset"] == 1 and after_data_edit["generate"] == 3 and after_data_edit["score"] == 3
    weights = workdir / "models/mycanary/model.safetensors"
    manifest = json.loads((workdir / f"results/predictions/{cell.removesuffix('.log')}.jsonl.manifest.json").read_text())
    assert manifest["params"]["model_sha256"]["models/mycanary/model.safetensors"] == hashlib.sha256(weights.read_bytes()).hexdigest()

    def older(path: Path, change) -> None:  # as `cp -p`, `tar x` and `rsync -a` leave a file: an older mtime
        stat = path.stat()
        change()
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns - 10**12))

    # by content, not mtime: other bytes with an older mtime rerun exactly their jobs; the same bytes, nothing
    assert planned_after(lambda: older(data, edit_data))["download_dataset"] == 1
    assert planned_after(lambda: weights.write_bytes(weights.read_bytes())) == {}  # replaced by an identical copy
    assert planned_after(lambda: data.write_text(data.read_text())) == {}

    def other_weights():
        content = bytearray(weights.read_bytes())
        content[-1] ^= 0x01  # the last byte of the last tensor: a different model that still loads
        weights.write_bytes(bytes(content))

    after_model_edit = planned_after(lambda: older(weights, other_weights))
    assert "download_dataset" not in after_model_edit and after_model_edit["generate"] == 3 and after_model_edit["aggregate"] == 1


def test_a_score_file_of_another_cell_is_refused_by_the_job_reading_it(tmp_path):
    from kvcache_bench.files import write_jsonl_atomic
    from kvcache_bench.manifest import ManifestMismatchError, require_made_with, verify_against_manifest, write_manifest

    scores = tmp_path / "scores.jsonl"
    write_jsonl_atomic(scores, [{"id": "r0", "score": 1.0}])
    write_manifest(scores, {"method": "snapkv", "retention": 0.25, "task": "qasper", "code": "abc"})
    manifest = verify_against_manifest(scores)
    require_made_with(scores, manifest, {"method": "snapkv", "retention": 0.25, "task": "qasper"})  # its own cell
    with pytest.raises(ManifestMismatchError) as refused:
        require_made_with(scores, manifest, {"method": "snapkv", "retention": 0.5, "task": "qasper"})
    assert f"{scores} was made under other settings than this job reads it for (retention: 0.25 there, 0.5 here)" in str(refused.value)
    assert f"`--forcerun {scores}` at its end" in str(refused.value)


# ------------------------------------------------------------------------------------------ 1. a pinned hub commit


def hub_cache_with(tmp_path: Path, repo: str, revisions: list[str]) -> Path:
    """A Hugging Face cache holding the canary as hub repository ``repo`` at each of ``revisions`` (the layout
    huggingface_hub writes: snapshots/<sha>/, refs/main), so from_pretrained reads it offline."""
    source = Path(__file__).resolve().parents[1] / "resources" / "canary"
    root = tmp_path / "hub" / f"models--{repo.replace('/', '--')}"
    for sha in revisions:
        snapshot = root / "snapshots" / sha
        snapshot.mkdir(parents=True)
        for file in source.iterdir():
            if file.is_file():
                (snapshot / file.name).write_bytes(file.read_bytes())
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(revisions[-1])
    return tmp_path / "hub"


def test_a_pinned_hub_commit_is_a_param_so_a_new_pin_reruns_its_cells(tmp_path):
    """A hub model pinned with models.<name>.revision loads that commit, its manifests record it, and a new pin
    plans that model's generate jobs again; with the pin unchanged nothing is planned."""
    workdir = copy_workflow(tmp_path / "workflow")
    first, second = "a" * 40, "b" * 40
    env = {"HF_HUB_CACHE": str(hub_cache_with(tmp_path, "kvbench/canary", [first, second])), "HF_HUB_OFFLINE": "1"}

    def pinned(revision):
        return small_config(workdir, models=lambda c: c["models"]["canary"].update(path="kvbench/canary", revision=revision))

    def run(config, *args):
        (workdir / "config/pinned.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        result = run_snakemake(workdir, *args, "--configfile", "config/pinned.yaml", env=env, timeout=900)
        return result, result.stdout + result.stderr

    result, output = run(pinned(first), "--cores", "2")
    assert result.returncode == 0, output[-3000:]
    [manifest] = (workdir / "results/predictions").rglob("retention-0.50*.jsonl.manifest.json")
    assert json.loads(manifest.read_text())["model_hub_revision"] == first
    _, unchanged = run(pinned(first), "-n")
    assert "Nothing to be done" in unchanged, unchanged[-2000:]
    _, repinned = run(pinned(second), "-n")
    assert dry_run_jobs(repinned, "generate") and "params" in repinned.lower(), repinned[-3000:]


def test_a_pin_on_a_folder_or_generated_data_is_refused(workdir):
    result, output = run_with(workdir, small_config(workdir, models=set_model("revision", "main")), "-n")
    assert result.returncode != 0 and "models.canary.revision 'main' pins a hub commit, but models.canary.path" in output
    config = small_config(workdir)
    config["datasets"]["synthetic"]["revision"] = "main"
    result, output = run_with(workdir, config, "-n")
    assert result.returncode != 0 and "datasets.synthetic.revision 'main' pins a hub commit, but the dataset's source is 'synthetic'" in output

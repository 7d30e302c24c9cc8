"""Readers verify what they read (issue 51): an output changed after its job wrote it is refused at parse, naming
the file, its sha256 recorded and now, and the --forcerun that remakes it; a table whose interval does not hold its
point is refused naming the file and the row, never drawn into matplotlib's "'yerr' must not contain negative
values"; and a job that can only refuse its input itself (a committed reference run's table) keeps what it made
before. The whole runs on the finished demo are in tests/test_rerun.py."""

from __future__ import annotations

import json
import math
import os
from base64 import urlsafe_b64encode

import pandas as pd
import pytest
from conftest import copy_workflow, run_snakemake

from kvcache_bench.analysis.verified import (
    TableIntervalError,
    interval_problems,
    read_summary,
    read_verified_csv,
    summary_interval_problem,
)
from kvcache_bench.files import write_jsonl_atomic
from kvcache_bench.manifest import ManifestMismatchError, verify_against_manifest, write_manifest
from kvcache_bench.study import changed_outputs as module
from kvcache_bench.study.changed_outputs import (
    OUTPUT_HASHES,
    Step,
    changed_outputs,
    changed_outputs_refusal,
    remade_by_this_run,
    runs_no_job_or_remakes_all,
    snakemake_marks_incomplete,
)


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """A workflow directory of its own: outputs under results/, the hash cache under .snakemake/."""
    monkeypatch.chdir(tmp_path)
    module._output_hashes.cache_clear()  # the cache is read once per process: this directory's, not another test's
    yield tmp_path
    module._output_hashes.cache_clear()


def _output(path: str, records: list[dict]) -> str:
    write_jsonl_atomic(path, records)
    write_manifest(path, {"cell": path})
    return path


STUDY = [
    Step(["results/data/d/t.jsonl"]),
    Step(["results/predictions/a.jsonl"], ["results/data/d/t.jsonl"]),
    Step(["results/predictions/b.jsonl"], ["results/data/d/t.jsonl"]),
    Step(["results/scores/a.jsonl"], ["results/predictions/a.jsonl"]),
    Step(["results/scores/b.jsonl"], ["results/predictions/b.jsonl"]),
    Step(
        ["results/tables/summary.csv", "results/tables/per_example.csv"],
        ["results/scores/a.jsonl", "results/scores/b.jsonl"],
    ),
]


def test_a_forced_file_exempts_what_is_made_from_it_and_its_jobs_other_outputs_not_what_it_is_made_from():
    remade = remade_by_this_run(STUDY, ["results/predictions/a.jsonl"])
    assert remade == {
        "results/predictions/a.jsonl",
        "results/scores/a.jsonl",
        "results/tables/summary.csv",
        "results/tables/per_example.csv",
    }
    # per_example.csv is summary.csv's sibling: forcing one remakes both (one aggregate job)
    assert remade_by_this_run(STUDY, ["./results/tables/per_example.csv"]) == {
        "results/tables/summary.csv",
        "results/tables/per_example.csv",
    }
    assert remade_by_this_run(list(reversed(STUDY)), ["results/data/d/t.jsonl"]) == {
        p for s in STUDY for p in s.outputs
    }


def test_an_edited_score_is_named_with_both_checksums_and_the_command_that_remakes_it(in_tmp):
    score = _output("results/scores/a.jsonl", [{"id": "x", "score": 0.5}, {"id": "y", "score": 1.0}])
    _output("results/scores/b.jsonl", [{"id": "x", "score": 0.0}])
    recorded = json.loads(open(f"{score}.manifest.json").read())["content"]["sha256"]
    assert changed_outputs(STUDY) == {}  # written by their jobs: nothing to say, nothing refused
    with open(score, "w") as handle:
        handle.write('{"id": "x", "score": 1.0}\n')  # one record left, and a better score
    refusal = changed_outputs_refusal(STUDY)
    assert "results/scores/a.jsonl is not the file its manifest describes" in refusal
    assert f"the manifest says 2 records, sha256 {recorded[:12]}, the file has 1 records, sha256 " in refusal
    assert "results/scores/b.jsonl" not in refusal
    assert refusal.endswith("`--forcerun results/scores/a.jsonl` at its end (after your targets and --configfile).")
    # the printed remedy, given back as --forcerun, is what lets the run start: the file and what it feeds are remade
    assert changed_outputs(STUDY, forced=["results/scores/a.jsonl"]) == {}
    assert changed_outputs(STUDY, forced=["results/predictions/a.jsonl"]) == {}
    assert "results/scores/a.jsonl" in changed_outputs(STUDY, forced=["results/scores/b.jsonl"])


def test_the_hash_is_kept_between_parses_and_an_edit_is_seen_through_it_even_with_its_mtime_set_back(
    in_tmp, monkeypatch
):
    """Each parse hashes every output the study reads: a file is read again only when its size, mtime, inode or
    ctime moved, so an unchanged study reads none of them twice; an edit in place of the same length whose mtime
    is set back (`touch -r`) is still seen, by its ctime."""
    score = _output("results/scores/a.jsonl", [{"id": "x", "score": 0.5}])
    assert changed_outputs(STUDY) == {}
    assert os.path.realpath(score) in json.loads(OUTPUT_HASHES.read_text())
    module._output_hashes.cache_clear()  # a new parse: the cache comes back from its file
    with monkeypatch.context() as patched:
        patched.setattr(module, "sha256_of", lambda path: pytest.fail(f"{path} was read again"))
        assert changed_outputs(STUDY) == {}
    stat = os.stat(score)
    with open(score, "r+") as handle:  # same inode, same size
        text = handle.read()
        handle.seek(0)
        handle.write(text.replace("0.5", "0.9"))
    os.utime(score, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert os.stat(score).st_size == stat.st_size and os.stat(score).st_mtime_ns == stat.st_mtime_ns
    module._output_hashes.cache_clear()
    assert list(changed_outputs(STUDY)) == [score]


def test_the_parse_and_the_score_job_describe_a_changed_file_in_the_same_words(in_tmp):
    score = _output("results/scores/a.jsonl", [{"id": "x", "score": 0.5}, {"id": "y", "score": 1.0}])
    with open(score, "a") as handle:
        handle.write('{"id": "z", "score": 1.0}\n')
    with pytest.raises(ManifestMismatchError) as in_the_job:
        verify_against_manifest(score)
    assert str(in_the_job.value).startswith(changed_outputs(STUDY)[score] + "; refusing to use it.")


def test_a_file_snakemake_marks_incomplete_is_left_to_it_and_a_lost_manifest_is_refused(in_tmp):
    score = _output("results/scores/a.jsonl", [{"id": "x", "score": 0.5}])
    with open(score, "a") as handle:
        handle.write('{"id": "y", "score": 1.0}\n')
    # a job killed between its file and its manifest: Snakemake's own marker says so, and Snakemake reruns it
    marker = in_tmp / ".snakemake" / "incomplete" / urlsafe_b64encode(score.encode()).decode()
    marker.parent.mkdir(parents=True)
    marker.write_text('{"external_jobid": null}')
    assert snakemake_marks_incomplete(score) and changed_outputs(STUDY) == {}
    marker.unlink()
    assert list(changed_outputs(STUDY)) == [score]
    # Snakemake reruns no job for a missing output nothing asks for (a manifest): the file would be read as it is
    os.remove(f"{score}.manifest.json")
    assert changed_outputs(STUDY)[score].startswith(f"{score} has no manifest ({score}.manifest.json)")
    os.remove(score)  # not made yet: Snakemake makes it
    assert changed_outputs(STUDY) == {}


def test_a_path_past_a_file_names_length_is_found_as_snakemake_cuts_its_marker(in_tmp):
    path = "results/scores/" + "x" * 300 + ".jsonl"
    encoded = urlsafe_b64encode(path.encode()).decode()
    marker = in_tmp.joinpath(".snakemake", "incomplete", "@" + encoded[:254], encoded[254:])
    marker.parent.mkdir(parents=True)
    marker.write_text("{}")
    assert snakemake_marks_incomplete(path)


def test_commands_that_run_no_job_or_remake_everything_are_not_refused():
    assert runs_no_job_or_remakes_all(["snakemake", "--unlock"]) and runs_no_job_or_remakes_all(["snakemake", "-F"])
    # listing what a run would redo must work while an output is changed: it is how a user finds out
    assert runs_no_job_or_remakes_all(["snakemake", "--summary"]) and runs_no_job_or_remakes_all(
        ["snakemake", "--lc", "params"]
    )
    assert not runs_no_job_or_remakes_all(["snakemake", "-n"])
    assert runs_no_job_or_remakes_all(["snakemake", "--delete-all-output", "--configfile", "config/demo.yaml"])
    assert not runs_no_job_or_remakes_all(["snakemake", "-n", "--cores", "2", "--configfile", "config/demo.yaml"])
    assert not runs_no_job_or_remakes_all(["snakemake", "--report", "results/report.html"])  # it shows the tables


SUMMARY = pd.DataFrame(
    {
        "task": ["qa", "qa", "qa"],
        "method": ["full_cache", "snapkv", "knorm"],
        "retention": [1.0, 0.5, 0.5],
        "score": [80.0, 60.0, math.nan],  # knorm: a cell with no example to score, all three empty
        "ci_low": [70.0, 50.0, math.nan],
        "ci_high": [90.0, 70.0, math.nan],
        "diff_vs_full": [math.nan, -20.0, math.nan],
        "diff_ci_low": [math.nan, -30.0, math.nan],
        "diff_ci_high": [math.nan, -10.0, math.nan],
    }
)


def test_every_interval_of_a_table_aggregate_writes_holds_its_point_and_empty_ones_pass():
    assert interval_problems(SUMMARY) == []


def test_a_point_outside_its_interval_or_a_value_that_is_no_number_is_named_by_row_and_cell():
    edited = SUMMARY.copy()
    edited.loc[1, "score"] = 95.0  # beyond ci_high 70: yerr would be negative, and matplotlib raised mid-job
    edited.loc[0, "ci_low"] = 85.0
    assert interval_problems(edited) == [
        "row 1 (task qa, method full_cache, retention 1.0): score 80 is outside its interval [85, 90]",
        "row 2 (task qa, method snapkv, retention 0.5): score 95 is outside its interval [50, 70]",
    ]
    typed = SUMMARY.astype({"diff_ci_high": object})
    typed.loc[1, "diff_ci_high"] = "ten"
    assert interval_problems(typed) == [
        "row 2 (task qa, method snapkv, retention 0.5): diff_ci_high is 'ten', not a number"
    ]


def test_a_figure_reading_an_edited_summary_is_refused_naming_the_file_before_it_draws(in_tmp):
    os.makedirs("results/tables")
    path = "results/tables/summary.csv"
    edited = SUMMARY.copy()
    edited.loc[1, "score"] = 95.0
    edited.to_csv(path, index=False)
    write_manifest(path, {"cells": []})  # a manifest that vouches for the edit (rewritten with it)
    with pytest.raises(TableIntervalError) as refused:
        read_summary(path)
    message = str(refused.value)
    assert message.startswith("results/tables/summary.csv cannot be drawn as it stands")
    assert "score 95 is outside its interval [50, 70]" in message
    assert "`--forcerun results/tables/summary.csv` at its end" in message
    assert summary_interval_problem(path).startswith("results/tables/summary.csv cannot be drawn as it stands")
    SUMMARY.to_csv(path, index=False)  # the right numbers, but not the bytes the manifest records
    with pytest.raises(
        ManifestMismatchError,
        match=r"summary.csv is not the file its manifest describes: the manifest says sha256 \w{12}, the file has sha256 \w{12}",
    ):
        read_summary(path)


def test_a_committed_reference_table_is_sent_back_to_git_not_to_a_forcerun_no_rule_could_run(in_tmp):
    os.makedirs("reference/run/tables")
    path = "reference/run/tables/summary.csv"
    SUMMARY.to_csv(path, index=False)
    write_manifest(path, {})
    assert len(read_verified_csv(path)) == 3
    with open(path, "a") as handle:
        handle.write("qa,snapkv,0.25,10,0,20,,,\n")
    with pytest.raises(ManifestMismatchError, match=r"`git checkout -- reference/run/tables/summary.csv`"):
        read_summary(path)


REFERENCE_RUN = "h200-reference-config"
FIGURE = f"results/reference/{REFERENCE_RUN}/figures/batch_size.png"


def test_a_reference_figure_job_refusing_an_edited_table_keeps_the_figure_it_had_made(tmp_path):
    """A committed run's table is checked by the figure job alone (no parse-time check reads reference/): Snakemake
    removes a job's outputs when it starts it, and the figure's outputs are update() outputs, so the refused job
    puts the finished figure back instead of losing it."""
    workflow = copy_workflow(tmp_path / "workflow", reference_runs=True)
    run_snakemake(workflow, FIGURE, "--cores", "1", check=True)
    made = {
        path: (workflow / path).read_bytes()
        for path in (FIGURE, FIGURE.replace(".png", ".svg"), f"{FIGURE}.manifest.json")
    }
    table = workflow / "reference" / REFERENCE_RUN / "tables" / "summary.csv"
    lines = table.read_text().splitlines(keepends=True)
    header = lines[0].rstrip("\n").split(",")
    row = lines[1].rstrip("\n").split(",")
    row[header.index("score")] = str(float(row[header.index("ci_high")]) + 50)  # beyond its interval
    table.write_text("".join([lines[0], ",".join(row) + "\n", *lines[2:]]))
    refused = run_snakemake(workflow, FIGURE, "--cores", "1")
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0
    log = (workflow / f"logs/reference/{REFERENCE_RUN}/figures/batch_size.log").read_text()
    assert f"reference/{REFERENCE_RUN}/tables/summary.csv is not the file its manifest describes" in log
    assert f"`git checkout -- reference/{REFERENCE_RUN}/tables/summary.csv`" in log
    assert "Restored previous version of" in output
    assert {path: (workflow / path).read_bytes() for path in made} == made

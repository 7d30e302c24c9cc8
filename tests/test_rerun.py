"""Editing the library's code reruns exactly the jobs that run the edited module (each rule's params carry a hash
of their syntax trees); editing a comment, a docstring or the formatting reruns nothing."""

from __future__ import annotations

import re
import shutil

import pytest
from conftest import REPO, planned_jobs, run_snakemake

from kvcache_bench.code_hash import package_code_hash, package_modules

FIGURE_RULES = {"figure_quality_vs_retention", "figure_paired_scatter", "figure_batch_size", "figure_question_change"}


def test_a_script_depends_on_the_modules_it_imports_and_theirs_lazy_ones_included():
    generate = package_modules(REPO / "scripts/generate.py", REPO / "kvcache_bench")
    assert {"kvcache_bench/engine/greedy.py", "kvcache_bench/engine/static_decode.py", "kvcache_bench/engine/decoders/decode_many.py", "kvcache_bench/methods/registry.py"} <= set(generate)
    assert {"kvcache_bench/engine/cell_runner.py", "kvcache_bench/engine/prefill.py", "kvcache_bench/engine/caches.py", "kvcache_bench/engine/loading.py"} <= set(generate)
    assert "kvcache_bench/analysis/figures/style.py" not in generate
    figure = package_modules(REPO / "scripts/figure_quality_vs_retention.py", REPO / "kvcache_bench")
    assert {"kvcache_bench/analysis/figures/quality_vs_retention.py", "kvcache_bench/analysis/figures/style.py"} <= set(figure)
    # one figure's module is not another's: editing it reruns that figure alone
    assert "kvcache_bench/analysis/figures/paired_scatter.py" not in figure
    assert "kvcache_bench/engine/greedy.py" not in figure


def test_no_script_runs_the_hashing_code_so_a_change_to_it_reruns_no_job():
    scripts = sorted((REPO / "scripts").glob("*.py"))
    assert len(scripts) > 30
    running_it = [s.name for s in scripts if "kvcache_bench/code_hash.py" in package_modules(s, REPO / "kvcache_bench")]
    assert not running_it


def _checkout_copy(tmp_path):
    copy = tmp_path / "checkout"
    shutil.copytree(REPO / "kvcache_bench", copy / "kvcache_bench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "scripts", copy / "scripts")
    return copy


def _hashes(copy):
    return {s: package_code_hash(copy / "scripts" / s, copy / "kvcache_bench") for s in ("generate.py", "score.py")}


def test_the_hash_changes_with_the_code_of_a_module_the_script_runs_and_only_then(tmp_path):
    copy = _checkout_copy(tmp_path)
    before = _hashes(copy)
    _append_code(copy / "kvcache_bench/engine/greedy.py")
    after = _hashes(copy)
    assert after["generate.py"] != before["generate.py"] and after["score.py"] == before["score.py"]


def test_comments_docstrings_and_formatting_leave_the_hash_alone(tmp_path):
    copy = _checkout_copy(tmp_path)
    before = _hashes(copy)
    _rewrite_without_changing_code(copy / "kvcache_bench/files.py")
    _rewrite_without_changing_code(copy / "kvcache_bench/engine/greedy.py")
    assert _hashes(copy) == before


def _fresh_process_caches():
    """What a new Snakemake process starts with: nothing parsed, the cache file not yet read."""
    from kvcache_bench import code_hash

    for cached in (code_hash._cache, code_hash._cache_file, code_hash._package_imports, code_hash.code_without_docstrings):
        cached.cache_clear()


def _all_hashes(copy):
    return {s.name: package_code_hash(s, copy / "kvcache_bench") for s in sorted((copy / "scripts").glob("*.py"))}


def test_the_cache_file_gives_the_hashes_parsing_gives_and_a_warm_one_parses_nothing(tmp_path, monkeypatch):
    import ast

    copy = _checkout_copy(tmp_path)
    monkeypatch.setenv("KVCACHE_BENCH_CODE_HASH_CACHE", "")
    _fresh_process_caches()
    parsed = _all_hashes(copy)  # no cache file: every module parsed, as before the cache existed
    monkeypatch.setenv("KVCACHE_BENCH_CODE_HASH_CACHE", str(tmp_path / "cache"))
    _fresh_process_caches()
    assert _all_hashes(copy) == parsed  # a cold cache: the same hashes, so no study reruns for the cache
    assert len(list((tmp_path / "cache").glob("code-hash-*.json"))) == 1
    _fresh_process_caches()
    with monkeypatch.context() as m:
        m.setattr(ast, "parse", lambda *a, **k: pytest.fail("a warm cache parsed a module"))
        assert _all_hashes(copy) == parsed
    # an edit after the cache was written is seen: the cache is keyed by the sources themselves
    _append_code(copy / "kvcache_bench/engine/greedy.py")
    _fresh_process_caches()
    edited = _all_hashes(copy)
    assert edited["generate.py"] != parsed["generate.py"] and edited["score.py"] == parsed["score.py"]
    _fresh_process_caches()
    monkeypatch.setenv("KVCACHE_BENCH_CODE_HASH_CACHE", "")
    assert _all_hashes(copy) == edited
    _fresh_process_caches()


def test_a_damaged_cache_file_costs_time_not_a_wrong_hash(tmp_path, monkeypatch):
    copy = _checkout_copy(tmp_path)
    monkeypatch.setenv("KVCACHE_BENCH_CODE_HASH_CACHE", str(tmp_path / "cache"))
    _fresh_process_caches()
    right = _all_hashes(copy)
    (cache_file,) = (tmp_path / "cache").glob("code-hash-*.json")
    cache_file.write_text('{"hashes": {"truncated')
    _fresh_process_caches()
    assert _all_hashes(copy) == right
    json_now = cache_file.read_text()
    assert json_now.startswith("{") and right["generate.py"] in json_now  # written whole again
    _fresh_process_caches()


def test_every_rule_with_a_script_carries_the_hash_of_that_scripts_modules():
    for smk in REPO.joinpath("rules").glob("*.smk"):
        for block in re.split(r"^(?=rule \w+:)", smk.read_text(), flags=re.M)[1:]:
            script = re.search(r'^    script:\n\s+"\.\./scripts/([\w.]+)"', block, flags=re.M)
            if script:
                # directly, or through the params block of every job that loads a model (rules/common.smk)
                carried = (f'code=package_code("{script.group(1)}")', f'**model_job_params("{script.group(1)}")')
                assert any(form in block for form in carried), block.splitlines()[0]


@pytest.fixture
def finished_demo(demo_run, tmp_path):
    """A private copy of the finished demo (outputs and Snakemake's records), free to edit."""
    copy = tmp_path / "demo"
    shutil.copytree(demo_run, copy, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    result = run_snakemake(copy, "-n", "--configfile", "config/demo.yaml", check=True)
    assert planned_jobs(result.stdout) == {}, result.stdout[-2000:]
    return copy


def _append_code(path):
    with open(path, "a") as handle:
        handle.write("\n_AN_EDIT_THAT_CHANGES_THE_CODE = True\n")


def _rewrite_without_changing_code(path):
    """A new module docstring, a function's docstring reworded, a comment, and code reformatted."""
    source = path.read_text()
    module_doc = re.match(r'\s*"""(.*?)"""', source, flags=re.S)
    assert module_doc, path
    source = source.replace(module_doc.group(1), "Reworded: " + module_doc.group(1), 1)
    function_doc = re.search(r'(def \w+\(.*?\).*?:\n\s+""")', source, flags=re.S)
    assert function_doc, path
    source = source.replace(function_doc.group(1), function_doc.group(1) + "Reworded. ", 1)
    source = source.replace("import os\n", "import os  # a comment\n\n\n", 1)
    path.write_text(source + "\n# a closing comment\n")


def test_a_docstring_comment_or_formatting_edit_plans_nothing(finished_demo):
    _rewrite_without_changing_code(finished_demo / "kvcache_bench/files.py")
    _rewrite_without_changing_code(finished_demo / "kvcache_bench/engine/greedy.py")
    result = run_snakemake(finished_demo, "-n", "--configfile", "config/demo.yaml", check=True)
    assert planned_jobs(result.stdout) == {}, result.stdout[-2000:]


def test_a_touched_or_checked_out_script_plans_nothing_and_a_real_edit_plans_its_rule(finished_demo):
    """Snakemake's own trigger for a `script:` rule is the script's mtime: a touch, a `git checkout` or a comment
    would rerun every generate job of a study. The profile leaves that trigger out and the params carry the
    script's syntax tree, so only a real edit reruns, and only its rule's jobs (and what reads them)."""
    import os
    import time

    later = time.time() + 60
    for script in (finished_demo / "scripts").glob("*.py"):
        os.utime(script, (later, later))  # as `touch scripts/*.py` an hour from now would leave them
    generate = finished_demo / "scripts/generate.py"
    generate.write_text(generate.read_text().replace('"""Snakemake adapter:', '"""Reworded. Snakemake adapter:', 1) + "\n# a comment\n")
    assert planned_jobs(run_snakemake(finished_demo, "-n", "--configfile", "config/demo.yaml", check=True).stdout) == {}
    _append_code(finished_demo / "scripts/score.py")
    jobs = planned_jobs(run_snakemake(finished_demo, "-n", "--configfile", "config/demo.yaml", check=True).stdout)
    assert jobs["score"] == 78 and "generate" not in jobs and "check_method" not in jobs


def test_an_engine_edit_plans_the_generate_jobs_again(finished_demo):
    _append_code(finished_demo / "kvcache_bench/engine/greedy.py")
    jobs = planned_jobs(run_snakemake(finished_demo, "-n", "--configfile", "config/demo.yaml", check=True).stdout)
    assert jobs["generate"] == 78
    assert "figure_quality_vs_retention" in jobs  # downstream of new predictions


def test_a_metric_edit_plans_the_scores_and_what_reads_them_and_nothing_upstream(finished_demo):
    _append_code(finished_demo / "kvcache_bench/analysis/metrics.py")
    jobs = planned_jobs(run_snakemake(finished_demo, "-n", "--configfile", "config/demo.yaml", check=True).stdout)
    assert jobs["score"] == 78
    assert set(jobs) == {"score", "aggregate", "ranking", "all"} | FIGURE_RULES


def test_a_plotting_edit_plans_only_the_figures_it_draws(finished_demo):
    _append_code(finished_demo / "kvcache_bench/analysis/figures/batch_size.py")
    jobs = planned_jobs(run_snakemake(finished_demo, "-n", "--configfile", "config/demo.yaml", check=True).stdout)
    assert set(jobs) == {"figure_batch_size", "all"}
    # what every figure shares: every figure, nothing upstream
    _append_code(finished_demo / "kvcache_bench/analysis/figures/style.py")
    jobs = planned_jobs(run_snakemake(finished_demo, "-n", "--configfile", "config/demo.yaml", check=True).stdout)
    assert set(jobs) == FIGURE_RULES | {"all"}


def test_another_study_in_the_same_results_leaves_every_cell_of_the_first_up_to_date(finished_demo):
    """Study A (the demo), then config B (two of its methods, one retention, one question mode, its keys written in
    another order) in the same directory, then A again: every check, prediction and score of A is still up to date,
    because each depends on its own settings only, whatever order a config file writes them in. Only the
    study-wide tables and figures, which B rewrote for its own cells, are made again."""
    import yaml

    demo = yaml.safe_load((finished_demo / "config/demo.yaml").read_text())
    other = {**demo, "methods": ["full_cache", "snapkv"], "retentions": [0.5], "question_modes": ["question_aware"]}
    (finished_demo / "config/other-study.yaml").write_text(yaml.safe_dump(other, sort_keys=True))
    b = run_snakemake(finished_demo, "--cores", "2", "--configfile", "config/other-study.yaml", check=True)
    tables = {"aggregate", "ranking", "all", "figure_quality_vs_retention", "figure_paired_scatter", "figure_batch_size"}
    assert set(planned_jobs(b.stdout + b.stderr)) == tables, (b.stdout + b.stderr)[-3000:]
    again = run_snakemake(finished_demo, "-n", "--configfile", "config/demo.yaml", check=True)
    assert set(planned_jobs(again.stdout)) == {"aggregate", "ranking", "all"} | FIGURE_RULES, again.stdout[-3000:]


def test_a_removed_prediction_is_named_with_the_command_that_remakes_it_and_its_table(finished_demo):
    """`rm` of a prediction (once this project's own remedy) left Snakemake 9 with "Nothing to be done" and the
    table listing a cell whose files were gone: now the run stops naming it, and the printed command remakes it."""
    cell = "results/predictions/synthetic/synthetic_qa/canary/snapkv/question_aware/retention-0.50_batch-1_decode-1.jsonl"
    table = (finished_demo / "results/tables/summary.csv").read_text()
    (finished_demo / cell).unlink()
    refused = run_snakemake(finished_demo, "-n", "--configfile", "config/demo.yaml")
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0
    assert f"{cell} is gone, but {cell.replace('predictions', 'scores', 1)}, made from it, remains" in output
    remedy = re.search(r"`--forcerun ([^`]+)`", output)
    assert remedy and remedy.group(1) == cell, output[-2000:]
    remade = run_snakemake(finished_demo, "--cores", "2", "--configfile", "config/demo.yaml", "--forcerun", cell)
    assert remade.returncode == 0, (remade.stdout + remade.stderr)[-3000:]
    jobs = planned_jobs(remade.stdout + remade.stderr)
    assert jobs["generate"] == 1 and jobs["score"] == 1 and jobs["aggregate"] == 1, jobs
    assert (finished_demo / cell).exists() and (finished_demo / "results/tables/summary.csv").read_text() == table


def test_a_cell_added_to_a_finished_study_is_no_file_gone(finished_demo):
    import yaml

    demo = yaml.safe_load((finished_demo / "config/demo.yaml").read_text())
    (finished_demo / "config/more.yaml").write_text(yaml.safe_dump({**demo, "retentions": [*demo["retentions"], 0.75]}))
    planned = run_snakemake(finished_demo, "-n", "--configfile", "config/more.yaml")
    assert planned.returncode == 0, (planned.stdout + planned.stderr)[-3000:]
    assert "is gone" not in planned.stdout + planned.stderr


def test_a_clone_given_the_same_studys_results_is_not_refused(demo_run, tmp_path):
    """The shared-results check holds data, predictions (weights' hash included) and the table to this config's
    settings, each read from the rule that makes it: the same study's files, made in another directory, pass."""
    from conftest import copy_workflow

    clone = copy_workflow(tmp_path / "clone")
    shutil.copytree(demo_run / "results", clone / "results")
    planned = run_snakemake(clone, "-n", "--configfile", "config/demo.yaml")
    output = planned.stdout + planned.stderr
    assert planned.returncode == 0 and "another study's files" not in output, output[-3000:]
    assert "Nothing to be done" in output


# ------------------------------------------------------------------ issue 51: readers verify what they read

SNAPKV_SCORES = "results/scores/synthetic/synthetic_qa/canary/snapkv/question_aware/retention-0.50_batch-1_decode-1.jsonl"


def _finished_outputs(workdir):
    """Every table and figure of the finished demo, with its bytes: what a refusal must leave as it was."""
    paths = sorted((workdir / "results/tables").glob("*")) + sorted((workdir / "results/figures").glob("*"))
    assert len(paths) > 15, paths
    return {path.relative_to(workdir).as_posix(): path.read_bytes() for path in paths}


def _edit_summary(workdir, row_index, score):
    """One row's score changed in summary.csv, as a hand edit in an editor or a spreadsheet would."""
    import csv
    import io

    path = workdir / "results/tables/summary.csv"
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    row = rows[row_index]
    row["score"] = score(row)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    path.write_text(out.getvalue())
    return row


def _first_row_with_an_interval(workdir):
    import pandas as pd

    summary = pd.read_csv(workdir / "results/tables/summary.csv")
    return int(summary.index[summary["ci_low"] < summary["ci_high"]][0])


def _refusal_at_parse(result):
    """The run's output, having checked that it stopped before Snakemake built its DAG or ran a job."""
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    assert "Building DAG of jobs" not in output and "Finished job" not in output, output[-3000:]
    return output


def test_a_hand_edited_summary_is_refused_before_any_job_and_the_printed_remedy_remakes_the_tables(finished_demo):
    """Issue 51: a number edited in summary.csv was ranked and drawn as it stood (exit 0) while summary.md, made from
    the scores, disagreed. Now the next run stops at parse, every finished output untouched, naming the file, its
    sha256 recorded and now, and the --forcerun that remakes it; that command, run as printed, remakes the table
    from the scores, and summary.md and ranking.md agree with it again."""
    import hashlib
    import json

    summary = finished_demo / "results/tables/summary.csv"
    original = summary.read_text()
    recorded = json.loads((finished_demo / "results/tables/summary.csv.manifest.json").read_text())["content"]["sha256"]
    row = _first_row_with_an_interval(finished_demo)
    _edit_summary(finished_demo, row, lambda r: f"{(float(r['ci_low']) + float(r['ci_high'])) / 2 + 0.01:.2f}")
    now = hashlib.sha256(summary.read_bytes()).hexdigest()
    finished = _finished_outputs(finished_demo)
    output = _refusal_at_parse(run_snakemake(finished_demo, "--cores", "2", "--configfile", "config/demo.yaml"))
    assert (
        f"results/tables/summary.csv is not the file its manifest describes: the manifest says sha256 {recorded[:12]}, "
        f"the file has sha256 {now[:12]}" in output
    ), output[-3000:]
    assert "stopped before any job, so no finished output is removed" in output
    assert _finished_outputs(finished_demo) == finished  # nothing removed, nothing remade from the edit
    remedy = re.search(r"`--forcerun ([^`]+)`", output).group(1).split()
    assert remedy == ["results/tables/summary.csv"]
    remade = run_snakemake(finished_demo, "--cores", "2", "--configfile", "config/demo.yaml", "--forcerun", *remedy)
    assert remade.returncode == 0, (remade.stdout + remade.stderr)[-3000:]
    jobs = planned_jobs(remade.stdout + remade.stderr)
    assert jobs["aggregate"] == 1 and jobs["ranking"] == 1 and "score" not in jobs and "generate" not in jobs, jobs
    assert summary.read_text() == original
    assert _finished_outputs(finished_demo).keys() == finished.keys()


def test_a_hand_edited_score_file_is_refused_and_every_table_stays(finished_demo):
    """Issue 51: the aggregate job refused a hand-edited score file, but Snakemake had removed its outputs when it
    started it, so the finished summary.csv, summary.md and per_example.csv were gone. Refused at parse, they stay;
    the printed --forcerun plans that cell's score and the tables, nothing upstream."""
    score = finished_demo / SNAPKV_SCORES
    records = score.read_text().splitlines(keepends=True)
    records[0] = records[0].replace('"score": ', '"score": 1.0, "was": ', 1)  # a better score typed in
    score.write_text("".join(records))
    finished = _finished_outputs(finished_demo)
    output = _refusal_at_parse(run_snakemake(finished_demo, "--cores", "2", "--configfile", "config/demo.yaml"))
    assert f"{SNAPKV_SCORES} is not the file its manifest describes" in output, output[-3000:]
    assert f"`--forcerun {SNAPKV_SCORES}` at its end" in output
    assert _finished_outputs(finished_demo) == finished
    for table in ("summary.csv", "summary.md", "per_example.csv"):
        assert (finished_demo / "results/tables" / table).exists()
    remedy = re.search(r"`--forcerun ([^`]+)`", output).group(1).split()
    planned = run_snakemake(finished_demo, "-n", "--configfile", "config/demo.yaml", "--forcerun", *remedy, check=True)
    jobs = planned_jobs(planned.stdout)
    assert jobs["score"] == 1 and jobs["aggregate"] == 1 and "generate" not in jobs, jobs


def test_an_interval_that_does_not_hold_its_point_is_refused_naming_the_file(finished_demo):
    """Issue 51: a score edited beyond its interval crashed the figure job in matplotlib ("'yerr' must not contain
    negative values") and cost quality_vs_retention.png/.svg. Refused at parse, naming the file: by its checksum;
    and, were the manifest rewritten to match the edit, by the interval itself, naming the row."""
    import hashlib
    import json

    row = _first_row_with_an_interval(finished_demo)
    edited = _edit_summary(finished_demo, row, lambda r: f"{float(r['ci_high']) + 10:.2f}")
    finished = _finished_outputs(finished_demo)
    output = _refusal_at_parse(run_snakemake(finished_demo, "--cores", "2", "--configfile", "config/demo.yaml"))
    assert "results/tables/summary.csv is not the file its manifest describes" in output, output[-3000:]
    assert "yerr" not in output and _finished_outputs(finished_demo) == finished
    manifest = finished_demo / "results/tables/summary.csv.manifest.json"
    facts = json.loads(manifest.read_text())
    facts["content"]["sha256"] = hashlib.sha256((finished_demo / "results/tables/summary.csv").read_bytes()).hexdigest()
    manifest.write_text(json.dumps(facts))
    output = _refusal_at_parse(run_snakemake(finished_demo, "--cores", "2", "--configfile", "config/demo.yaml"))
    assert "results/tables/summary.csv cannot be drawn as it stands" in output, output[-3000:]
    assert (
        f"row {row + 1} (task synthetic_qa, model canary, method {edited['method']}, question_mode "
        f"{edited['question_mode']}, retention {float(edited['retention'])}" in output
    )
    assert f"score {float(edited['score']):g} is outside its interval [{float(edited['ci_low']):g}, {float(edited['ci_high']):g}]" in output
    assert "`--forcerun results/tables/summary.csv`" in output
    assert (finished_demo / "results/figures/quality_vs_retention.png").exists()

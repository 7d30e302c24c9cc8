"""The pipeline as users drive it: dry runs, the demo end to end, refused targets, one-figure rebuilds."""

from __future__ import annotations

import json

import pandas as pd
import yaml
from conftest import FAKE_HF_TOKEN, planned_jobs, run_snakemake, write_config

PIPELINE_RULES = {
    "check_method", "generate", "score", "aggregate", "figure_quality_vs_retention", "all",
}


def test_demo_dry_run_plans_every_stage(workflow_copy):
    result = run_snakemake(workflow_copy, "-n", "--configfile", "config/demo.yaml")
    assert result.returncode == 0, result.stderr
    jobs = planned_jobs(result.stdout)
    assert PIPELINE_RULES | {"make_synthetic_dataset"} <= set(jobs)
    assert "build_demo_model" not in jobs  # the canary is committed
    # (full cache at batch 1 and 4 + 8 presses x 3 retentions) x 3 question modes
    assert jobs["generate"] == 78 and jobs["score"] == 78
    assert jobs["figure_question_change"] == 1


def test_a_model_with_a_build_recipe_is_built_before_it_is_used(workflow_copy):
    result = run_snakemake(workflow_copy, "-n", "--configfile", "config/demo-random.yaml")
    assert result.returncode == 0, result.stderr
    jobs = planned_jobs(result.stdout)
    assert jobs["build_demo_model"] == 1 and jobs["generate"] == 26
    assert "results/models/demo-tiny-llama" in result.stdout


def test_real_study_dry_run_plans_full_study(workflow_copy):
    result = run_snakemake(workflow_copy, "-n")
    assert result.returncode == 0, result.stderr
    jobs = planned_jobs(result.stdout)
    assert PIPELINE_RULES | {"download_dataset"} <= set(jobs)
    assert jobs["generate"] == 26
    assert "build_demo_model" not in jobs  # the real study loads hub weights; it builds nothing
    # the study decodes 32 compressed caches together by default; the padded-prefill cells decode alone
    assert "results/predictions/longbench/qasper/llama-3.1-8b-instruct/snapkv/question_aware/retention-0.10_batch-1_decode-32.jsonl" in result.stdout
    assert "llama-3.1-8b-instruct/full_cache/question_aware/retention-1.00_batch-4_decode-1.jsonl" in result.stdout
    assert "_batch-1_decode-1.jsonl" not in result.stdout


def test_unknown_config_key_fails_naming_the_key(workflow_copy):
    write_config(workflow_copy, "config/demo.yaml", "typo.yaml", retention=[0.5])
    result = run_snakemake(workflow_copy, "-n", "--configfile", "config/typo.yaml")
    assert result.returncode != 0
    assert "'retention' was unexpected" in result.stdout + result.stderr


def test_unknown_method_fails_naming_the_closest_one(workflow_copy):
    write_config(workflow_copy, "config/demo.yaml", "bad_method.yaml", methods=["full_cache", "snapkvv"])
    result = run_snakemake(workflow_copy, "-n", "--configfile", "config/bad_method.yaml")
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "methods names 'snapkvv', which is no method; did you mean 'snapkv'?" in output


def test_eviction_with_batching_is_refused_before_any_job_and_listed_while_valid_targets_complete(workflow_copy):
    config = write_config(
        workflow_copy, "config/demo.yaml", "batched.yaml",
        methods=["full_cache", "snapkv"], retentions=[0.5], batch_sizes=[1, 4], question_modes=["question_aware"],
    )
    data = yaml.safe_load(config.read_text())
    data["datasets"]["synthetic"]["num_examples"] = 4
    config.write_text(yaml.safe_dump(data))

    result = run_snakemake(workflow_copy, "--cores", "2", "--configfile", "config/batched.yaml")
    # the refused cell keeps none of the study's tables and figures from being made
    assert result.returncode == 0, result.stderr[-3000:]
    refused = "synthetic/synthetic_qa/canary/snapkv/question_aware/retention-0.50_batch-4_decode-1"
    assert f"refused target {refused}, not run" in result.stderr and "padding collapse" in result.stderr
    predictions = workflow_copy / "results/predictions/synthetic/synthetic_qa/canary"
    assert not (predictions / "snapkv/question_aware/retention-0.50_batch-4_decode-1.jsonl").exists()
    assert (predictions / "full_cache/question_aware/retention-1.00_batch-4_decode-1.jsonl").exists()
    assert (predictions / "snapkv/question_aware/retention-0.50_batch-1_decode-1.jsonl").exists()
    summary = pd.read_csv(workflow_copy / "results/tables/summary.csv")
    assert not ((summary["method"] == "snapkv") & (summary["batch_size"] == 4)).any()
    assert set(summary["batch_size"][summary["method"] == "full_cache"]) == {1, 4}
    markdown = (workflow_copy / "results/tables/summary.md").read_text()
    assert "## Not run: 1 cell(s)" in markdown and f"`{refused}`" in markdown and "padding collapse" in markdown
    assert (workflow_copy / "results/figures/quality_vs_retention.png").exists()


def test_demo_end_to_end_produces_table_and_figure(demo_run):
    summary = pd.read_csv(demo_run / "results/tables/summary.csv")
    assert len(summary) == 78 and set(summary["question_mode"]) == {"question_aware", "question_agnostic", "other_question"}
    assert (summary["n"] == 18).all() and not summary["incomplete"].any()
    assert summary["score"].between(0, 100).all()
    for figure in ("quality_vs_retention.png", "quality_vs_retention.svg"):
        assert (demo_run / "results/figures" / figure).stat().st_size > 10_000
    predictions = (demo_run / "results/predictions/synthetic/synthetic_qa/canary/snapkv/question_aware/retention-0.25_batch-1_decode-1.jsonl").read_text().splitlines()
    record = json.loads(predictions[0])
    assert {"id", "prediction", "references", "prompt_tokens", "kept_tokens", "truncated", "seconds"} <= set(record)
    assert 0.2 < record["effective_retention"] < 0.3


def test_every_figure_the_demo_draws_keeps_the_layout_rules(demo_run):
    """No text over text, none off the figure, none under 8 pt, at most 2,400 px wide: measured by matplotlib's
    renderer when the figure was saved (kvcache_bench/analysis/layout.py), recorded in its manifest."""
    from matplotlib.image import imread

    figures = sorted((demo_run / "results/figures").rglob("*.png"))
    assert {p.stem for p in figures} >= {"quality_vs_retention", "paired_scatter", "batch_size", "question_change"}
    for png in figures:
        layout = json.loads(png.with_name(png.name + ".manifest.json").read_text())["layout"]
        assert layout["problems"] == [], (png.name, layout["problems"])
        height, width = imread(png).shape[:2]
        assert (layout["width_px"], layout["height_px"]) == (width, height) and width <= 2400, png.name
    # the demo's full cache scores 100 on every example: its paired scatter is that sentence, not 24 columns of points
    assert json.loads((demo_run / "results/figures/paired_scatter.png.manifest.json").read_text())["layout"]["height_px"] < 400


def test_every_output_carries_a_manifest(demo_run):
    results = demo_run / "results"
    outputs = [p for p in results.rglob("*") if p.is_file() and p.suffix in {".jsonl", ".csv", ".png"}]
    assert outputs
    for output in outputs:
        manifest = json.loads(output.with_name(output.name + ".manifest.json").read_text())
        assert {"git_commit", "config_hash", "packages", "device", "seed"} <= set(manifest)
        assert manifest["packages"]["python"]
        # the host's processor and allotted cores: one-at-a-time decoding runs at the host's speed
        assert manifest["device"]["cpu_model"] and manifest["device"]["cpu_cores"] >= 1


def test_models_load_without_remote_code_and_token_never_written(demo_run):
    manifest = json.loads(next((demo_run / "results/predictions").rglob("*.manifest.json")).read_text())
    assert manifest["params"]["model_settings"]["trust_remote_code"] is False
    for path in [*demo_run.joinpath("results").rglob("*"), *demo_run.joinpath("logs").rglob("*"), *demo_run.joinpath(".snakemake/log").rglob("*")]:
        if path.is_file():
            assert FAKE_HF_TOKEN not in path.read_bytes().decode(errors="ignore"), path


def test_the_all_methods_demo_plans_every_method_that_runs_offline(workflow_copy):
    """config/demo-all-methods.yaml: every built-in method but those its comment leaves out, each for a reason the
    check gives (hub data, compressing while decoding, failing in kvpress, a cache longer than its prompt)."""
    from kvcache_bench.methods.catalogue import DECODING
    from kvcache_bench.methods.registry import METHODS

    config = yaml.safe_load((workflow_copy / "config/demo-all-methods.yaml").read_text())
    refused_as_measured = {"finch": "fails without a delimiter token", "kvcompose_unstructured": "a cache twice its prompt"}
    offline = [name for name, spec in METHODS.items()
               if spec.hub_data is None and spec.family != DECODING and name not in refused_as_measured]
    assert config["methods"] == offline and len(offline) >= 35
    result = run_snakemake(workflow_copy, "-n", "--configfile", "config/demo-all-methods.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "refused target" not in result.stderr
    jobs = planned_jobs(result.stdout)
    assert jobs["generate"] == jobs["score"] == jobs["check_method"] == len(offline)
    assert jobs["ranking"] == 1 and jobs["figure_quality_vs_retention"] == 1
    assert jobs["figure_quality_by_family"] == 1  # past eight methods, the appendix draws every one by family


def test_a_decoding_press_runs_with_a_budget_its_answers_reach_and_is_refused_at_kvpress_defaults(workflow_copy):
    """decoding_tova at kvpress's defaults is refused before any job (the package ships its default budget);
    decoding_streaming_llm with the same budget in method_kwargs is refused by its check job, which only then knows
    it. Neither keeps the other cells' tables from being made, and both are listed with why."""
    config = write_config(
        workflow_copy, "config/demo.yaml", "decoding.yaml",
        methods=["full_cache", "decoding_knorm", "decoding_tova", "decoding_streaming_llm"],
        retentions=[0.5], question_modes=["question_aware"], decode_batch_sizes=[2],
        method_kwargs={"decoding_knorm": {"compression_interval": 4, "target_size": 32, "hidden_states_buffer_size": 4},
                       "decoding_streaming_llm": {"compression_interval": 512, "target_size": 2048}},
    )
    data = yaml.safe_load(config.read_text())
    data["datasets"]["synthetic"]["num_examples"] = 2
    config.write_text(yaml.safe_dump(data))

    result = run_snakemake(workflow_copy, "--cores", "2", "--configfile", "config/decoding.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    before_any_job = "synthetic/synthetic_qa/canary/decoding_tova/question_aware/retention-1.00_batch-1_decode-2"
    assert f"refused target {before_any_job}, not run" in result.stderr
    by_its_check = "synthetic/synthetic_qa/canary/decoding_streaming_llm/question_aware/retention-1.00_batch-1_decode-2"
    log = (workflow_copy / "logs/generate" / f"{by_its_check}.log").read_text()  # judged by its own job
    assert "method_kwargs.decoding_streaming_llm.compression_interval = 512" in log
    not_run = json.loads((workflow_copy / f"results/predictions/{by_its_check}.jsonl.manifest.json").read_text())
    assert not_run["records"] == 0 and "compression_interval = 512" in not_run["not_run"][0]
    markdown = (workflow_copy / "results/tables/summary.md").read_text()
    assert "## Not run: 2 cell(s)" in markdown and f"`{before_any_job}`" in markdown and f"`{by_its_check}`" in markdown
    summary = pd.read_csv(workflow_copy / "results/tables/summary.csv")
    assert set(summary["method"]) == {"full_cache", "decoding_knorm"}
    ran = workflow_copy / "results/predictions/synthetic/synthetic_qa/canary/decoding_knorm/question_aware/retention-1.00_batch-1_decode-2.jsonl"
    records = [json.loads(line) for line in ran.read_text().splitlines()]
    assert len(records) == 2 and all(r["compressed_while_decoding"] for r in records)
    assert all(r["kept_tokens"] < r["pressed_tokens"] == r["prompt_tokens"] + r["generated_tokens"] - 1 for r in records)
    assert all(r["effective_decode_batch_size"] == 1 and "compresses while decoding" in r["decode_fallback"] for r in records)


def test_a_dry_run_says_what_a_masking_press_will_do_before_any_job(workflow_copy):
    """kvzip at decode batch 4: a dry run says it cannot run in the other-question mode (from the properties the
    package ships), so nobody learns it ten minutes into a GPU run; its question-aware and question-agnostic cells
    decode together like any other press's, with no note."""
    write_config(
        workflow_copy, "config/demo.yaml", "kvzip.yaml", methods=["full_cache", "kvzip"], retentions=[0.5],
        decode_batch_sizes=[4], question_modes=["question_aware", "question_agnostic", "other_question"],
    )
    result = run_snakemake(workflow_copy, "-n", "--configfile", "config/kvzip.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    assert not [line for line in result.stderr.splitlines() if line.startswith("note: kvzip")]
    refused = "synthetic/synthetic_qa/canary/kvzip/other_question/retention-0.50_batch-1_decode-4"
    assert f"refused target {refused}, not run" in result.stderr and "masks slots per head" in result.stderr
    # the full cache at batch 1 and 4 in the three modes, and kvzip question-aware and question-agnostic
    assert planned_jobs(result.stdout)["generate"] == 8


def test_a_highlighted_method_that_is_no_method_is_refused_naming_the_closest(workflow_copy):
    write_config(workflow_copy, "config/demo.yaml", "typo.yaml", figures={"highlight": ["snapkvv"]})
    result = run_snakemake(workflow_copy, "-n", "--configfile", "config/typo.yaml")
    assert result.returncode != 0
    assert "figures.highlight names 'snapkvv', which is no method; did you mean 'snapkv'?" in result.stdout + result.stderr

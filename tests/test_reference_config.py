"""config/reference-h200.yaml: the README's performance table is one `snakemake` run's output, kvpress's own
pipeline and this engine are two cells of that study, and the floor is a rule over the run's measured rates."""

import csv
import json
import shutil

import pytest
import yaml
from conftest import planned_jobs, run_snakemake

from kvcache_bench.files import read_jsonl

CELLS = "results/predictions/synthetic/synthetic_qa/{model}/snapkv/question_aware/retention-0.50_batch-1_decode-{decode}.jsonl"


def test_the_reference_config_plans_the_model_both_engines_the_rates_and_the_table(workflow_copy):
    result = run_snakemake(workflow_copy, "-n", "--configfile", "config/reference-h200.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = planned_jobs(result.stdout)
    # one random-init 8B build shared by both engines; kvpress's pipeline at decode 1, this engine at 1 and 32 on
    # transformers' modules and on Liger's fused kernels
    assert (jobs["build_shaped_model"], jobs["generate"], jobs["measure_hardware_rates"], jobs["engine_comparison"]) == (1, 5, 1, 1)
    assert "llama-3.1-8b-shape-random-liger/snapkv/question_aware/retention-0.50_batch-1_decode-32.jsonl" in result.stdout
    assert "llama-3.1-8b-shape-random-kvpress-pipeline/snapkv/question_aware/retention-0.50_batch-1_decode-1.jsonl" in result.stdout
    assert "llama-3.1-8b-shape-random-kvpress-pipeline/snapkv/question_aware/retention-0.50_batch-1_decode-32" not in result.stdout


def test_the_reference_perf_pass_times_this_engine_on_the_8b_shape_at_4k_and_16k(workflow_copy):
    result = run_snakemake(workflow_copy, "-n", "perf_all", "--configfile", "config/reference-h200.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    # 2 contexts x (full cache + 3 presses x 2 retentions), on each model this engine runs: transformers' kernels (what
    # the retired git show 4c1522f:tools/gpu/perf_h200.py measured) and Liger's
    assert planned_jobs(result.stdout)["perf"] == 28
    assert "/synthetic_qa/llama-3.1-8b-shape-random-liger/knorm/context-16384/" in result.stdout
    assert "/synthetic_qa/llama-3.1-8b-shape-random/knorm/context-16384/" in result.stdout and "kvpress-pipeline/knorm" not in result.stdout


def tiny_reference_config(workdir):
    """The reference study at toy size on a CPU: the same cells, engines and rules, a tiny Llama-3.1 shape."""
    config = yaml.safe_load((workdir / "config/reference-h200.yaml").read_text())
    ours, theirs = config["models"]["llama-3.1-8b-shape-random"], config["models"]["llama-3.1-8b-shape-random-kvpress-pipeline"]
    for model in (ours, theirs):
        model.update(dtype="float32", max_context_tokens=2048, path="results/models/tiny-random")
    ours["build"] = {"shape": "llama-3.1-tiny", "seed": 0}
    config["models"] = {"tiny-random": ours, "tiny-random-kvpress": theirs}
    config["datasets"]["synthetic"].update(
        num_examples=3, synthetic={"n_documents": 3, "min_words": 150, "max_words": 250, "facts_per_document": 2, "questions_per_document": 1}
    )
    config["decode_batch_sizes"] = [1, 3]
    config["generation"] = {"max_new_tokens": {"synthetic_qa": 8}, "device": "cpu", "threads": 1}
    config["perf"]["engine_comparison"]["rates"] = {"copy_bytes": 1 << 20, "matmul_size": 64, "repeats": 3}
    config["perf"]["context_lengths"] = [256]
    path = workdir / "config" / "tiny-reference.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.mark.slow
def test_the_reference_study_at_toy_size_makes_the_table_from_its_own_cells(workflow_copy, llama3_tokenizer_dir):
    shutil.copytree(llama3_tokenizer_dir, workflow_copy / "results/tokenizers/llama-3.1")  # made once per session
    config = tiny_reference_config(workflow_copy)
    run_snakemake(workflow_copy, "--cores", "2", "results/tables/engine_comparison.md", "--configfile", str(config), check=True)

    table = list(csv.DictReader((workflow_copy / "results/tables/engine_comparison.csv").open()))
    assert [(row["path"], row["decode_batch_size"]) for row in table] == [
        ("kvpress_pipeline", "1"), ("kvcache_bench", "1"), ("kvcache_bench", "3"), ("floor", "1"), ("floor", "3")
    ]
    theirs = read_jsonl(workflow_copy / CELLS.format(model="tiny-random-kvpress", decode=1))
    ours = read_jsonl(workflow_copy / CELLS.format(model="tiny-random", decode=1))
    assert {r["engine"] for r in theirs} == {"kvpress_pipeline"} and "engine" not in ours[0]
    # examples/s are the cells' own records: examples over the sum of their seconds
    assert float(table[0]["examples_per_s"]) == pytest.approx(len(theirs) / sum(r["seconds"] for r in theirs))
    assert float(table[1]["examples_per_s"]) == pytest.approx(len(ours) / sum(r["seconds"] for r in ours))
    assert float(table[0]["vs_kvpress_pipeline"]) == 1.0
    assert all(float(floor["examples_per_s"]) > float(row["examples_per_s"]) for floor in table[3:] for row in table[:3])
    # fp32, question-aware: kvpress's pipeline and this engine give the same answers from the same kept cache
    assert [r["prediction"] for r in theirs] == [r["prediction"] for r in ours]
    assert [r["kept_tokens"] for r in theirs] == [r["kept_tokens"] for r in ours]
    rates = json.loads((workflow_copy / "results/perf/hardware_rates.json").read_text())
    assert rates["device"] == "cpu" and rates["copy_bytes_per_s"] > 0
    assert (workflow_copy / "results/tables/engine_comparison.md.manifest.json").exists()

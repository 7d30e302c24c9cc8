"""Editing the library reruns exactly the jobs that run the edited module (each rule's params carry a hash of them)."""

from __future__ import annotations

import re
import shutil

import pytest
from conftest import REPO, planned_jobs, run_snakemake

from kvcache_bench.workflow import package_code_hash, package_modules

FIGURE_RULES = {"figure_quality_vs_retention", "figure_paired_scatter", "figure_batch_size"}


def test_a_script_depends_on_the_modules_it_imports_and_theirs_lazy_ones_included():
    generate = package_modules(REPO / "scripts/generate.py", REPO / "kvcache_bench")
    assert {"kvcache_bench/generation/single_decode.py", "kvcache_bench/generation/batched_decode.py", "kvcache_bench/methods/registry.py"} <= set(generate)
    assert {"kvcache_bench/generation/cell_runner.py", "kvcache_bench/generation/prefill.py", "kvcache_bench/generation/caches.py", "kvcache_bench/generation/loading.py"} <= set(generate)
    assert "kvcache_bench/analysis/plots.py" not in generate
    figure = package_modules(REPO / "scripts/figure_quality_vs_retention.py", REPO / "kvcache_bench")
    assert "kvcache_bench/analysis/plots.py" in figure and "kvcache_bench/generation/single_decode.py" not in figure


def test_the_hash_changes_with_a_module_the_script_runs_and_only_then(tmp_path):
    copy = tmp_path / "checkout"
    shutil.copytree(REPO / "kvcache_bench", copy / "kvcache_bench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "scripts", copy / "scripts")
    before = {s: package_code_hash(copy / "scripts" / s, copy / "kvcache_bench") for s in ("generate.py", "score.py")}
    with open(copy / "kvcache_bench/generation/single_decode.py", "a") as handle:
        handle.write("\n# an edit\n")
    after = {s: package_code_hash(copy / "scripts" / s, copy / "kvcache_bench") for s in ("generate.py", "score.py")}
    assert after["generate.py"] != before["generate.py"] and after["score.py"] == before["score.py"]


def test_every_rule_with_a_script_carries_the_hash_of_that_scripts_modules():
    for smk in REPO.joinpath("rules").glob("*.smk"):
        for block in re.split(r"^(?=rule \w+:)", smk.read_text(), flags=re.M)[1:]:
            script = re.search(r'^    script:\n\s+"\.\./scripts/([\w.]+)"', block, flags=re.M)
            if script:
                assert f'code=package_code("{script.group(1)}")' in block, block.splitlines()[0]


@pytest.fixture
def finished_demo(demo_run, tmp_path):
    """A private copy of the finished demo (outputs and Snakemake's records), free to edit."""
    copy = tmp_path / "demo"
    shutil.copytree(demo_run, copy, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    result = run_snakemake(copy, "-n", "--configfile", "config/demo.yaml", check=True)
    assert planned_jobs(result.stdout) == {}, result.stdout[-2000:]
    return copy


def _append_comment(path):
    with open(path, "a") as handle:
        handle.write("\n# an edit that changes no behaviour, but Snakemake cannot know that\n")


def test_an_engine_edit_plans_the_generate_jobs_again(finished_demo):
    _append_comment(finished_demo / "kvcache_bench/generation/single_decode.py")
    jobs = planned_jobs(run_snakemake(finished_demo, "-n", "--configfile", "config/demo.yaml", check=True).stdout)
    assert jobs["generate"] == 78
    assert "figure_quality_vs_retention" in jobs  # downstream of new predictions


def test_a_plotting_edit_plans_only_the_figures(finished_demo):
    _append_comment(finished_demo / "kvcache_bench/analysis/plots.py")
    jobs = planned_jobs(run_snakemake(finished_demo, "-n", "--configfile", "config/demo.yaml", check=True).stdout)
    assert set(jobs) == FIGURE_RULES | {"all"}

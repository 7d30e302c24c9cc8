"""Every number in the README's performance table is the committed reference run's, rounded as printed.

The reference file is what the workflow wrote on one H200 (``snakemake --cores 16 --resources gpu=1
--configfile config/reference-h200.yaml``, committed under reference/h200-2026-12-05-prefill-waits/reference-config-14fe230/);
a README edited
by hand, or a re-measured file without its README, fails here.
"""

import csv
import re

from conftest import REPO

REFERENCE = REPO / "reference" / "h200-2026-12-05-prefill-waits" / "reference-config-14fe230" / "tables" / "engine_comparison.csv"
# README row label (its start, formatting stripped) -> (path, decode batch, kernels) of the reference file's row it prints
ROW_SOURCES = {
    "kvpress KVPressTextGenerationPipeline (batch 1)": ("kvpress_pipeline", "1", "transformers"),
    "this engine, decode batch 1": ("kvcache_bench", "1", "transformers"),
    "this engine, decode batch 32 (default)": ("kvcache_bench", "32", "transformers"),
    "this engine on Liger's fused kernels": ("kvcache_bench", "32", "liger"),
    "hardware floor": ("floor", "32", ""),
}
BASELINE = ("kvpress_pipeline", "1", "transformers")


def performance_table_rows() -> list[list[str]]:
    section = REPO.joinpath("README.md").read_text(encoding="utf-8").split("\n## Performance", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|") and not line.startswith("|---")]
    return [[re.sub(r"[*`]", "", cell).strip() for cell in row.strip("|").split("|")] for row in rows[1:]]


def reference_rate(source) -> float:
    rows = list(csv.DictReader(REFERENCE.open()))
    (row,) = [r for r in rows if (r["path"], r["decode_batch_size"], r["kernels"]) == source]
    return float(row["examples_per_s"])


def test_every_row_of_the_performance_table_is_the_reference_runs_rate_and_ratio():
    rows = performance_table_rows()
    assert len(rows) == len(ROW_SOURCES)
    baseline = reference_rate(BASELINE)
    for label, rate, ratio in rows:
        source = next((s for start, s in ROW_SOURCES.items() if label.startswith(start)), None)
        assert source, f"README performance row {label!r} names no reference entry"
        assert rate == f"{reference_rate(source):.2f}", label
        assert ratio == f"{reference_rate(source) / baseline:.1f}×", label


def test_the_floor_ratio_in_the_text_is_the_reference_runs():
    section = REPO.joinpath("README.md").read_text(encoding="utf-8").split("\n## Performance", 1)[1]
    stated = re.search(r"runs at ([\d.]+)× its floor, Liger's kernels at ([\d.]+)×", section).groups()
    floor = reference_rate(ROW_SOURCES["hardware floor"])
    default, fused = (reference_rate(ROW_SOURCES[row]) for row in ("this engine, decode batch 32 (default)", "this engine on Liger's fused kernels"))
    assert stated == (f"{floor / default:.2f}", f"{floor / fused:.2f}")


def test_the_reference_table_is_the_file_its_manifest_describes():
    """A hand-edited reference number fails here even when the README was edited to match it."""
    from kvcache_bench.manifest import verify_against_manifest

    manifest = verify_against_manifest(REFERENCE)
    engines = {(engine, kernels) for _, engine, kernels in manifest["params"]["cells"]}
    # both engines' cells of one study, this engine on both kernels
    assert engines == {("kvcache_bench", "transformers"), ("kvcache_bench", "liger"), ("kvpress_pipeline", "transformers")}


def _readme_text() -> str:
    return " ".join(REPO.joinpath("README.md").read_text(encoding="utf-8").split())


def test_the_sweep_cost_sentences_are_the_committed_runs():
    """The README's worker figures (the needle grid) and docs/model-workers.md's table (the grids and the 8B cell)
    are the committed sweep_cost files'."""
    import json

    def cost(run):
        return json.loads((REPO / f"reference/{run}/tables/sweep_cost.json").read_text())

    table = (REPO / "docs/model-workers.md").read_text()
    for run, loads in [("h200-smollm2-sweep", "one worker"), ("h200-smollm2-needle", "two workers"), ("h200-smollm2-questions", "two workers"),
                       ("h200-8b-cell/with-worker", "one worker"), ("h200-smollm2-needle-warm-once", "one worker"),
                       ("h200-2026-12-05/smollm2-needle-de99a74", "one worker")]:
        measured = cost(run)
        assert (f"| {measured['cells']} | {measured['wall_seconds']} | {measured['work_seconds']} | "
                f"{measured['worker_start_seconds']} ({loads}) | {measured['cell_warmup_seconds']} | "
                f"{measured['wall_over_work_plus_loads']:.2f} | `reference/{run}/` |") in table, run
    needle = cost("h200-2026-12-05/smollm2-needle-de99a74")
    assert (f"took {needle['wall_seconds']} s of wall time for {needle['work_seconds']} s of measured work, one worker "
            f"start of {needle['worker_start_seconds']} s and {needle['cell_warmup_seconds']} s of warm-ups: "
            f"{needle['wall_over_work_plus_loads']:.2f}× work + loads") in _readme_text()
    without = cost("h200-8b-cell/without-worker")
    assert (f"| {without['cells']} | {without['wall_seconds']} | {without['work_seconds']} | in wall | "
            f"{without['cell_warmup_seconds']} | {without['wall_over_work_plus_loads']:.2f} | `reference/h200-8b-cell/without-worker/` |") in table
    assert cost("h200-8b-cell/with-worker")["model_workers"] == 1 and without["jobs_that_loaded_their_own_model"] == 1

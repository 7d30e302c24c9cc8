"""Every number in the README's performance table is the committed reference run's, rounded as printed.

The reference file is what the run wrote (reference/h200-fast-decode/generate_rule_h200.json until the
workflow's own run, config/reference-h200.yaml, replaces it); a README edited by hand, or a re-measured
file without its README, fails here.
"""

import json
import re

from conftest import REPO

REFERENCE = REPO / "reference" / "h200-fast-decode" / "generate_rule_h200.json"
# README row label (its start, formatting stripped) -> the reference file's entry it prints
ROW_SOURCES = {
    "kvpress KVPressTextGenerationPipeline (batch 1)": ("paths", "kvpress pipeline (batch 1)"),
    "this engine, decode batch 1": ("paths", "engine, decode batch 1"),
    "this engine, decode batch 32 (default)": ("paths", "engine, decode batch 32"),
    "hardware floor": ("floors", "floor, decode batch 32"),
}
BASELINE = ("paths", "kvpress pipeline (batch 1)")


def performance_table_rows() -> list[list[str]]:
    section = REPO.joinpath("README.md").read_text(encoding="utf-8").split("\n## Performance", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|") and not line.startswith("|---")]
    return [[re.sub(r"[*`]", "", cell).strip() for cell in row.strip("|").split("|")] for row in rows[1:]]


def reference_rate(source) -> float:
    group, name = source
    return json.loads(REFERENCE.read_text())[group][name]["examples_per_s"]


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
    stated = re.search(r"runs at ([\d.]+)× its floor", section).group(1)
    default, floor = reference_rate(ROW_SOURCES["this engine, decode batch 32 (default)"]), reference_rate(ROW_SOURCES["hardware floor"])
    assert stated == f"{floor / default:.2f}"

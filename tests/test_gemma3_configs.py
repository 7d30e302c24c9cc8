"""Issue 50's Gemma 3 GPU studies as committed: each asks the cells its header promises, on the same weights.

A session's device time is planned from these headers (cells, sessions), and a study whose model entry drifted from
config/gemma3.yaml's would make other weights under the same name, so both are checked here, not on the GPU.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from snakemake.utils import update_config

from kvcache_bench.study.cells import apply_schema_defaults, requested_cells
from kvcache_bench.study.config_files import read_config_file

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "config"
SCHEMA = yaml.safe_load((REPO / "schemas/config.schema.yaml").read_text())
GRID_4K = "gemma3-h200-ruler-4k.yaml"


def study(*names: str) -> dict:
    """The config Snakemake reads from `--configfile` files given in this order (later ones update earlier ones),
    with the schema's defaults as the workflow fills them in."""
    merged: dict = {}
    for name in names:
        update_config(merged, read_config_file(CONFIG / name))  # as the workflow reads it: a key twice is refused
    return apply_schema_defaults(merged, SCHEMA)


def header_cells(name: str) -> tuple[int, int]:
    """The '... = N cells' and the 'M run' (or 'M compress cells') its header states."""
    header = (CONFIG / name).read_text().split("\nseed:")[0].split("\nmethods:")[0]
    total = int(re.search(r"= (\d+) cells", header).group(1))
    run = re.search(r"(\d+) (?:run|compress cells to make)\b", header)
    return total, int(run.group(1)) if run else total


def kvzip_cells(cells: list[dict]) -> int:
    return sum(cell["method"] == "kvzip" for cell in cells)


@pytest.mark.parametrize(
    "names, refused, made_before",
    [
        # question-aware at 50%: 13 tasks x (full cache + 15 presses); KVzip refused on Gemma 3
        ((GRID_4K, "gemma3-h200-ruler-4k-question-aware.yaml"), 13, 0),
        # compress beside keep: the keep cells (and their KVzip refusals) are the 50% run's
        (("gemma3-h200-ruler-4k-compress.yaml",), 26, 169),
        (("gemma3-h200-ruler-8k.yaml",), 13, 0),
    ],
)
def test_each_gemma3_study_asks_the_cells_its_header_states(names, refused, made_before):
    cells = requested_cells(study(*names))
    total, to_run = header_cells(names[-1])
    assert len(cells) == total
    assert kvzip_cells(cells) == refused
    assert len(cells) - refused - made_before == to_run


def test_the_needle_study_is_a_length_by_depth_grid_up_to_16k_tokens():
    config = study("gemma3-h200-needle.yaml")
    grid = config["datasets"]["paul-graham-needle"]["needle_in_haystack"]
    assert grid["lengths"] == [1024, 2048, 4096, 8192, 16384] and len(grid["depths"]) == 10
    assert grid["depths"][0] == 0 and grid["depths"][-1] == 100
    # every length fits the model's context, with kvpress's 150 tokens of prompt allowance to spare
    assert max(grid["lengths"]) + 150 <= config["models"]["gemma3-270m"]["max_context_tokens"]
    assert len(requested_cells(config)) == 14
    probe = config["probes"]["padding"]
    # a masking press (the AdaKV ones, KVzip) holds every slot: there are no pads to count
    assert not {"kvzip", "adakv_compactor", "expected_attention"} & set(probe["methods"])
    assert len(probe["methods"]) == 11 and all(config["datasets"][name]["tasks"] == [] for name in probe["datasets"])


def test_the_question_aware_study_changes_only_what_it_says():
    # given after the 4k grid's file, Snakemake updates that config key by key: without `models` it keeps the grid's
    # model and rows (the compress study, with a second model, is a whole file instead)
    overlay = read_config_file(CONFIG / "gemma3-h200-ruler-4k-question-aware.yaml")
    assert set(overlay) == {"methods", "retentions", "question_modes"}
    merged, grid = study(GRID_4K, "gemma3-h200-ruler-4k-question-aware.yaml"), study(GRID_4K)
    assert {key: value for key, value in merged.items() if key not in overlay} == {
        key: value for key, value in grid.items() if key not in overlay
    }


@pytest.mark.parametrize(
    "name", ["gemma3-h200-ruler-4k-compress.yaml", "gemma3-h200-ruler-8k.yaml", "gemma3-h200-needle.yaml"]
)
def test_every_gemma3_study_loads_the_weights_the_4k_grid_made(name):
    made = study(GRID_4K)["models"]["gemma3-270m"]
    models = study(name)["models"]
    assert models["gemma3-270m"] == made  # the same packages, sha256 and settings: the same folder's weights
    for settings in models.values():
        assert settings["path"] == made["path"] and settings["chat_template"] is False
        compared = {key: value for key, value in settings.items() if key not in ("from_package", "sliding_layers")}
        assert compared == {key: value for key, value in made.items() if key not in ("from_package", "sliding_layers")}
    if name == "gemma3-h200-ruler-4k-compress.yaml":
        # one folder, made once by the packaged model's rule, read under two settings
        assert {m["sliding_layers"] for m in models.values()} == {"keep", "compress"}
        assert [n for n, m in models.items() if m.get("from_package")] == ["gemma3-270m"]

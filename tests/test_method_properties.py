"""Each method's properties are measured by running it (not declared), and the per-cell check refuses from them."""

from __future__ import annotations

import pytest

from kvcache_bench.runtime.method_checks import measure
from kvcache_bench.study.cell_checks import Cell, problems_with

FLAGS = ("removes_tokens", "masks_slots", "prunes_channels", "compresses_while_decoding")


def flags_of(properties):
    return {flag for flag in FLAGS if properties[flag]}


@pytest.mark.parametrize(
    "method, expected",
    [
        ("snapkv", {"removes_tokens"}),
        ("adakv_snapkv", {"masks_slots"}),  # AdaKV keeps the cache at full size: no memory saved
        ("think", {"prunes_channels"}),
        ("decoding_knorm", {"compresses_while_decoding"}),
        ("full_cache", set()),
    ],
)
def test_what_a_method_does_to_the_cache_is_measured(method, expected):
    assert flags_of(measure(method)) == expected


def test_a_question_reading_press_is_told_from_one_that_ranks_context_alone():
    assert measure("snapkv")["reads_question"] and not measure("knorm")["reads_question"]


def test_a_hub_press_is_refused_before_generation_naming_what_to_provide():
    properties = measure("qfilter")
    assert properties["status"] == "needs data" and "q_filters" in properties["needs_hub_data"]
    cell = Cell("d", "qasper", "m", "qfilter", "question_aware", 0.5, 1)
    assert any("q_filters" in problem for problem in problems_with(cell, measured=properties))


def test_a_custom_press_that_evicts_is_refused_at_prefill_batch_above_one_from_its_measurement():
    custom = {"value_norm": {"press": "presses/value_norm.py:ValueNormPress"}}
    properties = measure("value_norm", custom_methods=custom)
    assert properties["removes_tokens"] and properties["padded_row_pad_share"] is not None
    batched = Cell("d", "qasper", "m", "value_norm", "question_aware", 0.5, 2)
    refusals = problems_with(batched, custom, measured=properties)
    assert any("removes tokens" in p and "padded row" in p for p in refusals), refusals
    assert problems_with(Cell("d", "qasper", "m", "value_norm", "question_aware", 0.5, 1), custom, measured=properties) == []


def test_a_masking_press_runs_at_decode_batch_above_one_decoding_alone_and_a_dry_run_says_so():
    """kvpress keeps AdaKV's masks on the model for one sequence: such a cell is not refused (the needle config once
    lost its kvzip cells ten minutes into a GPU run that way), and its rows decode together: no note to print."""
    from kvcache_bench.study.cell_checks import decode_note

    properties = measure("adakv_snapkv")
    alone = Cell("d", "qasper", "m", "adakv_snapkv", "question_aware", 0.5, 1, 1)
    stacked = Cell("d", "qasper", "m", "adakv_snapkv", "question_aware", 0.5, 1, 8)
    assert problems_with(alone, measured=properties) == problems_with(stacked, measured=properties) == []
    assert decode_note("adakv_snapkv", properties, 8) is None  # its rows decode together, each with its masks
    assert decode_note("snapkv", measure("snapkv"), 8) is None


def test_a_masking_press_is_refused_in_the_modes_that_remove_a_shown_question():
    """kvpress's `expected_attention` (AdaKV over Expected Attention) masks keys per head: the other-question mode
    cannot take the other question's slots out of such a cache, so its check refuses it rather than its job failing."""
    properties = measure("expected_attention")
    assert properties["masks_slots"]
    for mode in ("other_question", "same_question"):
        refused = problems_with(Cell("d", "qasper", "m", "expected_attention", mode, 0.5, 1, 1), measured=properties)
        assert any("masks slots per head" in p and mode in p for p in refused), refused
    assert problems_with(Cell("d", "qasper", "m", "plain_expected_attention", "other_question", 0.5, 1, 1), measured=measure("plain_expected_attention")) == []


def test_doctor_lists_at_least_35_methods_that_run_offline(tmp_path):
    import json

    from kvcache_bench.methods.properties_table import doctor_table, runs_offline
    from kvcache_bench.methods.registry import METHODS

    paths = []
    for name in METHODS:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(measure(name)))
        paths.append(str(path))
    rows = [json.loads(open(p).read()) for p in paths]
    running = [row["method"] for row in rows if runs_offline(row)]
    assert len(running) >= 35, running
    table = doctor_table(paths)
    assert f"{len(running)} of {len(METHODS)} methods run offline here" in table
    assert "needs data: QFilterPress.q_filters" in table  # a hub press says what to provide
    import yaml
    from conftest import REPO

    all_methods = yaml.safe_load((REPO / "config/demo-all-methods.yaml").read_text())["methods"]
    assert all_methods == running  # the all-methods demo runs exactly what runs offline, in the catalogue's order

    # What a dry run knows is what check_method measures now: the shipped table is this very measurement.
    from kvcache_bench.methods.shipped_properties import comparable, shipped_facts, shipped_properties

    stale = [row["method"] for row in rows if comparable(shipped_properties(row["method"])) != comparable(shipped_facts(row))]
    assert not stale, f"regenerate with python -m kvcache_bench.runtime.method_checks --ship: {stale}"


def test_a_press_that_leaves_a_cache_longer_than_its_prompt_is_refused_from_its_measurement():
    """KVCompose prefills the context twice into one cache; the structured press keeps the first copy's chosen
    slots, the unstructured one masks the first copy and leaves the second whole: its cells would attend to the
    whole context at any retention."""
    unstructured = measure("kvcompose_unstructured")
    assert unstructured["cache_growth"] == 2.0 and unstructured["masks_slots"]
    cell = Cell("d", "qasper", "m", "kvcompose_unstructured", "question_aware", 0.25, 1)
    assert any("2x as long as the prompt" in p for p in problems_with(cell, measured=unstructured))
    structured = measure("kvcompose")
    assert structured["cache_growth"] < 1 and structured["removes_tokens"]
    assert problems_with(Cell("d", "qasper", "m", "kvcompose", "question_aware", 0.25, 1), measured=structured) == []


def test_a_decoding_press_runs_question_aware_and_agnostic_at_batch_one_with_a_budget_its_answers_reach():
    budget = {"compression_interval": 4, "target_size": 64, "hidden_states_buffer_size": 4}
    shrunk, defaults = measure("decoding_knorm", budget), measure("decoding_knorm")

    def refusals(mode, properties=shrunk, batch_size=1, max_new_tokens=32):
        cell = Cell("d", "qasper", "m", "decoding_knorm", mode, 1.0, batch_size, 2)  # decode batch 2 falls back, not refused
        return " ".join(problems_with(cell, measured=properties, max_new_tokens=max_new_tokens))

    assert refusals("question_aware") == refusals("question_agnostic") == ""
    for mode in ("other_question", "same_question"):
        assert f"the {mode} mode compresses the context with a question and removes that question" in refusals(mode)
    assert "Use batch size 1" in refusals("question_aware", batch_size=2)
    # kvpress's defaults compress every 512 steps: a 32-token answer would measure the full cache under its name
    assert "method_kwargs.decoding_knorm.compression_interval = 512" in refusals("question_aware", defaults)
    assert "at most 32" in refusals("question_aware", defaults)
    assert "compression_interval = 4" in refusals("question_aware", max_new_tokens=3)
    assert refusals("question_aware", defaults, max_new_tokens=512) == ""


def test_a_check_without_the_probe_tokenizer_fails_instead_of_calling_kvzip_broken(monkeypatch, tmp_path):
    """A device copy of the checkout without resources/canary/ recorded KVzip as "fails" from a tokenizer error,
    and its three needle cells were refused: the job must fail, naming the file."""
    from kvcache_bench.methods import method_properties

    monkeypatch.setattr(method_properties, "PROBE_TOKENIZER", tmp_path)
    with pytest.raises(FileNotFoundError, match="tokenizer.json is missing"):
        measure("kvzip")


def test_the_check_rule_asks_for_the_probe_tokenizer(workflow_copy):
    from conftest import run_snakemake

    (workflow_copy / "resources/canary/tokenizer.json").unlink()
    # a config whose model is not the canary (the demo's model folder is resources/canary itself)
    result = run_snakemake(
        workflow_copy, "results/checks/methods/kvzip.json", "-n", "--configfile", "config/smollm2-h200-needle.yaml"
    )
    assert result.returncode != 0 and "resources/canary/tokenizer.json" in result.stderr + result.stdout

"""Which cells a config makes, which the check refuses, and where their files go: unit tests, no dry run."""

from __future__ import annotations

import copy
import re

import pytest
import yaml
from conftest import REPO

from kvcache_bench.study import cells as study
from kvcache_bench.study.cell_checks import problems_of

SCHEMA = yaml.safe_load((REPO / "schemas/config.schema.yaml").read_text())


def load_config(name="config/demo.yaml", **overrides):
    config = yaml.safe_load((REPO / name).read_text())
    config.update(copy.deepcopy(overrides))
    return study.apply_schema_defaults(config, SCHEMA)


def settings(cells):
    return {(c["method"], c["retention"], c["batch_size"], c["decode_batch_size"], c["question_mode"]) for c in cells}


def test_the_demo_makes_78_cells_and_refuses_none():
    accepted, refused = study.split_by_check(study.requested_cells(load_config()), problems_of)
    assert len(accepted) == 78 and refused == []  # 26 settings x 3 question modes
    full = [c for c in accepted if c["method"] == "full_cache"]
    assert {(c["retention"], c["batch_size"]) for c in full} == {("1.00", "1"), ("1.00", "4")}
    snapkv = [c for c in accepted if c["method"] == "snapkv" and c["question_mode"] == "question_aware"]
    assert sorted(c["retention"] for c in snapkv) == ["0.10", "0.25", "0.50"]


def test_eviction_with_a_padded_batch_is_refused_and_the_rest_accepted():
    config = load_config(methods=["full_cache", "snapkv"], retentions=[0.5], batch_sizes=[1, 4],
                         batch_size_overrides={}, question_modes=["question_aware"])
    accepted, refused = study.split_by_check(study.requested_cells(config), problems_of)
    assert settings(refused) == {("snapkv", "0.50", "4", "1", "question_aware")}
    assert settings(accepted) == {
        ("full_cache", "1.00", "1", "1", "question_aware"),
        ("full_cache", "1.00", "4", "1", "question_aware"),
        ("snapkv", "0.50", "1", "1", "question_aware"),
    }


def test_each_cell_is_checked_once():
    judged = []
    cells = study.requested_cells(load_config())
    study.split_by_check(cells, lambda cell: judged.append(cell) or [])
    assert len(judged) == len(cells)


def test_decode_batching_applies_to_batch_size_one_only():
    config = load_config(methods=["full_cache", "knorm"], retentions=[0.5], decode_batch_sizes=[1, 16],
                         batch_size_overrides={"full_cache": [1, 4]}, question_modes=["question_aware"])
    assert settings(study.requested_cells(config)) == {
        ("full_cache", "1.00", "1", "1", "question_aware"),
        ("full_cache", "1.00", "1", "16", "question_aware"),
        ("full_cache", "1.00", "4", "1", "question_aware"),
        ("knorm", "0.50", "1", "1", "question_aware"),
        ("knorm", "0.50", "1", "16", "question_aware"),
    }


def test_schema_defaults_fill_every_model_and_dataset_without_overriding_the_config():
    config = load_config()
    model = config["models"]["canary"]
    assert model["max_context_tokens"] == 4096  # the config's own value stays
    bare = study.apply_schema_defaults(
        {"models": {"m": {"path": "x"}}, "datasets": {"d": {"source": "hub", "tasks": ["qasper"]}}}, SCHEMA
    )
    assert bare["models"]["m"] == {
        "path": "x", "dtype": "bfloat16", "attn_implementation": "sdpa", "trust_remote_code": False, "chat_template": True,
        "engine": "kvcache_bench",
        "max_context_tokens": SCHEMA["properties"]["models"]["additionalProperties"]["properties"]["max_context_tokens"]["default"],
    }
    assert bare["datasets"]["d"]["split"] == "test"
    assert bare["decode_batch_sizes"] == [1] and bare["batch_size_overrides"] == {}
    assert bare["perf"]["batch_sizes"] == [1] and bare["perf"]["estimate"] == {}


@pytest.mark.parametrize("retention", [0.5, 0.25, 0.1, 1.0])
def test_a_cell_path_names_its_retention_the_way_the_wildcard_reads_it(retention):
    label = study.retention_label(retention)
    assert re.fullmatch(study.RETENTION_WILDCARD, label) and float(label) == pytest.approx(retention)
    cell = dict(dataset="d", task="t", model="m", method="knorm", question_mode="question_aware",
                retention=label, batch_size="1", decode_batch_size="1")
    assert study.cell_path("predictions", cell, ".jsonl") == (
        f"results/predictions/d/t/m/knorm/question_aware/{study.setting_slug(retention, 1)}.jsonl"
    )


def test_perf_cells_follow_the_perf_section_and_refuse_eviction_batches():
    config = load_config()
    config["perf"].update(methods=["full_cache", "knorm"], retentions=[0.5], batch_sizes=[1, 2], context_lengths=[256])
    accepted, refused = study.split_by_check(study.requested_perf_cells(config), problems_of)
    assert {(c["method"], c["batch_size"]) for c in accepted} == {("full_cache", "1"), ("full_cache", "2"), ("knorm", "1")}
    assert {(c["method"], c["batch_size"]) for c in refused} == {("knorm", "2")}
    assert study.perf_record_path(accepted[0]).startswith("results/perf/synthetic/synthetic_qa/canary/")


def test_plan_jobs_take_model_limits_from_the_schema_defaults():
    config = load_config("config.yaml")
    del config["models"]["llama-3.1-8b-instruct"]["max_context_tokens"]
    config = study.apply_schema_defaults(config, SCHEMA)
    accepted, _ = study.split_by_check(study.requested_cells(config), problems_of)
    jobs = study.plan_jobs(config, accepted, [])
    assert len(jobs) == len(accepted) and {job["stage"] for job in jobs} == {"generate"}
    assert {job["max_context_tokens"] for job in jobs} == {127500}
    assert all(job["output"].startswith("results/predictions/") for job in jobs)

"""The sweep-cost report: wall time against the records' seconds plus one start-up per model worker."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from kvcache_bench.analysis.sweep_cost import sweep_cost
from kvcache_bench.files import write_jsonl_atomic


def _cell(tmp_path, name, *, ended, job_seconds, seconds, worker, warmup=0.5, captures=None):
    predictions = tmp_path / f"{name}.jsonl"
    captures = captures or [0.0] * len(seconds)
    write_jsonl_atomic(
        predictions,
        [{"seconds": s, "warmup_seconds": warmup, "graph_capture_seconds": c} for s, c in zip(seconds, captures)],
    )
    manifest = {"created_utc": datetime.fromtimestamp(ended, UTC).isoformat(timespec="seconds")}
    if worker:
        manifest["worker"] = worker
    (tmp_path / f"{name}.jsonl.manifest.json").write_text(json.dumps(manifest))
    (tmp_path / f"{name}.tsv").write_text(f"s\th:m:s\n{job_seconds}\t0:00:01\n")
    return str(predictions), str(tmp_path / f"{name}.tsv")


def test_two_cells_of_one_worker_count_its_start_once_and_the_wall_spans_both_jobs(tmp_path):
    worker = {"host": "h", "pid": 7, "loaded_at": 1.0, "start_seconds": 12.0}
    first = _cell(tmp_path, "a", ended=1_000_020, job_seconds=20, seconds=[1.0, 2.0], worker=worker)
    second = _cell(tmp_path, "b", ended=1_000_030, job_seconds=10, seconds=[3.0], worker=worker)
    alone = _cell(tmp_path, "c", ended=1_000_040, job_seconds=5, seconds=[4.0], worker=None)
    report = sweep_cost(*map(list, zip(first, second, alone)))
    assert (report["cells"], report["examples"], report["model_workers"]) == (3, 4, 1)
    assert report["wall_seconds"] == 40.0 and report["work_seconds"] == 10.0 and report["worker_start_seconds"] == 12.0
    assert report["jobs_that_loaded_their_own_model"] == 1 and report["cell_warmup_seconds"] == 1.5
    assert report["wall_over_work_plus_loads"] == round(40 / 22, 2)


def test_a_sweep_over_two_calls_is_costed_per_worker_without_the_gap_between_them(tmp_path):
    """Two Snakemake runs an hour apart (two device calls), one worker each: the whole wall counts the hour, the
    per-worker walls do not, and each worker's start is charged to its own cells."""
    early = {"host": "h", "pid": 7, "loaded_at": 1.0, "start_seconds": 10.0}
    late = {"host": "h", "pid": 9, "loaded_at": 3600.0, "start_seconds": 5.0}
    first = _cell(tmp_path, "a", ended=1_000_020, job_seconds=20, seconds=[10.0], worker=early)
    second = _cell(tmp_path, "b", ended=1_003_620, job_seconds=20, seconds=[15.0], worker=late)
    report = sweep_cost(*map(list, zip(first, second)))
    assert report["wall_seconds"] == 3620.0 and report["wall_seconds_within_workers"] == 40.0
    assert [(w["pid"], w["cells"], w["wall_seconds"]) for w in report["per_worker"]] == [(7, 1, 20.0), (9, 1, 20.0)]
    assert [w["wall_over_work_plus_loads"] for w in report["per_worker"]] == [1.0, 1.0]


def test_graph_captures_are_one_time_costs_beside_the_warm_ups_not_work(tmp_path):
    """A worker warms up in its first cell only and captures a decode shape's graph once: both are counted with
    the warm-ups, out of the work, so a sweep's cost says what its one-time costs were."""
    worker = {"host": "h", "pid": 7, "loaded_at": 1.0, "start_seconds": 10.0}
    first = _cell(tmp_path, "a", ended=1_000_020, job_seconds=20, seconds=[4.0, 4.0], worker=worker, warmup=2.0,
                  captures=[0.25, 0.25])
    later = _cell(tmp_path, "b", ended=1_000_030, job_seconds=10, seconds=[8.0], worker=worker, warmup=0.0)
    report = sweep_cost(*map(list, zip(first, later)))
    assert report["work_seconds"] == 16.0 and report["graph_capture_seconds"] == 0.5
    assert report["cell_warmup_seconds"] == 2.5
    assert report["wall_over_work_plus_loads"] == round(30 / 26, 2)
    assert report["wall_over_work_plus_loads_and_warmups"] == round(30 / 28.5, 2)

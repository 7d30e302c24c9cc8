"""The sweep-cost report: wall time against the records' seconds plus one start-up per model worker."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from kvcache_bench.analysis.sweep_cost import sweep_cost
from kvcache_bench.io import write_jsonl_atomic


def _cell(tmp_path, name, *, ended, job_seconds, seconds, worker):
    predictions = tmp_path / f"{name}.jsonl"
    write_jsonl_atomic(predictions, [{"seconds": s, "warmup_seconds": 0.5} for s in seconds])
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

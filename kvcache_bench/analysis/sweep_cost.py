"""What a sweep's generate jobs cost against the work they measured: wall time vs the records' seconds + loads.

The sweep's wall time runs from the first generate job's start to the last one's end (each job's end is its
manifest's time, its start that minus its benchmark's ``s``). Its work is the sum of the records' ``seconds``
(prefill, compression and decode; warm-ups and graph captures excluded), with the warm-ups (each cell's
``warmup_seconds``: once per model worker and kind of work) and CUDA graph captures (the records'
``graph_capture_seconds``: once per worker and decode batch shape) shown apart as one-time costs, and its
loads are counted once per model worker (start-up, imports and model load, from the worker's facts in the
cells' manifests) or once per job when a job loaded its own model (its ``load_seconds`` is not recorded: the
job's benchmark time less its work is shown as overhead instead).

A sweep run in several calls (a device lent for ten minutes at a time, a resumed run) has gaps between them that no
job spent: ``per_worker`` gives each model worker's own cells, wall, work, warm-ups and start, and
``wall_seconds_within_workers`` sums their walls, the sweep's cost without the gaps.
"""

from __future__ import annotations

import csv
import json
from datetime import datetime
from pathlib import Path

from kvcache_bench.files import read_jsonl


def _job_seconds(benchmark: str | Path) -> float:
    with open(benchmark, encoding="utf-8") as handle:
        return float(next(csv.DictReader(handle, delimiter="\t"))["s"])


def _summary(cells: list[tuple[float, float, list[dict]]], loads: float) -> dict:
    """Cells given as (start, end, records): their wall, work, warm-ups and the ratios to work + loads."""
    wall = max(end for _, end, _ in cells) - min(start for start, _, _ in cells) if cells else 0.0
    work = sum(record["seconds"] for _, _, records in cells for record in records)
    captures = sum(record.get("graph_capture_seconds", 0.0) for _, _, records in cells for record in records)
    warmup = sum(records[0].get("warmup_seconds", 0.0) for _, _, records in cells if records) + captures
    return {
        "cells": len(cells),
        "examples": sum(len(records) for _, _, records in cells),
        "wall_seconds": round(wall, 1),
        "work_seconds": round(work, 2),
        "cell_warmup_seconds": round(warmup, 2),  # warm-ups and graph captures: the one-time costs
        "graph_capture_seconds": round(captures, 2),
        "wall_over_work_plus_loads": round(wall / (work + loads), 2) if work + loads else None,
        "wall_over_work_plus_loads_and_warmups": round(wall / (work + loads + warmup), 2)
        if work + loads + warmup
        else None,
    }


def sweep_cost(predictions: list[str], benchmarks: list[str]) -> dict:
    """The cost summary of these generate jobs (``predictions[i]`` was written by the job of ``benchmarks[i]``)."""
    cells, by_worker, workers, own_loads = [], {}, {}, 0
    for path, benchmark in zip(predictions, benchmarks):
        manifest = json.loads(Path(f"{path}.manifest.json").read_text(encoding="utf-8"))
        end = datetime.fromisoformat(manifest["created_utc"]).timestamp()
        cell = (end - _job_seconds(benchmark), end, read_jsonl(path))
        cells.append(cell)
        if "worker" in manifest:
            facts = manifest["worker"]
            key = (facts["host"], facts["pid"], facts["loaded_at"])
            workers[key] = facts["start_seconds"]
            by_worker.setdefault(key, []).append(cell)
        else:
            own_loads += 1
    loads = sum(workers.values())
    whole = _summary(cells, loads)
    per_worker = [
        {
            "host": key[0],
            "pid": key[1],
            "loaded_at": key[2],
            "worker_start_seconds": round(workers[key], 2),
            **_summary(group, workers[key]),
        }
        for key, group in sorted(by_worker.items(), key=lambda item: item[0][2])
    ]
    return {
        **{k: whole[k] for k in ("cells", "examples", "wall_seconds", "work_seconds", "cell_warmup_seconds")},
        "graph_capture_seconds": whole["graph_capture_seconds"],
        "model_workers": len(workers),
        "worker_start_seconds": round(loads, 2),
        "jobs_that_loaded_their_own_model": own_loads,
        "wall_over_work_plus_loads": whole["wall_over_work_plus_loads"],
        "wall_over_work_plus_loads_and_warmups": whole["wall_over_work_plus_loads_and_warmups"],
        "wall_seconds_within_workers": round(sum(worker["wall_seconds"] for worker in per_worker), 1),
        "per_worker": per_worker,
    }

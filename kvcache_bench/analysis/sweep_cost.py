"""What a sweep's generate jobs cost against the work they measured: wall time vs the records' seconds + loads.

The sweep's wall time runs from the first generate job's start to the last one's end (each job's end is its
manifest's time, its start that minus its benchmark's ``s``). Its work is the sum of the records' ``seconds``
(prefill, compression and decode; warm-up excluded) plus each cell's ``warmup_seconds`` shown apart, and its
loads are counted once per model worker (start-up, imports and model load, from the worker's facts in the
cells' manifests) or once per job when a job loaded its own model (its ``load_seconds`` is not recorded: the
job's benchmark time less its work is shown as overhead instead).
"""

from __future__ import annotations

import csv
import json
from datetime import datetime
from pathlib import Path

from kvcache_bench.io import read_jsonl


def _job_seconds(benchmark: str | Path) -> float:
    with open(benchmark, encoding="utf-8") as handle:
        return float(next(csv.DictReader(handle, delimiter="\t"))["s"])


def sweep_cost(predictions: list[str], benchmarks: list[str]) -> dict:
    """The cost summary of these generate jobs (``predictions[i]`` was written by the job of ``benchmarks[i]``)."""
    starts, ends, work, warmup, workers, own_loads, examples = [], [], 0.0, 0.0, {}, 0, 0
    for path, benchmark in zip(predictions, benchmarks):
        manifest = json.loads(Path(f"{path}.manifest.json").read_text(encoding="utf-8"))
        end = datetime.fromisoformat(manifest["created_utc"]).timestamp()
        starts.append(end - _job_seconds(benchmark))
        ends.append(end)
        records = read_jsonl(path)
        examples += len(records)
        work += sum(record["seconds"] for record in records)
        warmup += records[0].get("warmup_seconds", 0.0) if records else 0.0
        if "worker" in manifest:
            facts = manifest["worker"]
            workers[(facts["host"], facts["pid"], facts["loaded_at"])] = facts["start_seconds"]
        else:
            own_loads += 1
    wall = max(ends) - min(starts) if ends else 0.0
    loads = sum(workers.values())
    return {
        "cells": len(predictions),
        "examples": examples,
        "wall_seconds": round(wall, 1),
        "work_seconds": round(work, 2),
        "cell_warmup_seconds": round(warmup, 2),
        "model_workers": len(workers),
        "worker_start_seconds": round(loads, 2),
        "jobs_that_loaded_their_own_model": own_loads,
        "wall_over_work_plus_loads": round(wall / (work + loads), 2) if work + loads else None,
        "wall_over_work_plus_loads_and_warmups": round(wall / (work + loads + warmup), 2) if work + loads + warmup else None,
    }

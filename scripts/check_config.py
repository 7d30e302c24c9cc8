"""Snakemake adapter: refuse a target before any GPU time is spent on it (see kvcache_bench.study.cell_checks)."""

import json
from pathlib import Path

from kvcache_bench.io import write_json_atomic
from kvcache_bench.study.cell_checks import Cell, check_cell
from kvcache_bench.workflow import current_job, logging_to, params_of, settings_of

job = current_job(globals())
with logging_to(job):
    p = settings_of(job)
    cell = Cell(p.dataset, p.task, p.model, p.method, p.question_mode, p.retention, p.batch_size, p.decode_batch_size)
    properties = json.loads(Path(job.input.properties).read_text())
    check_cell(cell, p.custom_methods, measured=properties, max_new_tokens=p.max_new_tokens)
    write_json_atomic(job.output.ok, {"target": cell.target, "status": "ok", "params": params_of(job)})

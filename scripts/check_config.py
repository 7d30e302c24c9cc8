"""Snakemake adapter: judge a target before any GPU time is spent on it (see kvcache_bench.study.cell_checks).

A cell refused here (a custom press measured only now, or method_kwargs that change a built-in's budget) is not a
failed job: its verdict says why, its generate job writes no predictions but that verdict, and the study's tables
list it under "Not run", so one refused cell never keeps the others' tables and figures from being made."""

import json
import logging
from pathlib import Path

from kvcache_bench.io import write_json_atomic
from kvcache_bench.study.cell_checks import Cell, problems_with
from kvcache_bench.workflow import current_job, logging_to, params_of, settings_of

job = current_job(globals())
with logging_to(job):
    p = settings_of(job)
    cell = Cell(p.dataset, p.task, p.model, p.method, p.question_mode, p.retention, p.batch_size, p.decode_batch_size)
    properties = json.loads(Path(job.input.properties).read_text())
    problems = problems_with(cell, p.custom_methods, measured=properties, max_new_tokens=p.max_new_tokens)
    for problem in problems:
        logging.getLogger("kvcache_bench").error("refused target %s: %s", cell.target, problem)
    verdict = {"target": cell.target, "status": "refused" if problems else "ok", "problems": problems}
    write_json_atomic(job.output.ok, {**verdict, "params": params_of(job)})

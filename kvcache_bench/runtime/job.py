"""The generate rule's job: one cell's predictions and their manifest, from the job's input, params and log.

scripts/generate.py runs it in its own process (``run_generate_job``), or, with ``generation.model_workers``,
hands the cell to a model worker (kvcache_bench.runtime.worker) that has the model loaded already and
calls ``write_cell_predictions`` with it.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

from kvcache_bench.analysis.measured import cell_warnings, measure_cell
from kvcache_bench.engine.cell_runner import run_cell
from kvcache_bench.engine.kvpress_pipeline import KVPRESS_PIPELINE, run_cell_on_kvpress_pipeline
from kvcache_bench.files import read_jsonl, write_jsonl_atomic
from kvcache_bench.manifest import write_manifest
from kvcache_bench.runtime.gpu_job import gpu_job
from kvcache_bench.study.cell import CellRun
from kvcache_bench.study.sources import resolved_revision
from kvcache_bench.workflow import params_of, settings_of


def cell_engine(job, loaded):
    """The job's cell and what runs it: kvpress's own pipeline when the model's ``engine`` says so, else ``run_cell``
    (the generate and profile_cell rules run a cell alike)."""
    on_kvpress = params_of(job).get("engine") == KVPRESS_PIPELINE
    engine = run_cell_on_kvpress_pipeline if on_kvpress else run_cell
    return engine, CellRun.from_settings(settings_of(job), loaded.settings)


def write_cell_predictions(job, loaded, data: dict, worker: dict | None = None) -> None:
    """Run the cell on ``loaded`` and write its predictions and manifest (``worker``: who loaded the model)."""
    p = settings_of(job)
    engine, run = cell_engine(job, loaded)
    records = engine(read_jsonl(job.input.rows), run, loaded=loaded)
    count = write_jsonl_atomic(job.output.predictions, records)
    measured = measure_cell(read_jsonl(job.output.predictions), p.retention)
    for warning in cell_warnings(SimpleNamespace(retention=p.retention, **measured)):
        logging.getLogger("kvcache_bench").warning("measured other than asked: %s", warning)
    extra = {
        "records": count,
        "data_sha256": data[str(job.input.rows)]["content"]["sha256"],
        # None for a local folder: its files are inputs
        "model_hub_revision": resolved_revision(p.model_settings["path"], "model", p.model_settings.get("revision")),
    }
    if worker is not None:
        extra["worker"] = worker
    write_manifest(job.output.predictions, params_of(job), p.seed, extra=extra)


def run_generate_job(job) -> None:
    """The cell in this process: the model loaded here, for this cell alone."""
    with gpu_job(job) as entered:
        write_cell_predictions(job, entered.loaded, entered.data)

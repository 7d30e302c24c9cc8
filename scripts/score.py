"""Snakemake adapter: score one predictions file with its task's LongBench metric, per example."""

import logging
from types import SimpleNamespace

from kvcache_bench.analysis.measured import cell_warnings, measure_cell
from kvcache_bench.analysis.metrics import score_records
from kvcache_bench.files import read_jsonl, write_jsonl_atomic
from kvcache_bench.manifest import require_made_with, verify_against_manifest, write_manifest
from kvcache_bench.workflow import current_job, logging_to, params_of, settings_of, wildcards_of

job = current_job(globals())
with logging_to(job):
    predictions = verify_against_manifest(job.input.predictions)
    require_made_with(job.input.predictions, predictions, wildcards_of(job))  # the cell this score is for
    settings = settings_of(job)
    scores = score_records(settings.task, read_jsonl(job.input.predictions))
    # a cell its check refused has no predictions: its score carries the refusal on to the tables
    not_run = {"not_run": predictions["not_run"]} if predictions.get("not_run") else {}
    if not not_run:
        for warning in cell_warnings(
            SimpleNamespace(retention=settings.retention, **measure_cell(scores, settings.retention))
        ):
            logging.getLogger("kvcache_bench").warning("measured other than asked: %s", warning)
    write_jsonl_atomic(job.output.scores, scores)
    write_manifest(
        job.output.scores,
        params_of(job),
        None,
        extra={"records": len(scores), "predictions_sha256": predictions["content"]["sha256"], **not_run},
    )

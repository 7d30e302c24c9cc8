"""Snakemake adapter: score one predictions file with its task's LongBench metric, per example."""

from kvcache_bench.analysis.metrics import score_records
from kvcache_bench.io import read_jsonl, write_jsonl_atomic
from kvcache_bench.manifest import verify_against_manifest, write_manifest
from kvcache_bench.workflow import current_job, logging_to, params_of, settings_of

job = current_job(globals())
with logging_to(job):
    predictions = verify_against_manifest(job.input.predictions)
    scores = score_records(settings_of(job).task, read_jsonl(job.input.predictions))
    write_jsonl_atomic(job.output.scores, scores)
    write_manifest(
        job.output.scores, params_of(job), None,
        extra={"records": len(scores), "predictions_sha256": predictions["content"]["sha256"]},
    )

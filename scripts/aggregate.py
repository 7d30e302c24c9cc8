"""Snakemake adapter: one summary row per cell, from the per-example score files."""

from kvcache_bench.aggregate import build_summary
from kvcache_bench.io import atomic_path
from kvcache_bench.manifest import write_manifest
from kvcache_bench.workflow import current_job, logging_to, params_of

job = current_job(globals())
with logging_to(job):
    summary = build_summary(list(job.input.scores), job.params.cells, job.params.expected_n)
    with atomic_path(job.output.summary) as tmp:
        summary.to_csv(tmp, index=False)
    write_manifest(job.output.summary, params_of(job), None, extra={"rows": len(summary)})

"""Snakemake adapter: the perf table, median over repeats per cell (refuses to mix hardware)."""

from kvcache_bench.analysis.verified import verified_files
from kvcache_bench.files import atomic_path, read_jsonl
from kvcache_bench.manifest import write_manifest
from kvcache_bench.perf.tables import summarize_perf
from kvcache_bench.workflow import current_job, logging_to, params_of

job = current_job(globals())
with logging_to(job):
    files = verified_files(job.input.records)  # each as its perf job wrote it, or refused naming the file
    records = [record for path in files for record in read_jsonl(path)]
    summary = summarize_perf(records)
    with atomic_path(job.output.summary) as tmp:
        summary.to_csv(tmp, index=False)
    write_manifest(job.output.summary, params_of(job), None, extra={"cells": len(summary), "runs": len(records)})

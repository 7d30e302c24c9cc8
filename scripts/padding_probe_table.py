"""Snakemake adapter: the padding probe's table (CSV + Markdown), one row per probed method."""

from kvcache_bench.analysis.padding import padding_markdown, padding_table
from kvcache_bench.analysis.verified import verified_files
from kvcache_bench.files import atomic_path, write_text_atomic
from kvcache_bench.manifest import write_manifest
from kvcache_bench.workflow import current_job, logging_to, params_of

job = current_job(globals())
with logging_to(job):
    table = padding_table(verified_files(job.input.reports), seed=job.params.seed, n_resamples=job.params.n_resamples)
    with atomic_path(job.output.table) as tmp:
        table.to_csv(tmp, index=False)
    write_text_atomic(job.output.markdown, padding_markdown(table, job.params.labels))
    for output in (job.output.table, job.output.markdown):
        write_manifest(output, params_of(job), job.params.seed, extra={"rows": len(table)})

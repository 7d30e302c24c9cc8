"""Snakemake adapter: the methods ranked at each retention (Markdown), from the aggregate summary."""

from kvcache_bench.analysis.ranking import ranking_markdown
from kvcache_bench.analysis.verified import read_summary
from kvcache_bench.files import write_text_atomic
from kvcache_bench.manifest import write_manifest
from kvcache_bench.workflow import current_job, logging_to, params_of

job = current_job(globals())
with logging_to(job):
    summary = read_summary(job.input.summary)  # as aggregate wrote it, or refused naming the file
    write_text_atomic(job.output.ranking, ranking_markdown(summary, job.params.small_n))
    write_manifest(job.output.ranking, params_of(job), None, extra={"rows": len(summary)})

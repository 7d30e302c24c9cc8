"""Snakemake adapter: every configured method must resolve against the installed kvpress (once per study)."""

from kvcache_bench.io import write_json_atomic
from kvcache_bench.manifest import write_manifest
from kvcache_bench.study.cell_checks import check_methods_resolve
from kvcache_bench.workflow import current_job, logging_to, params_of

job = current_job(globals())
with logging_to(job):
    resolved = check_methods_resolve(job.params.methods, job.params.method_kwargs)
    write_json_atomic(job.output.resolved, resolved)
    write_manifest(job.output.resolved, params_of(job), None)

"""Snakemake adapter: measure one method's properties on a tiny model (kvcache_bench.runtime.method_checks)."""

from kvcache_bench.runtime.method_checks import run_check_job
from kvcache_bench.workflow import current_job

run_check_job(current_job(globals()))

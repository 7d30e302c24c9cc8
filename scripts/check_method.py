"""Snakemake adapter: measure one method's properties on a tiny model (kvcache_bench.methods.method_properties)."""

from kvcache_bench.methods.method_properties import run_check_job
from kvcache_bench.workflow import current_job

run_check_job(current_job(globals()))

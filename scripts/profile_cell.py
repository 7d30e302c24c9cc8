"""Snakemake adapter: one study cell's rows under torch.profiler (where its time goes)."""

from kvcache_bench.perf.cell_profile import run_profile_job
from kvcache_bench.workflow import current_job

run_profile_job(current_job(globals()))

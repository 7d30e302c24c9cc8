"""Snakemake adapter: one study cell's rows under torch.profiler (where its time goes)."""

from kvcache_bench.perf.cell_profile import write_cell_profile
from kvcache_bench.runtime.gpu_job import gpu_job
from kvcache_bench.runtime.not_run import refusal_of
from kvcache_bench.workflow import current_job

job = current_job(globals())
if refused := refusal_of(job):  # a refused cell generates nothing, so there is nothing to profile
    raise SystemExit("refused cell, nothing to profile:\n" + "\n".join(f"  - {problem}" for problem in refused))
with gpu_job(job) as entered:
    write_cell_profile(job, entered.loaded)

"""Snakemake adapter: run one (dataset, task, model, method, retention, batch, question mode) cell."""

from kvcache_bench.generation import worker
from kvcache_bench.generation.gpu_job import gpu_job
from kvcache_bench.workflow import current_job

job = current_job(globals())
in_worker = worker.applies_to(job)
# with a model worker this process is a light client: it claims the GPU and checks the data, imports no torch
with gpu_job(job, load=not in_worker) as entered:
    if in_worker:
        worker.run_in_worker(job, entered)
    else:
        from kvcache_bench.generation.job import write_cell_predictions

        write_cell_predictions(job, entered.loaded, entered.data)

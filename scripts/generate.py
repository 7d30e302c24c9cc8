"""Snakemake adapter: run one (dataset, task, model, method, retention, batch, question mode) cell."""

from kvcache_bench.runtime import worker
from kvcache_bench.runtime.gpu_job import gpu_job
from kvcache_bench.runtime.not_run import refusal_of, write_not_run
from kvcache_bench.workflow import current_job

job = current_job(globals())
if refused := refusal_of(job):  # refused by its check job: nothing to generate, and no GPU claimed for it
    write_not_run(job, refused)
else:
    in_worker = worker.applies_to(job)
    # with a model worker this process is a light client: it claims the GPU and checks the data, imports no torch
    with gpu_job(job, load=not in_worker) as entered:
        if in_worker:
            worker.run_in_worker(job, entered)
        else:
            from kvcache_bench.runtime.job import write_cell_predictions

            write_cell_predictions(job, entered.loaded, entered.data)

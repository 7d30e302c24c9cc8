"""Snakemake adapter: run one (dataset, task, model, method, retention, batch, question mode) cell."""

from kvcache_bench.generation import warm_start
from kvcache_bench.workflow import current_job

job = current_job(globals())
if warm_start.applies_to(job):
    # torch is not imported here: a process that has it imported runs the job (each cell still its own job)
    warm_start.run_warm(job, "kvcache_bench.generation.job:run_generate_job", key=job.params.code)
else:
    from kvcache_bench.generation.gpu_job import gpu_job
    from kvcache_bench.generation.job import write_cell_predictions

    with gpu_job(job) as entered:
        write_cell_predictions(job, entered.loaded, entered.data)

"""Snakemake adapter: run one (dataset, task, model, method, retention, batch, question mode) cell."""

from kvcache_bench.workflow import current_job

job = current_job(globals())
if job.params.warm_start and str(job.params.model["device"]).startswith("cpu"):
    # torch is not imported here: a warm process that has it runs the job (each cell still its own job)
    from kvcache_bench.warm_start import run_warm

    run_warm(job, "kvcache_bench.generate_job:run_generate_job", key=job.params.code)
else:
    from kvcache_bench.generate_job import run_generate_job

    run_generate_job(job)

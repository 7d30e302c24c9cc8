"""Snakemake adapter: one press through the batching harness at batch 1 and on left-padded batches
(kvcache_bench.runtime.probes), in a model worker when generation.model_workers is on."""

from kvcache_bench.runtime import worker
from kvcache_bench.runtime.gpu_job import gpu_job
from kvcache_bench.workflow import current_job, settings_of

job = current_job(globals())
# the harness runs the press on the configured attention, as the batching harnesses it reproduces do
attention = settings_of(job).model_settings["attn_implementation"]
in_worker = worker.applies_to(job)
with gpu_job(job, attn_implementation=attention, load=not in_worker) as entered:
    if in_worker:
        worker.run_in_worker(job, entered, work="probe_padding", attention=attention)
    else:
        from kvcache_bench.runtime.probes import write_padding_report

        write_padding_report(job, entered.loaded, entered.data)

"""Snakemake adapter: the device's copy bandwidth and matrix rate, which the hardware floor is charged at."""

from kvcache_bench.files import write_json_atomic
from kvcache_bench.manifest import write_manifest
from kvcache_bench.perf.rates import measure_rates
from kvcache_bench.workflow import current_job, logging_to, params_of

job = current_job(globals())
with logging_to(job):
    p = job.params
    rates = measure_rates(
        p.device,
        p.dtype,
        copy_bytes=p.settings["copy_bytes"],
        matmul_size=p.settings["matmul_size"],
        repeats=p.settings["repeats"],
    )
    write_json_atomic(job.output.rates, rates)
    write_manifest(job.output.rates, params_of(job), None)

"""Snakemake adapter: measure one method's properties on a tiny model (kvcache_bench.generation.method_properties).

Always on the CPU, so always warm-started outside a cluster scheduler: a `warm_start` param would tie every
method's check to the config's generation settings, and another config would rerun them all.
"""

import os

from kvcache_bench.generation import warm_start
from kvcache_bench.workflow import current_job

job = current_job(globals())
if not any(os.environ.get(name) for name in warm_start.SCHEDULER_JOB_VARIABLES):
    warm_start.run_warm(job, "kvcache_bench.generation.method_properties:run_check_job", key=job.params.code)
else:
    from kvcache_bench.generation.method_properties import run_check_job

    run_check_job(job)

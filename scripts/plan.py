"""Snakemake adapter for `snakemake plan`: print every GPU job still to run and its estimated GPU-hours."""

import sys

from kvcache_bench.io import read_jsonl
from kvcache_bench.plan import plan_report
from kvcache_bench.workflow import current_job

job = current_job(globals())
p = job.params
records = [record for path in p.records for record in read_jsonl(path)]
report = plan_report(p.jobs, records, same_cost_as=p.same_cost_as, defaults=p.defaults, gpu_name=p.gpu_name)
sys.stdout.write(report)
if len(job.log) and job.log[0] != "/dev/stderr":
    with open(job.log[0], "w", encoding="utf-8") as handle:
        handle.write(report)

"""Snakemake adapter for `snakemake plan`: print every GPU job still to run and its estimated GPU-hours."""

from kvcache_bench.files import read_jsonl
from kvcache_bench.perf.plan import plan_report
from kvcache_bench.workflow import current_job, print_and_log, settings_of

job = current_job(globals())
p = settings_of(job)
records = [record for path in p.records for record in read_jsonl(path)]
print_and_log(job, plan_report(p.jobs, records, same_cost_as=p.same_cost_as, defaults=p.defaults, gpu_name=p.gpu_name))

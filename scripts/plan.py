"""Snakemake adapter for `snakemake plan`: print every GPU job still to run and its estimated GPU-hours."""

from pathlib import Path

from kvcache_bench.analysis.verified import verify
from kvcache_bench.files import read_jsonl
from kvcache_bench.perf.plan import plan_report
from kvcache_bench.workflow import current_job, print_and_log, settings_of

job = current_job(globals())
p = settings_of(job)
# this workflow's perf records as their perf jobs wrote them (an edited timing would misprice every job); records a
# config names from elsewhere are the user's own files, with no manifest to hold them to
for path in p.records:
    if Path(path).parts[:1] == ("results",):
        verify(path)
records = [record for path in p.records for record in read_jsonl(path)]
print_and_log(job, plan_report(p.jobs, records, same_cost_as=p.same_cost_as, defaults=p.defaults, gpu_name=p.gpu_name))

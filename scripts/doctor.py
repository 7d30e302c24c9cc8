"""Snakemake adapter: which configured methods resolve against the installed kvpress."""

from kvcache_bench.io import atomic_path
from kvcache_bench.methods import doctor
from kvcache_bench.workflow import current_job, logging_to

job = current_job(globals())
with logging_to(job):
    rows = doctor()
    with atomic_path(job.output.table) as tmp:
        tmp.write_text("method\tlabel\tstatus\tpress\n" + "".join(f"{r['method']}\t{r['label']}\t{r['status']}\t{r['press']}\n" for r in rows))
    for row in rows:
        print(f"{row['method']:<20} {row['status']:<8} {row['press']}")

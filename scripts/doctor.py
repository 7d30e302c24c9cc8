"""Snakemake adapter for `snakemake doctor`: print (and log) which methods resolve against the installed kvpress."""

from kvcache_bench.methods.registry import doctor
from kvcache_bench.workflow import current_job, print_and_log

job = current_job(globals())
print_and_log(job, "".join(f"{row['method']:<20} {row['status']:<8} {row['press']}\n" for row in doctor()))

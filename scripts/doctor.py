"""Snakemake adapter for `snakemake doctor`: print (and log) every method's measured properties."""

from kvcache_bench.methods.properties_table import doctor_table
from kvcache_bench.workflow import current_job, print_and_log

job = current_job(globals())
print_and_log(job, doctor_table(list(job.input.properties)))

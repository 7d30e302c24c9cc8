"""Snakemake adapter: generate the demo's seeded synthetic documents in LongBench's schema."""

from kvcache_bench.data.longbench import normalise_rows, write_dataset
from kvcache_bench.data.synthetic import make_synthetic_rows
from kvcache_bench.workflow import current_job, logging_to, params_of, settings_of

job = current_job(globals())
with logging_to(job):
    p = settings_of(job)
    rows = make_synthetic_rows(seed=p.seed, task=p.task, **p.generator)
    facts = write_dataset(normalise_rows(rows, p.task, p.num_examples), job.output.rows, params_of(job), p.seed)
    print(f"wrote {facts['rows']} synthetic rows of {p.dataset}/{p.task}")

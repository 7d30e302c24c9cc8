"""Snakemake adapter: kvpress's needle test as a grid of lengths x depths (kvcache_bench.data.needle)."""

from kvcache_bench.data.needle import make_needle_dataset
from kvcache_bench.workflow import current_job, logging_to, params_of, settings_of

job = current_job(globals())
with logging_to(job):
    p = settings_of(job)
    grid = p.grid
    facts = make_needle_dataset(
        tokenizer_dir=job.input.tokenizer,
        lengths=grid["lengths"],
        depths=grid["depths"],
        needle=grid["needle"],
        question=grid["question"],
        answer_prefix=grid["answer_prefix"],
        local_path=p.local_path,
        rows_path=job.output.rows,
        params=params_of(job),
        seed=p.seed,
    )
    print(
        f"wrote {facts['rows']} needle rows of {p.dataset}: "
        f"{len(grid['lengths'])} lengths x {len(grid['depths'])} depths"
    )

"""Snakemake adapter: one RULER task made by NVIDIA's own generator (kvcache_bench.data.ruler), in kvpress's layout."""

import logging

from kvcache_bench.data.ruler import make_ruler_dataset
from kvcache_bench.workflow import current_job, logging_to, params_of, settings_of

job = current_job(globals())
with logging_to(job):
    p = settings_of(job)
    generator_log = logging.getLogger("kvcache_bench.ruler")
    facts = make_ruler_dataset(
        p.task,
        tokenizer_dir=job.input.tokenizer,
        max_seq_length=p.max_seq_length,
        num_examples=p.num_examples,
        seed=p.seed,
        ruler_layout_path=job.output.ruler_layout,
        rows_path=job.output.rows,
        params=params_of(job),
        log=generator_log.info,
    )
    print(
        f"wrote {facts['rows']} rows of {p.dataset}/{p.task} made by NVIDIA's RULER generator "
        f"(max_seq_length {p.max_seq_length})"
    )

"""Snakemake adapter: per method, score in the three question modes and the paired cost of a changed question."""

import pandas as pd

from kvcache_bench.analysis.plots import question_change, save_figure
from kvcache_bench.manifest import write_manifest
from kvcache_bench.workflow import current_job, logging_to, params_of

job = current_job(globals())
with logging_to(job):
    p = job.params
    summary = pd.read_csv(job.input.summary)
    per_example = pd.read_csv(job.input.per_example, dtype={"id": str})
    figure = question_change(summary, per_example, title=p.title, band_alpha=p.band_alpha, seed=p.seed, n_resamples=p.n_resamples)
    save_figure(figure, job.output.png, job.output.svg)
    write_manifest(job.output.png, params_of(job), p.seed)

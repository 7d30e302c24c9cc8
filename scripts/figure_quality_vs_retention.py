"""Snakemake adapter: the quality-vs-retention figure (one line per method, full cache as reference)."""

import pandas as pd

from kvcache_bench.manifest import write_manifest
from kvcache_bench.plots import quality_vs_retention, save_figure
from kvcache_bench.workflow import current_job, logging_to, params_of

job = current_job(globals())
with logging_to(job):
    figure = quality_vs_retention(pd.read_csv(job.input.summary), title=job.params.title)
    save_figure(figure, job.output.png, job.output.svg)
    write_manifest(job.output.png, params_of(job), None)

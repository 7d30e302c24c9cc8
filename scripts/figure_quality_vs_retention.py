"""Snakemake adapter: quality vs KV cache kept, one line (with CI band) per method, full cache as reference."""

import pandas as pd

from kvcache_bench.analysis.plots import quality_vs_retention, save_figure
from kvcache_bench.manifest import write_manifest
from kvcache_bench.workflow import current_job, logging_to, params_of

job = current_job(globals())
with logging_to(job):
    figure = quality_vs_retention(pd.read_csv(job.input.summary), title=job.params.title, band_alpha=job.params.band_alpha)
    save_figure(figure, job.output.png, job.output.svg)
    write_manifest(job.output.png, params_of(job), None)

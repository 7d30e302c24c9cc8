"""Snakemake adapter: each example's score with a method against its score with full cache."""

import pandas as pd

from kvcache_bench.analysis.plots import paired_scatter, save_figure
from kvcache_bench.manifest import write_manifest
from kvcache_bench.workflow import current_job, logging_to, params_of

job = current_job(globals())
with logging_to(job):
    per_example = pd.read_csv(job.input.per_example, dtype={"id": str})
    figure = paired_scatter(per_example, title=job.params.title, point_alpha=job.params.point_alpha)
    save_figure(figure, job.output.png, job.output.svg)
    write_manifest(job.output.png, params_of(job), None)

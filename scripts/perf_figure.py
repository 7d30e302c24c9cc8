"""Snakemake adapter: one perf figure (wildcard metric: peak_memory, itl or energy_per_token)."""

from kvcache_bench.analysis.figures.style import save_figure
from kvcache_bench.analysis.layout import log_layout
from kvcache_bench.analysis.verified import read_verified_csv
from kvcache_bench.manifest import write_manifest
from kvcache_bench.perf.plots import perf_vs_retention
from kvcache_bench.workflow import current_job, logging_to, params_of, settings_of

job = current_job(globals())
with logging_to(job):
    figure = perf_vs_retention(read_verified_csv(job.input.summary), settings_of(job).metric, labels=job.params.labels)
    layout = save_figure(figure, job.output.png, job.output.svg)
    log_layout(layout, job.output.png)
    write_manifest(job.output.png, params_of(job), None, extra={"layout": layout})

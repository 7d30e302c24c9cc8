"""Snakemake adapter: quality vs KV cache kept, the highlighted methods against the strongest and the classic
baselines."""

from kvcache_bench.analysis.figures.quality_vs_retention import quality_vs_retention
from kvcache_bench.analysis.figures.style import save_figure
from kvcache_bench.analysis.layout import log_layout
from kvcache_bench.analysis.verified import read_summary
from kvcache_bench.manifest import write_manifest
from kvcache_bench.workflow import current_job, logging_to, params_of

job = current_job(globals())
with logging_to(job):
    p = job.params
    figure = quality_vs_retention(
        read_summary(job.input.summary),  # verified: an edited table, or an interval off its point, is refused
        title=p.title,
        band_alpha=p.band_alpha,
        highlight=list(p.highlight),
        labels=dict(p.highlight),
        strongest=p.strongest,
    )
    layout = save_figure(figure, job.output.png, job.output.svg)
    log_layout(layout, job.output.png)
    write_manifest(job.output.png, params_of(job), None, extra={"layout": layout})

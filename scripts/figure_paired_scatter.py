"""Snakemake adapter: each example's score with a method against its score with full cache."""

from kvcache_bench.analysis.figures.paired_scatter import paired_scatter
from kvcache_bench.analysis.figures.style import save_figure
from kvcache_bench.analysis.layout import log_layout
from kvcache_bench.analysis.verified import read_per_example
from kvcache_bench.manifest import write_manifest
from kvcache_bench.workflow import current_job, logging_to, params_of

job = current_job(globals())
with logging_to(job):
    p = job.params
    per_example = read_per_example(job.input.per_example)  # as aggregate wrote it, or refused naming the file
    figure = paired_scatter(
        per_example,
        title=p.title,
        point_alpha=p.point_alpha,
        highlight=list(p.highlight),
        labels=dict(p.highlight),
        strongest=p.strongest,
    )
    layout = save_figure(figure, job.output.png, job.output.svg)
    log_layout(layout, job.output.png)
    write_manifest(job.output.png, params_of(job), None, extra={"layout": layout})

"""Snakemake adapter: full cache at each batch size, with CIs and the paired difference to batch 1."""

from kvcache_bench.analysis.figures.batch_size import batch_size_sensitivity
from kvcache_bench.analysis.figures.style import save_figure
from kvcache_bench.analysis.layout import log_layout
from kvcache_bench.analysis.verified import read_summary
from kvcache_bench.manifest import write_manifest
from kvcache_bench.workflow import current_job, logging_to, params_of

job = current_job(globals())
with logging_to(job):
    figure = batch_size_sensitivity(read_summary(job.input.summary), title=job.params.title)
    layout = save_figure(figure, job.output.png, job.output.svg)
    log_layout(layout, job.output.png)
    write_manifest(job.output.png, params_of(job), None, extra={"layout": layout})

"""Snakemake adapter: per press, the score change left padding caused and the share of pads it kept."""

from kvcache_bench.analysis.figures.style import save_figure
from kvcache_bench.analysis.layout import log_layout
from kvcache_bench.analysis.padding import padding_figure
from kvcache_bench.analysis.verified import read_verified_csv
from kvcache_bench.manifest import write_manifest
from kvcache_bench.workflow import current_job, logging_to, params_of

job = current_job(globals())
with logging_to(job):
    figure = padding_figure(read_verified_csv(job.input.table), title=job.params.title, labels=job.params.labels)
    layout = save_figure(figure, job.output.png, job.output.svg)
    log_layout(layout, job.output.png)
    write_manifest(job.output.png, params_of(job), None, extra={"layout": layout})

"""Snakemake adapter: score against the turn of the conversation in the multi-turn mode, the full cache as the
reference at each turn."""

from kvcache_bench.analysis.figures.multi_turn import score_by_turn
from kvcache_bench.analysis.figures.style import save_figure
from kvcache_bench.analysis.layout import log_layout
from kvcache_bench.analysis.verified import read_multi_turn_by_turn, read_summary
from kvcache_bench.manifest import write_manifest
from kvcache_bench.workflow import current_job, logging_to, params_of

job = current_job(globals())
with logging_to(job):
    p = job.params
    figure = score_by_turn(
        read_multi_turn_by_turn(job.input.by_turn),  # both as aggregate wrote them, or refused naming the file
        read_summary(job.input.summary),
        title=p.title,
        band_alpha=p.band_alpha,
        highlight=list(p.highlight),
        labels=dict(p.highlight),
        strongest=p.strongest,
    )
    layout = save_figure(figure, job.output.png, job.output.svg)
    log_layout(layout, job.output.png)
    write_manifest(job.output.png, params_of(job), None, extra={"layout": layout})

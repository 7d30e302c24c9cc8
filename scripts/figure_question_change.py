"""Snakemake adapter: per method and retention, its score in each question mode and the paired cost of a changed
question."""

from kvcache_bench.analysis.figures.question_change import question_change
from kvcache_bench.analysis.figures.style import save_figure
from kvcache_bench.analysis.layout import log_layout
from kvcache_bench.analysis.verified import read_per_example, read_summary
from kvcache_bench.manifest import write_manifest
from kvcache_bench.workflow import current_job, logging_to, params_of

job = current_job(globals())
with logging_to(job):
    p = job.params
    summary = read_summary(job.input.summary)  # both as aggregate wrote them, or refused naming the file
    per_example = read_per_example(job.input.per_example)
    figure = question_change(
        summary,
        per_example,
        title=p.title,
        band_alpha=p.band_alpha,
        seed=p.seed,
        n_resamples=p.n_resamples,
        highlight=list(p.highlight),
        labels=dict(p.highlight),
        strongest=p.strongest,
    )
    layout = save_figure(figure, job.output.png, job.output.svg)
    log_layout(layout, job.output.png)
    write_manifest(job.output.png, params_of(job), p.seed, extra={"layout": layout})

"""Snakemake adapter: one press's needle heat maps beside the full cache's (kvcache_bench.analysis.needle_heatmap)."""

from kvcache_bench.analysis.needle_heatmap import heatmap_figure, save, score_grid
from kvcache_bench.files import read_jsonl
from kvcache_bench.manifest import verify_against_manifest, write_manifest
from kvcache_bench.workflow import current_job, logging_to, params_of

job = current_job(globals())
with logging_to(job):
    rows = read_jsonl(job.input.rows)
    scores = list(job.input.scores) if isinstance(job.input.scores, list) else [job.input.scores]
    panels = []
    for label, path in zip(job.params.labels, scores):
        verify_against_manifest(path)
        panels.append((label, *score_grid(rows, read_jsonl(path))))
    save(heatmap_figure(panels, job.params.title), job.output.png, job.output.svg)
    write_manifest(job.output.png, params_of(job), None, extra={"panels": job.params.labels, "scores": scores})

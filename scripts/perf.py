"""Snakemake adapter: measure one (model, method, retention, context length, batch) perf cell."""

import torch

from kvcache_bench.generation.loading import ModelSettings
from kvcache_bench.io import read_jsonl, write_jsonl_atomic
from kvcache_bench.manifest import write_manifest
from kvcache_bench.perf.runs import PerfCell, PerfSettings, run_perf_job
from kvcache_bench.workflow import current_job, logging_to, params_of, settings_of

job = current_job(globals())
with logging_to(job):
    p = settings_of(job)
    torch.set_num_threads(max(1, int(job.threads)))
    records, accounting = run_perf_job(
        PerfCell(p.model, p.method, p.retention, p.context, p.batch_size),
        model_settings=ModelSettings(**p.model_settings),
        settings=PerfSettings(**p.settings),
        context_source=p.context_source,
        rows=read_jsonl(job.input.rows) if "rows" in dict(job.input.items()) else None,
        hardware=p.hardware,
    )
    write_jsonl_atomic(job.output.records, records)
    write_manifest(job.output.records, params_of(job), p.settings["seed"], extra={"records": len(records), "job": accounting})

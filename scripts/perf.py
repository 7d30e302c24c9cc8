"""Snakemake adapter: measure one (model, method, retention, context length, batch) perf cell."""

from kvcache_bench.files import read_jsonl, write_jsonl_atomic
from kvcache_bench.manifest import write_manifest
from kvcache_bench.perf.runs import PerfCell, PerfSettings, run_perf_job
from kvcache_bench.runtime.gpu_job import gpu_job
from kvcache_bench.runtime.not_run import refusal_of
from kvcache_bench.workflow import current_job, params_of, settings_of

job = current_job(globals())
p = settings_of(job)
if refused := refusal_of(job):  # refused from its method's measurement: a perf record would time nothing meant
    raise SystemExit(
        "refused perf target (from its method's measured properties):\n"
        + "\n".join(f"  - {problem}" for problem in refused)
    )
# contexts cut from documents need the tokenizer; filler contexts are token ids (a built shape may have none)
with gpu_job(job, tokenizer=p.context_source == "dataset") as entered:
    records, accounting = run_perf_job(
        PerfCell(p.model, p.method, p.retention, p.context, p.batch_size),
        loaded=entered.loaded,
        settings=PerfSettings(**p.settings),
        context_source=p.context_source,
        rows=read_jsonl(job.input.rows) if "rows" in dict(job.input.items()) else None,
        hardware=p.hardware,
    )
    write_jsonl_atomic(job.output.records, records)
    write_manifest(
        job.output.records, params_of(job), p.settings["seed"], extra={"records": len(records), "job": accounting}
    )

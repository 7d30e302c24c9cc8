"""Snakemake adapter: one press through the batching harness at batch 1 and on left-padded batches."""

from kvcache_bench.generation.gpu_job import gpu_job
from kvcache_bench.generation.probes import interleave_by_length, padding_effect
from kvcache_bench.io import read_jsonl, write_json_atomic
from kvcache_bench.manifest import write_manifest
from kvcache_bench.workflow import current_job, params_of, settings_of

job = current_job(globals())
p = settings_of(job)
settings = p.model_settings
# the harness runs the press on the configured attention, as the batching harnesses it reproduces do
with gpu_job(job, attn_implementation=settings["attn_implementation"]) as entered:
    model, tokenizer = entered.loaded.model, entered.loaded.tokenizer
    rows = interleave_by_length([read_jsonl(path)[: p.examples_per_dataset] for path in job.input.rows])
    report = padding_effect(
        model,
        tokenizer,
        rows,
        task=p.task,
        method=p.method,
        retention=p.retention,
        batch_size=p.batch_size,
        max_new_tokens=p.max_new_tokens,
        max_context_tokens=settings["max_context_tokens"],
        method_kwargs=p.method_kwargs,
        seed=p.seed,
    )
    write_json_atomic(job.output.report, report)
    write_manifest(job.output.report, params_of(job), p.seed, extra={"examples": len(rows)})
    print(f"{p.method}: {report['changed_answers']}/{len(rows)} answers changed; score {report['score_batch_1']} -> {report['score_padded_batch']}")

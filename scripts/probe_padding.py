"""Snakemake adapter: one press through the batching harness at batch 1 and on left-padded batches."""

import torch

from kvcache_bench.generation.loading import load_model, load_tokenizer, pick_device
from kvcache_bench.generation.probes import interleave_by_length, padding_effect
from kvcache_bench.io import read_jsonl, write_json_atomic
from kvcache_bench.manifest import verify_against_manifest, write_manifest
from kvcache_bench.workflow import current_job, logging_to, params_of, settings_of

job = current_job(globals())
with logging_to(job):
    p = settings_of(job)
    for path in job.input.rows:  # as generate: never probe rows that are not what was written
        verify_against_manifest(path)
    torch.set_num_threads(max(1, int(job.threads)))
    settings = p.model_settings
    tokenizer = load_tokenizer(settings["path"], settings["trust_remote_code"])
    model = load_model(
        settings["path"], settings["dtype"], settings["attn_implementation"], pick_device(settings["device"]), settings["trust_remote_code"]
    )
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

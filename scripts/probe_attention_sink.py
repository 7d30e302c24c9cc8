"""Snakemake adapter: per-layer attention on position 0 over a task's first prompts (eager attention)."""

import torch

from kvcache_bench.generation.loading import load_model, load_tokenizer, pick_device
from kvcache_bench.generation.probes import attention_sink_report
from kvcache_bench.io import read_jsonl, write_json_atomic
from kvcache_bench.manifest import verify_against_manifest, write_manifest
from kvcache_bench.workflow import current_job, logging_to, params_of, settings_of

job = current_job(globals())
with logging_to(job):
    p = settings_of(job)
    verify_against_manifest(job.input.rows)  # as generate: never probe rows that are not what was written
    torch.manual_seed(p.seed)
    torch.set_num_threads(max(1, int(job.threads)))
    settings = p.model_settings
    tokenizer = load_tokenizer(settings["path"], settings["trust_remote_code"])
    model = load_model(settings["path"], settings["dtype"], "eager", pick_device(settings["device"]), settings["trust_remote_code"])
    rows = read_jsonl(job.input.rows)[: p.examples]
    report = attention_sink_report(model, tokenizer, rows, p.task, settings["max_context_tokens"])
    write_json_atomic(job.output.report, report)
    write_manifest(job.output.report, params_of(job), p.seed, extra={"examples": len(rows)})
    print(f"attention on position 0, layers {report['middle_layers']}: {report['mean_attention_on_position_0_middle_layers']}")

"""Snakemake adapter: per-layer attention on position 0 over a task's first prompts (eager attention)."""

import torch

from kvcache_bench.files import read_jsonl, write_json_atomic
from kvcache_bench.manifest import write_manifest
from kvcache_bench.runtime.gpu_job import gpu_job
from kvcache_bench.runtime.probes import attention_sink_report
from kvcache_bench.workflow import current_job, params_of, settings_of

job = current_job(globals())
p = settings_of(job)
with gpu_job(job, attn_implementation="eager") as entered:  # attention weights need eager attention
    torch.manual_seed(p.seed)
    rows = read_jsonl(job.input.rows)[: p.examples]
    report = attention_sink_report(
        entered.loaded.model,
        entered.loaded.tokenizer,
        rows,
        p.task,
        p.model_settings["max_context_tokens"],
        chat_template=entered.loaded.settings.chat_template,
    )
    write_json_atomic(job.output.report, report)
    write_manifest(job.output.report, params_of(job), p.seed, extra={"examples": len(rows)})
    print(
        f"attention on position 0, layers {report['middle_layers']}: "
        f"{report['mean_attention_on_position_0_middle_layers']}"
    )

"""Snakemake adapter: a random-init model of a named shape, saved with Llama 3.1's tokenizer."""

import sys
from pathlib import Path

from kvcache_bench.data.shaped_model import build_shaped_model
from kvcache_bench.manifest import write_manifest
from kvcache_bench.runtime.gpu_job import gpu_job
from kvcache_bench.workflow import current_job, params_of

job = current_job(globals())
with gpu_job(job):  # builds the model it saves: nothing to load
    p = job.params
    facts = build_shaped_model(p.shape, p.seed, job.input.tokenizer, job.output.model_dir, p.dtype, p.device)
    write_manifest(Path(job.output.model_dir) / "config.json", params_of(job), p.seed, extra=facts)
    print(
        f"{p.shape}: {facts['parameters']:,} random-init parameters (seed {p.seed}, {facts['init_device']})"
        f" -> {job.output.model_dir}",
        file=sys.stderr,
    )

"""Snakemake adapter: build the demo's random-init tiny Llama and save it with save_pretrained."""

from kvcache_bench.data.demo_model import build_demo_model
from kvcache_bench.manifest import write_manifest
from kvcache_bench.workflow import current_job, logging_to, params_of

job = current_job(globals())
with logging_to(job):
    out = build_demo_model(job.input.model_config, job.input.tokenizer, job.params.seed, job.output.model_dir)
    # Random on purpose, and whole: every tensor saved, so it passes the loader's whole-checkpoint check.
    weights = f"random init (seed {job.params.seed}), built by this workflow: no trained checkpoint to be incomplete"
    write_manifest(out / "config.json", params_of(job), job.params.seed, extra={"weights": weights})

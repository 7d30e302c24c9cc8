"""Snakemake adapter: turn a model file installed packages ship (a GGUF, whole or in chunks) into a model directory."""

from pathlib import Path

from kvcache_bench.data.packaged_models import materialise_packaged_model
from kvcache_bench.manifest import write_manifest
from kvcache_bench.workflow import current_job, logging_to, params_of, settings_of

job = current_job(globals())
with logging_to(job):
    p = settings_of(job)
    facts = materialise_packaged_model(
        p.package, p.gguf_file, job.output.model_dir, version=p.version, sha256=p.sha256, chunks=p.chunks
    )
    write_manifest(Path(job.output.model_dir) / "config.json", params_of(job), None, extra=facts)
    source = facts["source"]
    made_from = (
        " + ".join(f"{c['package']} {c['package_version']}" for c in source["chunks"])
        if "chunks" in source
        else f"{p.package} {source['package_version']}: {p.gguf_file}"
    )
    print(f"{made_from} (GGUF sha256 {source['gguf_sha256'][:12]}) -> {job.output.model_dir}")

"""Snakemake adapter: Llama 3.1's tokenizer directory from the tokenizer.model Meta's llama-models package ships."""

import sys
from pathlib import Path

from kvcache_bench.data.llama3_tokenizer import materialise_llama3_tokenizer
from kvcache_bench.manifest import write_manifest
from kvcache_bench.workflow import current_job, logging_to, params_of

job = current_job(globals())
with logging_to(job):
    p = job.params
    facts = materialise_llama3_tokenizer(job.output.tokenizer_dir, version=p.version, sha256=p.sha256)
    write_manifest(Path(job.output.tokenizer_dir) / "tokenizer.json", params_of(job), None, extra=facts)
    print(
        f"llama-models {facts['source']['package_version']}: {facts['source']['file']} -> {job.output.tokenizer_dir}",
        file=sys.stderr,
    )

"""Snakemake adapter: each engine's examples/s on the same cells beside the hardware floor (the README's table)."""

import csv
import io
import json
from pathlib import Path

from kvcache_bench.files import read_jsonl, write_text_atomic
from kvcache_bench.manifest import verify_against_manifest, write_manifest
from kvcache_bench.perf.floor import engine_rows, markdown_table
from kvcache_bench.workflow import current_job, logging_to, params_of

job = current_job(globals())
with logging_to(job):
    p = job.params
    for path in job.input.predictions:
        verify_against_manifest(path)
    cells = [
        {"model": model, "engine": engine, "kernels": kernels, "records": read_jsonl(path)}
        for (model, engine, kernels), path in zip(p.cells, job.input.predictions)
    ]
    shape = json.loads((Path(job.input.model_dir) / "config.json").read_text())
    rows = engine_rows(cells, shape, p.dtype, json.loads(Path(job.input.rates).read_text()))
    table = io.StringIO()
    writer = csv.DictWriter(table, fieldnames=sorted({key for row in rows for key in row}))
    writer.writeheader()
    writer.writerows(rows)
    write_text_atomic(job.output.csv, table.getvalue())
    write_text_atomic(job.output.md, markdown_table(rows))
    for output in (job.output.csv, job.output.md):
        write_manifest(output, params_of(job), None)

"""Snakemake adapter: the study's cells in kvpress's evaluation layout (predictions.csv, metrics.json, config.yaml)."""

import json
import logging

from kvcache_bench.analysis.kvpress_export import FILES, dump_config, export_cell, index_frame
from kvcache_bench.analysis.verified import verified_files
from kvcache_bench.files import atomic_path, read_jsonl, write_text_atomic
from kvcache_bench.manifest import verify_against_manifest, write_manifest
from kvcache_bench.workflow import current_job, logging_to, params_of

job = current_job(globals())
with logging_to(job):
    p = job.params
    rows = {}
    for path in verified_files(job.input.rows):  # the questions and answers exported beside each prediction
        rows.update({row["_id"]: row for row in read_jsonl(path)})
    exported, left_out, written = [], list(p.left_out), []
    for entry, predictions, scores in zip(p.exported, job.input.predictions, job.input.scores):
        manifest = verify_against_manifest(scores)
        verified_files(predictions)
        if manifest.get("not_run"):  # refused by its check job: nothing to export, and the index says why
            left_out.append({**entry["cell"], "why": "not run: " + "; ".join(manifest["not_run"])})
            continue
        exported.append(entry)
        written.append(export_cell(entry, scores, predictions, rows, p.max_new_tokens[entry["cell"]["task"]]))
    for entry, files in zip(exported, written):
        directory = entry["directory"]  # under job.output.export (results/kvpress)
        with atomic_path(f"{directory}/predictions.csv") as tmp:
            files["predictions.csv"].to_csv(tmp, index=False)
        write_text_atomic(f"{directory}/metrics.json", json.dumps(files["metrics.json"], indent=4))
        write_text_atomic(f"{directory}/config.yaml", dump_config(files["config.yaml"]))
        for name in FILES:
            write_manifest(f"{directory}/{name}", params_of(job), p.seed, extra={"export": files["facts"]})
    index = index_frame(exported, left_out, written)
    index_path = f"{job.output.export}/index.csv"
    with atomic_path(index_path) as tmp:
        index.to_csv(tmp, index=False)
    write_manifest(index_path, params_of(job), p.seed, extra={"rows": len(index)})
    for cell in left_out:
        logging.getLogger("kvcache_bench").info("not exported: %s", cell["why"])

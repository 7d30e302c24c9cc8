"""The generate rule's job: one cell's predictions and their manifest, from the job's input, params and log.

scripts/generate.py runs it in its own process, or, with ``generation.warm_start``, hands it to a warm
process (kvcache_bench.generation.warm_start) that has torch, transformers and kvpress imported already.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import torch

from kvcache_bench.analysis.measured import cell_warnings, measure_cell
from kvcache_bench.generation.cell_runner import run_cell
from kvcache_bench.generation.gpus import pin_gpus_for_job
from kvcache_bench.generation.kvpress_pipeline import KVPRESS_PIPELINE, run_cell_on_kvpress_pipeline
from kvcache_bench.generation.loading import ModelSettings
from kvcache_bench.io import read_jsonl, write_jsonl_atomic
from kvcache_bench.manifest import verify_against_manifest, write_manifest
from kvcache_bench.study.config_checks import remote_code_warning
from kvcache_bench.study.sources import hub_revision
from kvcache_bench.workflow import logging_to, params_of, settings_of


def run_generate_job(job) -> None:
    with logging_to(job):
        pin_gpus_for_job(job)  # first: CUDA reads CUDA_VISIBLE_DEVICES once, when it starts
        p = settings_of(job)
        data = verify_against_manifest(job.input.rows)
        if warning := remote_code_warning(p.model_settings):
            logging.getLogger("kvcache_bench").warning(warning)
        torch.set_num_threads(max(1, int(job.threads)))
        engine = run_cell_on_kvpress_pipeline if p.engine == KVPRESS_PIPELINE else run_cell
        records = engine(
            read_jsonl(job.input.rows),
            task=p.task,
            model_settings=ModelSettings(**p.model_settings),
            method=p.method,
            retention=p.retention,
            batch_size=p.batch_size,
            decode_batch_size=p.decode_batch_size,
            question_mode=p.question_mode,
            max_new_tokens=p.max_new_tokens,
            seed=p.seed,
            method_kwargs=p.method_kwargs,
        )
        count = write_jsonl_atomic(job.output.predictions, records)
        measured = measure_cell(read_jsonl(job.output.predictions), p.retention)
        for warning in cell_warnings(SimpleNamespace(retention=p.retention, **measured)):
            logging.getLogger("kvcache_bench").warning("measured other than asked: %s", warning)
        write_manifest(job.output.predictions, params_of(job), p.seed, extra={
            "records": count, "data_sha256": data["content"]["sha256"],
            "model_hub_revision": hub_revision(p.model_settings["path"]),  # None for a local folder: its files are inputs
        })

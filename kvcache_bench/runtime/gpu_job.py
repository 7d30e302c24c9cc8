"""The one entry of every job that declares a GPU (``resources: gpu=``): claim the GPU, set threads, log,
verify the job's data against its manifests, load the model.

Each rule used to do its own subset of these, so perf, probe and canary-training jobs all landed on GPU 0
beside each other while only ``generate`` claimed one. ``tests/test_gpu_jobs.py`` finds the GPU rules from
their ``resources:`` and checks that each one's script enters here.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

from kvcache_bench.manifest import verify_against_manifest
from kvcache_bench.runtime.gpus import GpuPin, pin_gpus_for_job
from kvcache_bench.workflow import logging_to, params_of

log = logging.getLogger("kvcache_bench")


@dataclass
class GpuJob:
    job: object
    pin: GpuPin
    data: dict  # path -> its manifest, for every data input (``rows``) of the job
    loaded: object | None  # engine.loading.LoadedModel, when the job loaded a model here


def data_inputs(job) -> list[str]:
    """The job's data files (its ``rows`` input, one path or several): never used unless their manifests agree."""
    rows = dict(job.input.items()).get("rows")
    if rows is None:
        return []
    return [rows] if isinstance(rows, str) else [str(path) for path in rows]


def model_params_of(job) -> dict | None:
    model = params_of(job).get("model_settings")
    return model if isinstance(model, dict) else None


def method_attention(job) -> str | None:
    """The attention the job's method needs (eager for a press that reads attention weights), if it has one."""
    from kvcache_bench.methods.registry import attention_implementation_for

    params, model = params_of(job), model_params_of(job)
    if "method" not in params or model is None:
        return None
    return attention_implementation_for(params["method"], model["attn_implementation"], params.get("custom_methods"))


@contextlib.contextmanager
def gpu_job(job, *, attn_implementation: str | None = None, tokenizer: bool = True, load: bool = True):
    """Run the body as a GPU job: the rule's log, a GPU of its own, its data verified, its model loaded.

    ``attn_implementation`` defaults to what the job's method needs; ``load=False`` does everything but
    importing torch and loading (a generate job whose model lives in a worker, ``runtime.worker``).
    """
    from kvcache_bench.study.config_checks import remote_code_warning

    with logging_to(job):
        pin = pin_gpus_for_job(job)  # first: CUDA reads CUDA_VISIBLE_DEVICES once, when it starts
        data = {path: verify_against_manifest(path) for path in data_inputs(job)}
        model = model_params_of(job)
        if model is not None and (warning := remote_code_warning(model)):
            log.warning(warning)
        loaded = None
        if load:
            import torch

            torch.set_num_threads(max(1, int(job.threads)))
            if model is not None:
                from kvcache_bench.engine.loading import ModelSettings, load_for_settings

                settings = ModelSettings(**model)
                attention = attn_implementation or method_attention(job) or settings.attn_implementation
                loaded = load_for_settings(settings, attn_implementation=attention, tokenizer=tokenizer)
                log.info(
                    "loaded %s (%s, %s attention) on %s in %.2fs",
                    settings.path,
                    settings.dtype,
                    attention,
                    loaded.device,
                    loaded.load_seconds,
                )
        yield GpuJob(job, pin, data, loaded)

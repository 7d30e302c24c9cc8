"""Devices, tokenizers, models and their stop tokens: how every stage loads what it runs."""

from __future__ import annotations

import importlib.util
import os
import time
from dataclasses import dataclass

import torch

from kvcache_bench.engine.checkpoints import damaged_model_files, require_whole_checkpoint
from kvcache_bench.engine.kernels import TRANSFORMERS, kernels_problem, use_kernels
from kvcache_bench.engine.layer_types import attach as attach_layer_types

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

LOAD_HELP = (
    "Could not load {what} from {path!r}: {error}\n"
    "  * gated weights (meta-llama/...) need a token: export HF_TOKEN=... (read from the environment only);\n"
    "  * with no network, download the weights elsewhere and set models.<name>.path to the local directory,\n"
    "    or populate the Hugging Face cache and export HF_HUB_OFFLINE=1."
)


class ModelUnavailableError(RuntimeError):
    pass


def pick_device(requested: str = "auto") -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


def device_problem(device: torch.device, attention: str) -> str | None:
    """A device this machine lacks, or FlashAttention where it cannot run, named by the config key that asks for it
    (the parse cannot tell: it may run on another machine than the job)."""
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        return (
            f"generation.device is {str(device)!r}, but torch {torch.__version__} sees "
            f"{torch.cuda.device_count()} GPU(s) here: run the job on a GPU node, or set generation.device: cpu"
        )
    if attention == "flash_attention_2" and device.type != "cuda":
        return f"models.<name>.attn_implementation is flash_attention_2, but the model runs on {device}: use sdpa"
    if attention == "flash_attention_2" and importlib.util.find_spec("flash_attn") is None:
        return "models.<name>.attn_implementation is flash_attention_2, but flash_attn is not installed: use sdpa"
    return None


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def load_tokenizer(path: str, trust_remote_code: bool = False, revision: str | None = None):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(
            path, trust_remote_code=trust_remote_code, token=os.environ.get("HF_TOKEN"), **_pinned(revision)
        )
    except Exception as error:
        if damaged := damaged_model_files(path):
            raise ModelUnavailableError(
                f"Could not load the tokenizer from {path!r}: damaged file(s):\n  " + "\n  ".join(damaged)
            ) from error
        raise ModelUnavailableError(LOAD_HELP.format(what="the tokenizer", path=path, error=error)) from error


def _pinned(revision: str | None) -> dict:
    """A hub commit, tag or branch the config pins (``models.<name>.revision``); nothing for a local folder."""
    return {"revision": revision} if revision else {}


def load_model(
    path: str,
    dtype: str,
    attn_implementation: str,
    device: torch.device,
    trust_remote_code: bool = False,
    revision: str | None = None,
):
    from transformers import AutoModelForCausalLM

    try:
        model, loading_info = AutoModelForCausalLM.from_pretrained(
            path,
            dtype=DTYPES[dtype],
            attn_implementation=attn_implementation,
            trust_remote_code=trust_remote_code,
            token=os.environ.get("HF_TOKEN"),
            output_loading_info=True,
            **_pinned(revision),
        )
    except Exception as error:
        if damaged := damaged_model_files(path):  # a local folder's file, not a download problem
            raise ModelUnavailableError(
                f"Could not load the model from {path!r}: damaged file(s):\n  " + "\n  ".join(damaged)
            ) from error
        raise ModelUnavailableError(LOAD_HELP.format(what="the model", path=path, error=error)) from error
    require_whole_checkpoint(loading_info, path)
    return model.to(device).eval()


def stop_token_ids(model, tokenizer) -> set[int]:
    """The model's own end-of-turn tokens (Llama 3.1 lists <|eot_id|> and <|eom_id|> beside EOS)."""
    configured = model.generation_config.eos_token_id
    ids = set(configured if isinstance(configured, list) else [configured] if configured is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


@dataclass(frozen=True)
class ModelSettings:
    path: str
    max_context_tokens: int  # no default here: the schema's (LongBench's 127,500 for 128k models) is the one
    dtype: str = "bfloat16"
    attn_implementation: str = "sdpa"
    trust_remote_code: bool = False
    device: str = "auto"
    revision: str | None = None  # a pinned hub commit, tag or branch: a param, so a new pin reruns its cells
    kernels: str = TRANSFORMERS  # RMSNorm/MLP/RoPE: transformers' modules or Liger's fused ones (engine.kernels)
    # what a press does to sliding-window layers (engine.layer_types: keep, compress); None: the documented default
    sliding_layers: str | None = None
    chat_template: bool = True  # False: every prompt raw, even where the tokenizer has a template (a base model)


@dataclass
class LoadedModel:
    """A model ready to generate: what every GPU (or CPU) job of the workflow starts from."""

    model: object
    tokenizer: object | None
    device: torch.device
    stop_ids: frozenset[int]
    attn_implementation: str
    load_seconds: float
    settings: ModelSettings


def load_for_settings(
    settings: ModelSettings, *, attn_implementation: str | None = None, tokenizer: bool = True
) -> LoadedModel:
    """The one way the workflow loads a model: its tokenizer, weights on the settings' device, and stop tokens.

    ``attn_implementation`` overrides the settings' (a press that reads attention weights needs eager);
    ``tokenizer=False`` for a job that feeds token ids of its own (a model built with random weights may
    have no tokenizer).
    """
    start = time.perf_counter()
    device = pick_device(settings.device)
    attention = attn_implementation or settings.attn_implementation
    if problem := device_problem(device, attention) or kernels_problem(settings.kernels, device):
        raise ModelUnavailableError(problem)  # before anything loads: torch's, transformers' or Triton's error, late
    loaded_tokenizer = (
        load_tokenizer(settings.path, settings.trust_remote_code, settings.revision) if tokenizer else None
    )
    model = load_model(settings.path, settings.dtype, attention, device, settings.trust_remote_code, settings.revision)
    use_kernels(model, settings.kernels)
    # which layers a press compresses and each layer's RoPE: the model's config and the study's setting decide, not
    # the class transformers loaded
    attach_layer_types(model, settings.sliding_layers)
    stop_ids = stop_token_ids(model, loaded_tokenizer) if loaded_tokenizer is not None else set()
    return LoadedModel(
        model, loaded_tokenizer, device, frozenset(stop_ids), attention, time.perf_counter() - start, settings
    )


def loaded_with_attention(
    settings: ModelSettings, loaded: LoadedModel | None, attention: str, needed_by: str
) -> LoadedModel:
    """The model a job runs on: ``loaded`` (a worker's) when it has ``attention``, or the settings' model loaded now.

    A worker's model on another attention would run ``needed_by`` on the wrong kernel: refused, not reloaded."""
    if loaded is None:
        return load_for_settings(settings, attn_implementation=attention)
    if loaded.attn_implementation != attention:
        raise ValueError(
            f"{needed_by} needs attention {attention!r} but the loaded model has {loaded.attn_implementation!r}"
        )
    return loaded

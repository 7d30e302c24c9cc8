"""Random-init models of a named shape with Llama 3.1's tokenizer: a cost run needs the shape, not the weights.

A config asks for one with ``build: {shape: llama-3.1-8b, seed: 0}`` (rule build_shaped_model). The model
is Llama-3.1-8B's architecture field for field (``data.model_shapes``) with random weights drawn
from the seed on the job's device, and it is saved with Llama 3.1's own tokenizer
(``data.llama3_tokenizer``), so prompt lengths, truncation and stop tokens are Llama 3.1's; its answers are
noise, and its manifest says ``random_init: true``.
"""

from __future__ import annotations

import os
from pathlib import Path

from kvcache_bench.data.llama3_tokenizer import stop_token_ids
from kvcache_bench.data.model_shapes import LLAMA_31_8B_SHAPE, TINY_LLAMA_SHAPE
from kvcache_bench.data.packaged_models import file_digests
from kvcache_bench.files import atomic_directory

SHAPES = {
    "llama-3.1-8b": LLAMA_31_8B_SHAPE,
    # the same family at toy size with Llama 3.1's whole vocabulary: the workflow's path on a CPU in seconds
    "llama-3.1-tiny": {**TINY_LLAMA_SHAPE, "vocab_size": LLAMA_31_8B_SHAPE["vocab_size"]},
}


class ShapedModelError(ValueError):
    pass


def shaped_config(shape: str, tokenizer) -> dict:
    """The shape's LlamaConfig settings with the tokenizer's special ids; refuses a tokenizer that does not fit."""
    if shape not in SHAPES:
        raise ShapedModelError(f"unknown model shape {shape!r}; known: {sorted(SHAPES)}")
    settings = dict(SHAPES[shape])
    if len(tokenizer) != settings["vocab_size"]:
        raise ShapedModelError(
            f"shape {shape!r} has {settings['vocab_size']} embeddings but the tokenizer {len(tokenizer)} tokens"
        )
    settings.update(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=stop_token_ids(tokenizer), pad_token_id=tokenizer.pad_token_id
    )
    return settings


def build_shaped_model(
    shape: str,
    seed: int,
    tokenizer_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    dtype: str,
    device: str = "auto",
) -> dict:
    """Build, save (whole or not at all) and describe the random-init model; returns its manifest's facts."""
    from transformers import AutoTokenizer

    from kvcache_bench.data.model_shapes import build_random_model
    from kvcache_bench.engine.loading import DTYPES, pick_device

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    settings = shaped_config(shape, tokenizer)
    where = pick_device(device)
    model = build_random_model(settings, DTYPES[dtype], where, seed)
    generation = model.generation_config
    generation.bos_token_id, generation.eos_token_id, generation.pad_token_id = (
        settings["bos_token_id"],
        settings["eos_token_id"],
        settings["pad_token_id"],
    )
    out_dir = Path(out_dir)
    with atomic_directory(out_dir) as staging:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
    return {
        "random_init": True,
        "shape": shape,
        "init_seed": seed,
        "init_device": where.type,
        "parameters": sum(p.numel() for p in model.parameters()),
        "files": file_digests(out_dir),
    }

"""Attention through a mask of each layer's own, built by the engine rather than by transformers.

Transformers builds one mask per layer type from ``cache_position`` and the cache's length, which is right for a
cache whose slots are its positions. After compression they are not: layers hold different numbers of slots
(PyramidKV; a decode batch's rows), a compressed sliding layer's slots are scattered positions, and a batch of
stacked caches is padded per layer. Wherever that happens the engine passes one boolean mask per layer in the
call's kwargs (``LAYER_MASKS_KWARG``; True: attended) and runs the model under ``per_layer_masks``, which routes
every attention call through ``_layer_masked_attention``: the layer reads its own mask, and the model builds none.
"""

from __future__ import annotations

import contextlib
import sys

import torch

LAYER_MASKS_KWARG = "kvbench_layer_masks"

_ATTENTION_PREFIX = "kvbench_layer_masked_"


def _grouped_query_sdpa(module, query, key, value, mask, scaling):
    """One decode step's attention without materialising repeated K/V for grouped-query attention.

    With a mask, SDPA's GQA support falls back to the math kernel and transformers copies K and V once per
    query head sharing them (``repeat_kv``): at decode batch 16 that copy was 60% of the GPU time. For a
    single query position, the query heads that share a KV head can instead ride along as extra query
    positions of that KV head: the same dot products, no copies.
    """
    batch, heads, _, head_dim = query.shape
    kv_heads = key.shape[1]
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, head_dim)
    output = torch.nn.functional.scaled_dot_product_attention(grouped, key, value, attn_mask=mask, scale=scaling)
    return output.reshape(batch, heads, 1, head_dim).transpose(1, 2).contiguous(), None


def _eager_attention_of(module):
    """The eager attention of the module's own model file (Gemma's takes a soft cap Llama's does not)."""
    own = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    if own is not None:
        return own
    from transformers.models.llama.modeling_llama import eager_attention_forward

    return eager_attention_forward


def _layer_masked_attention(base):
    """Attention that ignores the model's one mask and takes this layer's mask from the call's kwargs."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    def attention(module, query, key, value, attention_mask, *args, **kwargs):
        layer_masks = kwargs.pop(LAYER_MASKS_KWARG)
        mask = layer_masks[module.layer_idx][..., : key.shape[-2]]
        # kvpress's fake keys for a masking press's slots are made inside ALL_ATTENTION_FUNCTIONS' (patched) sdpa: a
        # module still holding such slots takes that way
        masked_keys = getattr(module, "masked_key_indices", None) is not None
        if base == "sdpa" and query.shape[2] == 1 and not kwargs.get("output_attentions") and not masked_keys:
            return _grouped_query_sdpa(module, query, key, value, mask, kwargs.get("scaling", module.scaling))
        if mask.shape[1] not in (1, query.shape[1]):  # one mask per KV head: each query head reads its KV head's
            mask = mask.repeat_interleave(query.shape[1] // mask.shape[1], dim=1)
        implementation = ALL_ATTENTION_FUNCTIONS[base] if base != "eager" else _eager_attention_of(module)
        if base == "eager":
            mask = torch.zeros(mask.shape, dtype=query.dtype, device=query.device).masked_fill(
                ~mask, torch.finfo(query.dtype).min
            )
        return implementation(module, query, key, value, mask, *args, **kwargs)

    return attention


def _configs(model) -> list:
    """The model's config and, for a multimodal model, its decoder's: the decoder reads its own."""
    from kvcache_bench.engine.layer_types import text_config

    configs = [model.config]
    if text_config(model.config) is not model.config:
        configs.append(text_config(model.config))
    return configs


@contextlib.contextmanager
def per_layer_masks(model):
    """Route the model's attention through ``_layer_masked_attention`` while the context lasts.

    The registered name is unknown to transformers' mask builders, so the model builds no mask of its own.
    """
    from transformers.modeling_utils import AttentionInterface

    configs = _configs(model)
    base = configs[-1]._attn_implementation
    if base.startswith(_ATTENTION_PREFIX):  # already inside (a decode batch's held-back tokens)
        yield
        return
    if base not in ("sdpa", "eager"):
        raise ValueError(f"per-layer masks support sdpa and eager attention, not {base!r}")
    name = _ATTENTION_PREFIX + base
    AttentionInterface.register(name, _layer_masked_attention(base))
    saved = [config._attn_implementation for config in configs]
    for config in configs:
        config._attn_implementation = name
    try:
        yield
    finally:
        for config, value in zip(configs, saved):
            config._attn_implementation = value

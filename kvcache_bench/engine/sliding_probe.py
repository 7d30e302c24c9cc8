"""A press run once on a tiny random Gemma 3 through this engine's prefill, under each sliding-layers setting.

What ``snakemake doctor`` and the cell checks know of a press on a model with sliding-window layers: whether it runs
(kvpress's KVzip refuses every Gemma 3 class) and which layer types it changed (slots removed or masked). Measured
with the press's check (``runtime.method_checks``), beside what ``methods.method_properties`` measures on a Llama.
"""

from __future__ import annotations

import torch

from kvcache_bench.engine.caches import attention_modules, clear_key_masks
from kvcache_bench.engine.layer_types import attach
from kvcache_bench.engine.layered_cache import new_cache
from kvcache_bench.engine.prefill import prefill
from kvcache_bench.study.sliding_layers import SlidingLayers

# Gemma 3's layer pattern in miniature, its window a quarter of the probe's prompt
PROBE_MODEL = dict(
    vocab_size=1258,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=6,
    num_attention_heads=4,
    num_key_value_heads=1,
    head_dim=64,
    query_pre_attn_scalar=64,
    sliding_window=64,
    layer_types=["sliding_attention"] * 5 + ["full_attention"],
    max_position_embeddings=4096,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)
PROMPT_TOKENS = 256


def probe_model(attn_implementation: str = "sdpa", name_or_path: str | None = None):
    """A tiny random Gemma 3 text model with Gemma 3's layer pattern and two RoPE bases. ``name_or_path``: where a
    press that re-tokenises finds a tokenizer (KVzip)."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    config = Gemma3TextConfig(**PROBE_MODEL)
    config._attn_implementation = attn_implementation
    model = Gemma3ForCausalLM(config).eval()
    if name_or_path:
        model.config.name_or_path = name_or_path
    return model


def on_sliding_layers(fresh_press, attention: str, name_or_path: str | None = None) -> dict:
    """Per setting (``keep``, ``compress``): ``{"runs", "touches" (layer types changed), "error"}``."""
    model = probe_model(attention, name_or_path)
    ids = torch.randint(8, PROBE_MODEL["vocab_size"], (PROMPT_TOKENS,), generator=torch.Generator().manual_seed(1))
    ids = ids.tolist()
    facts = {}
    for setting in SlidingLayers:
        layer_types = attach(model, setting.value)
        try:
            cache = new_cache(layer_types)
            with torch.inference_mode():
                prefill(model, cache, ids, fresh_press())
            touched = set()
            for layer, module in enumerate(attention_modules(model)):
                whole = min(len(ids), layer_types.window - 1) if layer_types.kept_as_window(layer) else len(ids)
                masked = getattr(module, "masked_key_indices", None)
                if cache.stored_slots(layer) != whole or (masked is not None and len(masked[0])):
                    touched.add(layer_types.kinds[layer])
            facts[setting.value] = {"runs": True, "touches": sorted(touched), "error": None}
        except Exception as error:  # a press that cannot run on such a model is the fact
            reason = f"{type(error).__name__}: {str(error)[:200]}"
            facts[setting.value] = {"runs": False, "touches": [], "error": reason}
        finally:
            clear_key_masks(model)
    return facts

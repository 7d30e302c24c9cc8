"""KV-cache helpers every stage shares: a fresh cache, per-layer lengths, and rolling a cache back."""

from __future__ import annotations


def default_cache():
    from transformers import DynamicCache

    return DynamicCache()


def cache_lengths(cache) -> list[int]:
    return [cache.get_seq_length(layer) for layer in range(len(cache.layers))]


def mean_cache_length(cache) -> float:
    lengths = cache_lengths(cache)
    return sum(lengths) / len(lengths)


class CacheCheckpoint:
    """The state of a cache after compression, to roll back to after each answer.

    A DynamicCache is cut back per layer (layers may differ in length after PyramidKV-style presses).
    A ``LayeredCache`` (a model with sliding layers) keeps its layers' tensors by reference, like a QuantizedCache.
    A QuantizedCache cannot be cut (its tokens live in quantised blocks) nor deep-copied (quanto
    tensors refuse), but its layers only ever *replace* their tensors on update, so remembering each
    layer's attributes (references, no copies) is enough to restore it.
    """

    def __init__(self, cache):
        from transformers import DynamicCache, QuantizedCache

        from kvcache_bench.engine.layered_cache import is_layered

        self._layered = None
        if is_layered(cache):  # a window layer cannot be cropped once full: its references are kept
            self._layered = cache.snapshot()
            return
        if type(cache) is DynamicCache:
            self._lengths = cache_lengths(cache)
            self._attributes = None
        elif isinstance(cache, QuantizedCache):
            self._lengths = None
            self._attributes = [dict(vars(layer)) for layer in cache.layers]
        else:
            raise TypeError(f"cannot roll back a {type(cache).__name__}")

    def restore(self, cache) -> None:
        if self._layered is not None:
            cache.restore(self._layered)
            return
        if self._attributes is None:
            for layer, length in zip(cache.layers, self._lengths):
                layer.crop(length)
            return
        for layer, attributes in zip(cache.layers, self._attributes):
            vars(layer).clear()
            vars(layer).update(attributes)


def kv_bytes_per_token(model, kv_cache_bits: int | None = None) -> float:
    """Bytes one token's keys and values take in every layer: what a cache slot holds, whether a press kept
    it for attention, masked it (kvpress's fake keys) or zeroed some of its key channels (ThinK).

    A quantised cache counts its payload bits only (not its scales, nor its residual full-precision tokens).
    """
    from kvcache_bench.engine.layer_types import text_config

    config = text_config(model.config)  # a multimodal Gemma 3 keeps its decoder's settings apart
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    values_per_token = config.num_hidden_layers * 2 * config.num_key_value_heads * head_dim
    element_bytes = kv_cache_bits / 8 if kv_cache_bits else next(model.parameters()).element_size()
    return values_per_token * element_bytes


def attention_modules(model) -> list:
    """The decoder layers' attention modules, found as kvpress finds the modules it hooks: the only modules a press
    leaves key masks on (``masked_key_indices``) and the only ones kvpress's attention reads them from.

    Rather than ``model.modules()``: that walk visits every module of the model (hundreds on an 8B Llama) and
    ran twice per example between two prefills, with the GPU idle.
    """
    language_model = model.model.language_model if hasattr(model.model, "language_model") else model.model
    return [layer.self_attn for layer in language_model.layers]


def has_key_masks(model) -> bool:
    """Whether a press left per-head key masks on the model's attention modules."""
    return any(getattr(module, "masked_key_indices", None) is not None for module in attention_modules(model))


def clear_key_masks(model) -> None:
    """Forget the per-head key masks a press left on the attention modules (kvpress's ``masked_key_indices``).

    kvpress's patched attention clears them when a prefill passes through it, but a press that prefills in
    eager attention (KVCompose) never does: in a model worker, which runs cell after cell on one model, the
    last masking cell's masks would hide keys of the next cell's cache (or index past its end).
    """
    for module in attention_modules(model):
        if getattr(module, "masked_key_indices", None) is not None:
            module.masked_key_indices = None

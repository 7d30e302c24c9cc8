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
    A QuantizedCache cannot be cut (its tokens live in quantised blocks) nor deep-copied (quanto
    tensors refuse), but its layers only ever *replace* their tensors on update, so remembering each
    layer's attributes (references, no copies) is enough to restore it.
    """

    def __init__(self, cache):
        from transformers import DynamicCache, QuantizedCache

        if type(cache) is DynamicCache:
            self._lengths = cache_lengths(cache)
            self._attributes = None
        elif isinstance(cache, QuantizedCache):
            self._lengths = None
            self._attributes = [dict(vars(layer)) for layer in cache.layers]
        else:
            raise TypeError(f"cannot roll back a {type(cache).__name__}")

    def restore(self, cache) -> None:
        if self._attributes is None:
            for layer, length in zip(cache.layers, self._lengths):
                layer.crop(length)
            return
        for layer, attributes in zip(cache.layers, self._attributes):
            vars(layer).clear()
            vars(layer).update(attributes)

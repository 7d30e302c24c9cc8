"""Which prompt position each slot of a compressed cache holds, per layer and KV head.

A press gathers the slots it keeps (in its own order, a different choice per head), so after compression a
slot's position is not its index. Every key is found again by its bits: just before the press compresses a
layer, each position's key is hashed; after the pass, each kept slot's hash is looked up among them. Keys
are copied, never recomputed, by the presses this measures, so the lookup is exact; a press that rewrote its
keys (re-rotation, merging) leaves slots that match no position, and ``KeptPositions`` says so.
"""

from __future__ import annotations

import torch

from kvcache_bench.engine.caches import attention_modules
from kvcache_bench.engine.layer_types import text_config

_CHUNK = 4096  # positions hashed at once: the int64 copy of a chunk's keys is 8x a float32 key chunk per head


class UntraceableSlotsError(ValueError):
    pass


def _key_hashes(keys: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """[batch, heads, length] int64: a hash of each key's bits (exact integer arithmetic, so order-free)."""
    integer_type = {4: torch.int32, 2: torch.int16}[keys.element_size()]
    hashes = []
    for start in range(0, keys.shape[-2], _CHUNK):
        bits = keys[..., start : start + _CHUNK, :].contiguous().view(integer_type).to(torch.int64)
        hashes.append((bits * weights).sum(-1))
    return torch.cat(hashes, dim=-1) if hashes else keys.new_zeros(keys.shape[:-1], dtype=torch.int64)


class KeptPositions:
    """Records every layer's keys before the press compresses them; ``positions(cache)`` reads the kept ones.

    Use it around the one pass under the press: ``with KeptPositions(model) as tracker: prefill(...)``.
    Its hooks run before the press's (they are prepended), when the layer's cache holds every position.
    """

    def __init__(self, model, layers: tuple[int, ...] | None = None):
        # ``layers``: only these layers' positions (None: every layer's)
        self._modules = [m for m in attention_modules(model) if layers is None or m.layer_idx in layers]
        generator = torch.Generator().manual_seed(0)
        config = text_config(model.config)  # a multimodal Gemma 3 keeps its decoder's settings apart
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        # odd multipliers: every bit of every coordinate changes the hash
        self._weights = (torch.randint(1, 2**62, (head_dim,), generator=generator) | 1).to(model.device)
        self._before: dict[int, torch.Tensor] = {}
        self._handles = []

    def _record(self, module, args, kwargs, output):
        keys = kwargs["past_key_values"].layers[module.layer_idx].keys
        self._before[module.layer_idx] = _key_hashes(keys, self._weights)

    def __enter__(self):
        for module in self._modules:
            self._handles.append(module.register_forward_hook(self._record, with_kwargs=True, prepend=True))
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def positions(self, cache) -> list[torch.Tensor]:
        """Per layer recorded, in layer order, a [kv_heads, kept] tensor: the prompt position each slot of the
        (batch-1) cache holds."""
        found = []
        for layer, before in sorted(self._before.items()):
            before = before[0]
            after = _key_hashes(cache.layers[layer].keys, self._weights)[0]
            ordered, order = before.sort(dim=-1)
            if bool((ordered[:, 1:] == ordered[:, :-1]).any()):
                raise UntraceableSlotsError(
                    f"layer {layer}: two positions have identical keys, so their slots cannot be told apart"
                )
            index = torch.searchsorted(ordered, after).clamp(max=ordered.shape[-1] - 1)
            if not bool((ordered.gather(-1, index) == after).all()):
                raise UntraceableSlotsError(
                    f"layer {layer}: the press changed some keys, so the slots it kept cannot be traced to positions"
                )
            found.append(order.gather(-1, index))
        return found

    def positions_by_layer(self, cache) -> dict[int, torch.Tensor]:
        """``positions`` keyed by layer index."""
        return dict(zip(sorted(self._before), self.positions(cache)))


def context_slots(positions: list[torch.Tensor], context_tokens: int) -> float:
    """Mean over layers and KV heads of the slots holding a context position (< ``context_tokens``)."""
    counts = [(layer < context_tokens).sum(-1).float().mean() for layer in positions]
    return float(torch.stack(counts).mean()) if counts else 0.0

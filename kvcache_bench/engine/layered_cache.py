"""A one-sequence cache for a model with sliding-window layers: which position each sliding layer's slot holds, and
the masks every token appended after compression is attended through.

Transformers masks a sliding layer by comparing ``cache_position`` with slot indices, and counts ``cache_position``
from the cache's length. Once a press has compressed a cache those are different things: a compressed sliding
layer's 512 slots span more than 512 positions, and positions passed as ``cache_position`` (what a window needs)
make a block of appended tokens see its own future in a compressed layer, which holds fewer slots than positions.
So the engine builds every layer's mask itself, from positions alone:

* a global layer: every slot it holds precedes the appended block; the block is causal among itself;
* a sliding layer: a query at position p sees a slot at position k when p - W < k <= p, where k is the slot's
  position (recorded here: the model's own window holds the last W - 1 positions; a compressed one, those the
  press kept, traced by the keys' bits in ``engine.slot_positions``).

The masks go to every layer through the per-layer attention of ``engine.layer_masks``.
"""

from __future__ import annotations

import functools

import torch

from kvcache_bench.engine.layer_types import GLOBAL, SLIDING, LayerTypes


def new_cache(layer_types: LayerTypes):
    """An empty cache for one sequence of a model: a plain ``DynamicCache`` when every layer is global, else a
    ``LayeredCache`` that keeps each sliding layer's slot positions."""
    if layer_types.has_sliding_layers:
        return layered_cache_class()(layer_types)
    from transformers import DynamicCache

    return DynamicCache()


def is_layered(cache) -> bool:
    """Whether ``cache`` is a ``LayeredCache`` (asked without importing transformers: the engine's modules import it
    only when they run, so that a rule's environment is read from what its jobs run)."""
    return getattr(type(cache), "keeps_slot_positions", False)


@functools.cache
def layered_cache_class():
    """``LayeredCache``, defined on first use (it subclasses transformers' ``DynamicCache``)."""
    from transformers import DynamicCache

    class LayeredCache(_LayeredCacheMethods, DynamicCache):
        pass

    return LayeredCache


class _LayeredCacheMethods:
    """A ``DynamicCache`` whose sliding layers are the model's windows (``keep``) or compressed like any other
    (``compress``), and which knows the position each sliding layer's slot holds (``LayeredCache``)."""

    keeps_slot_positions = True

    def __init__(self, layer_types: LayerTypes):
        from transformers.cache_utils import Cache, DynamicLayer, DynamicSlidingWindowLayer

        layers = [
            DynamicSlidingWindowLayer(layer_types.window) if layer_types.kept_as_window(index) else DynamicLayer()
            for index in range(len(layer_types.kinds))
        ]
        Cache.__init__(self, layers=layers)
        self.layer_types = layer_types
        # per sliding layer, [kv_heads, slots]: the position each slot holds (None for global layers, and before the
        # prompt's pass)
        self.slot_positions: list[torch.Tensor | None] = [None] * len(layers)

    def stored_slots(self, layer: int) -> int:
        """Slots ``layer`` holds (a window layer's ``get_seq_length`` counts every position it ever saw)."""
        held = self.layers[layer]
        return held.keys.shape[-2] if held.is_initialized and held.keys.numel() else 0

    def note_prompt_pass(self, tokens: int, traced: dict[int, torch.Tensor] | None = None) -> None:
        """After the pass that put positions 0..tokens-1 into this empty cache: each sliding layer's positions, the
        press's (``traced``, by layer, from ``engine.slot_positions``) where it compressed the layer, else the last
        ones it holds (the whole prompt, or a window's last W - 1)."""
        for layer in range(len(self.layers)):
            if not self.layer_types.is_sliding(layer):
                continue
            if traced is not None and layer in traced:
                self.slot_positions[layer] = traced[layer]
                continue
            stored = self.stored_slots(layer)
            heads = self.layers[layer].keys.shape[1]
            device = self.layers[layer].keys.device
            self.slot_positions[layer] = torch.arange(tokens - stored, tokens, device=device).expand(heads, stored)

    def layer_masks(self, query_positions: torch.Tensor) -> list[torch.Tensor]:
        """Per layer, a boolean [1, heads, q, held + q] mask (True: attended) for ``query_positions`` (1-D, the
        appended tokens' positions, in order) over the slots each layer will hold once they are appended."""
        window = self.layer_types.window
        appended = query_positions.view(1, -1)  # the new slots' positions
        queries = query_positions.view(-1, 1)
        causal = appended <= queries  # [q, q]: the block among itself
        masks = []
        for layer in range(len(self.layers)):
            held = self.stored_slots(layer)
            if self.layer_types.is_sliding(layer):
                held_positions = self.slot_positions[layer]
                positions = torch.cat([held_positions, appended.expand(held_positions.shape[0], -1)], -1)
                seen = positions.unsqueeze(1)  # [heads, 1, held + q]
                mask = (seen <= queries) & (seen > queries - window)
                masks.append(mask.unsqueeze(0))
            else:
                earlier = torch.ones(len(query_positions), held, dtype=torch.bool, device=query_positions.device)
                masks.append(torch.cat([earlier, causal], -1).view(1, 1, *causal.shape[:1], held + causal.shape[1]))
        return masks

    def note_appended(self, query_positions: torch.Tensor) -> None:
        """After ``query_positions`` went into the cache: each sliding layer's positions, cut to what it kept."""
        for layer, positions in enumerate(self.slot_positions):
            if positions is None:
                continue
            grown = torch.cat([positions, query_positions.view(1, -1).expand(positions.shape[0], -1)], -1)
            self.slot_positions[layer] = grown[:, grown.shape[-1] - self.stored_slots(layer) :]

    def kept_by_layer_type(self) -> dict[str, float]:
        """Mean slots held per layer, by layer type."""
        kept = {}
        for kind in (GLOBAL, SLIDING):
            layers = [index for index, each in enumerate(self.layer_types.kinds) if each == kind]
            if layers:
                kept[kind] = sum(self.stored_slots(layer) for layer in layers) / len(layers)
        return kept

    def pressed_layers_mean(self) -> float:
        """Mean slots over the layers a press compresses: what a cell's retention is measured on."""
        layers = self.layer_types.pressed_layers
        return sum(self.stored_slots(layer) for layer in layers) / len(layers)

    def snapshot(self) -> tuple[list[dict], list[torch.Tensor | None]]:
        """What ``restore`` needs to bring the cache back here: each layer's attributes (an update replaces its
        tensors, never writes into them, so references are enough) and the slots' positions."""
        return [dict(vars(layer)) for layer in self.layers], list(self.slot_positions)

    def restore(self, snapshot: tuple[list[dict], list[torch.Tensor | None]]) -> None:
        attributes, positions = snapshot
        for layer, saved in zip(self.layers, attributes):
            vars(layer).clear()
            vars(layer).update(saved)
        self.slot_positions = list(positions)


def run_appended(model, cache, input_ids: torch.Tensor, first_position: int, **model_kwargs):
    """Run ``input_ids`` ([1, q]) at positions ``first_position``.. onto ``cache``, every layer through its own mask
    (``layer_masks``); the model's outputs."""
    from kvcache_bench.engine.layer_masks import LAYER_MASKS_KWARG, per_layer_masks

    positions = torch.arange(first_position, first_position + input_ids.shape[-1], device=input_ids.device)
    masks = cache.layer_masks(positions)
    with per_layer_masks(model):
        outputs = model(
            input_ids=input_ids,
            past_key_values=cache,
            position_ids=positions.unsqueeze(0),
            use_cache=True,
            **{LAYER_MASKS_KWARG: masks},
            **model_kwargs,
        )
    cache.note_appended(positions)
    return outputs

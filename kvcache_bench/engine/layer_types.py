"""Which decoder layers attend through a sliding window, which a press compresses, and each layer's own RoPE.

Gemma 3 interleaves sliding-window layers (a query at position p sees keys at positions p - W < k <= p, W = 512 on
Gemma 3 270M) with global ones (every earlier position), and gives each kind its own rotary base (10k local, 1M
global) from one rotary module that needs the layer's type. kvpress 0.5.5 decides by the model's class: it skips
the sliding layers of ``Gemma3ForConditionalGeneration`` and hooks every layer of ``Gemma3ForCausalLM``, in a cache
whose sliding layers hold the whole context; and its presses that compute RoPE themselves call the rotary module
without a layer type. Here the model's config decides (``models.<name>.sliding_layers``), whatever class loaded it:

* ``keep`` (the default): presses compress the global layers alone; each sliding layer is the model's own window
  (transformers' ``DynamicSlidingWindowLayer``: its last W - 1 positions), which is what a deployment holds;
* ``compress``: every layer is compressed, as kvpress hooks ``Gemma3ForCausalLM``; a compressed sliding layer keeps
  scattered positions, and its window is still W *positions*, not W slots (``engine.layered_cache``).

The setting lives with the model (``attach``, called where the model is loaded), so a press never asks what kind
of model it runs on. A model without sliding layers (Llama, Qwen, SmolLM2) gets a ``LayerTypes`` whose every layer
is global and pressed: nothing changes for it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from kvcache_bench.study.sliding_layers import DEFAULT_SLIDING_LAYERS, SLIDING, SlidingLayers

GLOBAL = "full_attention"


class UnsupportedLayerTypesError(ValueError):
    pass


def text_config(config):
    """The decoder's config (a multimodal Gemma 3 keeps it under ``text_config``)."""
    return config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config


@dataclass(frozen=True)
class LayerTypes:
    """Each decoder layer's attention (``GLOBAL`` or ``SLIDING``), the window, and what the setting makes of them."""

    kinds: tuple[str, ...]
    window: int | None  # positions a sliding layer's query sees, itself included (None: no sliding layer)
    sliding_layers: SlidingLayers = DEFAULT_SLIDING_LAYERS
    setting_given: bool = False  # False: the default ran (the summary says so)
    rotary_takes_layer_type: bool = False  # one rotary module for every kind, asked with the layer's type

    @classmethod
    def of_config(cls, config, sliding_layers: str | None = None, rotary_takes_layer_type: bool = False):
        decoder = text_config(config)
        layers = decoder.num_hidden_layers
        kinds = tuple(getattr(decoder, "layer_types", None) or [GLOBAL] * layers)[:layers]
        unknown = sorted(set(kinds) - {GLOBAL, SLIDING})
        if unknown:
            raise UnsupportedLayerTypesError(
                f"the model's config lists layer types {unknown}: this engine masks and compresses "
                f"{GLOBAL!r} and {SLIDING!r} layers only"
            )
        window = getattr(decoder, "sliding_window", None) if SLIDING in kinds else None
        if SLIDING in kinds and not window:
            raise UnsupportedLayerTypesError("the model has sliding-window layers but no sliding_window in its config")
        setting = SlidingLayers(sliding_layers) if sliding_layers else DEFAULT_SLIDING_LAYERS
        return cls(kinds, window, setting, sliding_layers is not None, rotary_takes_layer_type)

    @property
    def has_sliding_layers(self) -> bool:
        return SLIDING in self.kinds

    def is_sliding(self, layer: int) -> bool:
        return self.kinds[layer] == SLIDING

    def pressed(self, layer: int) -> bool:
        """Whether a press compresses ``layer``: every global layer, and the sliding ones only with ``compress``."""
        return not self.is_sliding(layer) or self.sliding_layers == SlidingLayers.COMPRESS

    @property
    def pressed_layers(self) -> tuple[int, ...]:
        return tuple(layer for layer in range(len(self.kinds)) if self.pressed(layer))

    def kept_as_window(self, layer: int) -> bool:
        """A sliding layer the press leaves alone: it holds the model's own window of the last W - 1 positions."""
        return self.is_sliding(layer) and not self.pressed(layer)

    def types_present(self) -> tuple[str, ...]:
        return tuple(kind for kind in (GLOBAL, SLIDING) if kind in self.kinds)
    def record(self) -> dict:
        """What every prediction record says of the layers (nothing for a model without sliding layers)."""
        if not self.has_sliding_layers:
            return {"sliding_layers": None}
        return {
            "sliding_layers": self.sliding_layers.value,
            "sliding_layers_default": not self.setting_given,
            "sliding_window": self.window,
            "layers_by_type": {kind: self.kinds.count(kind) for kind in self.types_present()},
        }


def _rotary_takes_layer_type(model) -> bool:
    import inspect

    rotary = getattr(language_model(model), "rotary_emb", None)
    return rotary is not None and "layer_type" in inspect.signature(rotary.forward).parameters


def language_model(model):
    """The decoder stack (``model.model``, or a multimodal model's ``model.model.language_model``), found as kvpress
    finds it."""
    return model.model.language_model if hasattr(model.model, "language_model") else model.model


def attach(model, sliding_layers: str | None = None) -> LayerTypes:
    """Read the model's layer types from its config and keep them, with the study's setting, on the model."""
    layer_types = LayerTypes.of_config(model.config, sliding_layers, _rotary_takes_layer_type(model))
    model._kvbench_layer_types = layer_types
    return layer_types


def layer_types_of(model) -> LayerTypes:
    """The model's ``LayerTypes``: as ``attach`` kept them, or (a model loaded elsewhere, a test's) from its config
    with the default setting."""
    kept = getattr(model, "_kvbench_layer_types", None)
    return kept if kept is not None else attach(model)


class LayerRotary(torch.nn.Module):
    """The model's one rotary module as a layer's own: called as kvpress's presses call ``module.rotary_emb(x,
    position_ids)`` (Expected Attention, CAP), it answers with this layer type's frequencies; ``inv_freq`` is that
    type's (key re-rotation reads it)."""

    def __init__(self, rotary, layer_type: str):
        super().__init__()
        object.__setattr__(self, "_rotary", rotary)  # not a child module: the model owns it
        self.layer_type = layer_type

    @property
    def inv_freq(self) -> torch.Tensor:
        return getattr(self._rotary, f"{self.layer_type}_inv_freq")

    @property
    def attention_scaling(self) -> float:
        return getattr(self._rotary, f"{self.layer_type}_attention_scaling")

    def forward(self, x, position_ids):
        return self._rotary(x, position_ids, self.layer_type)


def _hook_ids(module) -> set[int]:
    return set(module._forward_hooks) | set(module._forward_pre_hooks)


def _remove_hooks(module, ids: set[int]) -> None:
    for registry in (
        module._forward_hooks,
        module._forward_pre_hooks,
        module._forward_hooks_with_kwargs,
        module._forward_pre_hooks_with_kwargs,
        module._forward_hooks_always_called,
    ):
        for hook_id in ids:
            registry.pop(hook_id, None)


@contextlib.contextmanager
def press_on_pressed_layers(press, model):
    """``press(model)`` hooking only the layers the model's ``LayerTypes`` give a press, each attention module's
    ``rotary_emb`` its own layer type's.

    kvpress registers its hooks (and points every attention module at the model's rotary module) when its context is
    entered, by the model's class; the hooks it put on a layer the setting keeps whole are removed right after, so the
    press never runs there, whatever press it is (a composed one, AdaKV's wrapper, KVzip). Every module's rotary is
    set after kvpress set its own, and stays so (kvpress never removes what it set either)."""
    layer_types = layer_types_of(model)
    modules = [layer.self_attn for layer in language_model(model).layers]
    before = [_hook_ids(module) for module in modules]
    with press(model):
        for index, module in enumerate(modules):
            if not layer_types.pressed(index):
                _remove_hooks(module, _hook_ids(module) - before[index])
            if layer_types.rotary_takes_layer_type:
                rotary = language_model(model).rotary_emb
                module.rotary_emb = LayerRotary(rotary, layer_types.kinds[index])
        yield

"""Which sliding-layers setting a model's cells run with, told without loading the model (no torch, no transformers).

The setting itself (``keep`` or ``compress``) and its default are defined here, where the study's checks read them;
the engine applies them (``engine.layer_types``). A parse can tell a model has sliding-window layers from its
config's setting, or from its folder's ``config.json`` when the folder exists (a model the workflow makes does not
exist yet at the first parse: its generate job tells again, from the folder it loads).
"""

from __future__ import annotations

import json
import os
from enum import StrEnum
from pathlib import Path

SLIDING = "sliding_attention"


class SlidingLayers(StrEnum):
    """What a press does to a model's sliding-window layers (``models.<name>.sliding_layers``)."""

    KEEP = "keep"
    COMPRESS = "compress"


DEFAULT_SLIDING_LAYERS = SlidingLayers.KEEP


def folder_has_sliding_layers(folder: str | os.PathLike) -> bool | None:
    """Whether the model folder's config.json lists sliding-window layers (None: no readable config.json there)."""
    path = Path(folder, "config.json")
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    decoder = config.get("text_config") or config
    return SLIDING in (decoder.get("layer_types") or [])


def sliding_layers_of(model: dict, workdir: str | os.PathLike = ".") -> str | None:
    """The setting a model's cells run with when it has sliding-window layers, as far as can be told now (None: it
    has none, or it cannot be told yet): the config's ``sliding_layers``, else the default for a folder whose
    config.json lists sliding layers."""
    if model.get("sliding_layers"):
        return SlidingLayers(model["sliding_layers"]).value
    if folder_has_sliding_layers(Path(workdir, model["path"])):
        return DEFAULT_SLIDING_LAYERS.value
    return None

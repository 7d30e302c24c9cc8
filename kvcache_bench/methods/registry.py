"""The method registry: config name -> kvpress press, and the one retention -> compression-ratio conversion.

Configs speak of *retention*, the fraction of the prompt's KV cache that is KEPT. kvpress speaks of
``compression_ratio``, the fraction DROPPED. ``compression_ratio_for`` is the only place that converts.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.machinery
import math
import sys
import types
from dataclasses import dataclass, field


class UnknownMethodError(ValueError):
    pass


@dataclass(frozen=True)
class MethodSpec:
    name: str
    label: str  # how users know the method, for tables and legends
    press_class: str | None  # attribute of the ``kvpress`` module; None for the uncompressed baseline
    evicts: bool  # drops prompt tokens from the cache (so padding can be ranked against real tokens)
    requires_eager_attention: bool = False  # needs the attention matrix, which SDPA does not return
    default_kwargs: dict = field(default_factory=dict)
    kv_cache_bits: int | None = None  # a transformers QuantizedCache at this many bits instead of a DynamicCache


METHODS: dict[str, MethodSpec] = {
    spec.name: spec
    for spec in (
        MethodSpec("full_cache", "Full cache", None, evicts=False),
        MethodSpec("snapkv", "SnapKV", "SnapKVPress", evicts=True),
        MethodSpec("streaming_llm", "StreamingLLM", "StreamingLLMPress", evicts=True),
        MethodSpec("pyramidkv", "PyramidKV", "PyramidKVPress", evicts=True),
        MethodSpec("tova", "TOVA", "TOVAPress", evicts=True),
        MethodSpec("knorm", "Knorm", "KnormPress", evicts=True),
        MethodSpec("expected_attention", "Expected Attention", "ExpectedAttentionPress", evicts=True),
        MethodSpec("h2o", "H2O", "ObservedAttentionPress", evicts=True, requires_eager_attention=True),
        MethodSpec("random", "Random", "RandomPress", evicts=True),
        # KIVI-style quantised KV cache (transformers' QuantizedCache, optimum-quanto backend): keeps every
        # token, at fewer bits. kwargs: residual_length, q_group_size, axis_key, axis_value.
        MethodSpec("kv_quant_4bit", "KV quant (4-bit)", None, evicts=False, kv_cache_bits=4),
        MethodSpec("kv_quant_2bit", "KV quant (2-bit)", None, evicts=False, kv_cache_bits=2),
    )
}

QUANTIZED_CACHE_BACKEND = "quanto"
QUANTIZED_CACHE_OPTIONS = ("residual_length", "q_group_size", "axis_key", "axis_value")

FULL_RETENTION = 1.0


def method_label(name: str) -> str:
    """How users know a method (tables, legends); an unregistered name as it is."""
    return METHODS[name].label if name in METHODS else name


def get_method(name: str) -> MethodSpec:
    try:
        return METHODS[name]
    except KeyError:
        raise UnknownMethodError(
            f"unknown method {name!r}; known methods: {', '.join(sorted(METHODS))}"
        ) from None


def compression_ratio_for(retention: float) -> float:
    """kvpress's compression_ratio (fraction dropped) for a retention (fraction kept)."""
    if not 0.0 < retention <= 1.0:
        raise ValueError(f"retention must be in (0, 1], got {retention}")
    return round(1.0 - retention, 10)


def retentions_for(method: str, retentions: list[float]) -> list[float]:
    """The uncompressed baseline has exactly one cell, at retention 1.0."""
    return [FULL_RETENTION] if not get_method(method).evicts else list(retentions)


class _DatasetsOnFirstCall(types.ModuleType):
    """Stands in for ``datasets`` while kvpress imports: each function it hands out imports the real one when called."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)

        def deferred(*args, **kwargs):
            return getattr(importlib.import_module("datasets"), name)(*args, **kwargs)

        return deferred


def import_kvpress():
    """kvpress, without importing ``datasets``.

    kvpress's ``__init__`` imports every press, and two we never build (DuoAttention, ExpectedAttentionStats)
    import ``datasets`` at module level to fetch calibration data from the hub. ``datasets`` (with pandas and
    pyarrow) was a third of a generate job's start-up on CPU; a press that does call it still gets the real one.
    """
    if "kvpress" in sys.modules or "datasets" in sys.modules:
        return importlib.import_module("kvpress")
    importlib.import_module("transformers")  # reads which packages are installed once, before the stand-in
    stand_in = _DatasetsOnFirstCall("datasets")
    stand_in.__spec__ = importlib.machinery.ModuleSpec("datasets", None)
    sys.modules["datasets"] = stand_in
    try:
        return importlib.import_module("kvpress")
    finally:
        if sys.modules.get("datasets") is stand_in:
            del sys.modules["datasets"]


def resolve_press_class(spec: MethodSpec):
    """The installed kvpress class for a method, or a clear error naming the installed version."""
    if spec.press_class is None:
        return None
    try:
        kvpress = import_kvpress()
    except ImportError as error:
        raise UnknownMethodError(f"method {spec.name!r} needs kvpress, which is not importable: {error}") from error
    press_class = getattr(kvpress, spec.press_class, None)
    if press_class is None:
        version = getattr(kvpress, "__version__", "unknown")
        raise UnknownMethodError(
            f"method {spec.name!r} maps to kvpress.{spec.press_class}, which kvpress {version} does not provide"
        )
    return press_class


def resolve_quantization_backend(spec: MethodSpec) -> str | None:
    """The quantised-cache backend a method needs, checked importable; None when it needs none."""
    if spec.kv_cache_bits is None:
        return None
    try:
        quanto = importlib.import_module("optimum.quanto")
    except ImportError as error:
        raise UnknownMethodError(
            f"method {spec.name!r} needs optimum-quanto (transformers' QuantizedCache backend): {error}; "
            "pip install the version pinned in requirements.txt"
        ) from error
    return f"optimum-quanto {getattr(quanto, '__version__', '?')}"


def _quantized_cache_options(name: str, kwargs: dict | None) -> dict:
    options = dict(kwargs or {})
    unknown = sorted(set(options) - set(QUANTIZED_CACHE_OPTIONS))
    if unknown:
        raise UnknownMethodError(f"method {name!r} (QuantizedCache) does not accept {unknown}; accepted: {list(QUANTIZED_CACHE_OPTIONS)}")
    return options


def cache_factory_for(name: str, model, kwargs: dict | None = None):
    """A zero-argument function making the empty KV cache a method generates with."""
    from transformers import DynamicCache, QuantizedCache

    spec = get_method(name)
    if spec.kv_cache_bits is None:
        return DynamicCache
    resolve_quantization_backend(spec)
    options = _quantized_cache_options(name, kwargs)
    # quanto groups each token's (kv_heads x head_dim) values; a group size dividing that width works at
    # every sequence length (transformers' default 64 fails on small models at odd lengths).
    head_dim = getattr(model.config, "head_dim", None) or model.config.hidden_size // model.config.num_attention_heads
    width = model.config.num_key_value_heads * head_dim
    options.setdefault("q_group_size", math.gcd(64, width))
    if width % options["q_group_size"]:
        raise UnknownMethodError(f"method {name!r}: q_group_size {options['q_group_size']} must divide kv_heads x head_dim = {width}")

    def make_quantized_cache():
        return QuantizedCache(backend=QUANTIZED_CACHE_BACKEND, config=model.config, nbits=spec.kv_cache_bits, **options)

    return make_quantized_cache


def build_press(name: str, retention: float, kwargs: dict | None = None, seed: int | None = None):
    """Instantiate the press for a method at a retention, or ``None`` when the method has no press."""
    spec = get_method(name)
    press_class = resolve_press_class(spec)
    if press_class is None:
        if retention != FULL_RETENTION:
            raise ValueError(f"{name} keeps the whole cache; its retention must be 1.0, got {retention}")
        if spec.kv_cache_bits is not None:
            resolve_quantization_backend(spec)
            _quantized_cache_options(name, kwargs)
        elif kwargs:
            raise UnknownMethodError(f"method {name!r} takes no kwargs, got {sorted(kwargs)}")
        return None
    options = {**spec.default_kwargs, **(kwargs or {})}
    accepted = {f.name for f in dataclasses.fields(press_class)}
    if "seed" in accepted and "seed" not in options and seed is not None:
        options["seed"] = seed
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise UnknownMethodError(
            f"method {name!r} ({spec.press_class}) does not accept {unknown}; accepted: {sorted(accepted)}"
        )
    return press_class(compression_ratio=compression_ratio_for(retention), **options)


def attention_implementation_for(method: str, configured: str) -> str:
    return "eager" if get_method(method).requires_eager_attention else configured


def doctor() -> list[dict]:
    """Which methods resolve against the installed kvpress (the ``doctor`` rule prints this)."""
    rows = []
    for spec in METHODS.values():
        try:
            press_class = resolve_press_class(spec)
            backend = resolve_quantization_backend(spec)
            status = "ok"
            if backend is not None:
                target = f"transformers.QuantizedCache({spec.kv_cache_bits}-bit, {backend})"
            else:
                target = "(no press)" if press_class is None else f"kvpress.{press_class.__name__}"
        except UnknownMethodError as error:
            status, target = "missing", str(error)
        rows.append({"method": spec.name, "label": spec.label, "status": status, "press": target})
    return rows

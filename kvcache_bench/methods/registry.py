"""The method registry: config name -> kvpress press, and the one retention -> compression-ratio conversion.

Configs speak of *retention*, the fraction of the prompt's KV cache that is KEPT. kvpress speaks of
``compression_ratio``, the fraction DROPPED. ``compression_ratio_for`` is the only place that converts.
The methods themselves are data (``kvcache_bench.methods.catalogue``); a config's ``custom_methods``
add more (``custom_specs``), passed along wherever a method is looked up.
"""

from __future__ import annotations

import difflib
import importlib
import math

from kvcache_bench.methods.catalogue import BUILT_IN, CUSTOM, WRAPPER_CLASSES, MethodSpec
from kvcache_bench.methods.constructions import Construction, build, classes_in, construction_of, describe
from kvcache_bench.methods.kvpress_import import import_kvpress


class UnknownMethodError(ValueError):
    pass


METHODS: dict[str, MethodSpec] = BUILT_IN

QUANTIZED_CACHE_BACKEND = "quanto"
QUANTIZED_CACHE_OPTIONS = ("residual_length", "q_group_size", "axis_key", "axis_value")

FULL_RETENTION = 1.0


def custom_specs(custom_methods: dict | None) -> dict[str, MethodSpec]:
    """The config's ``custom_methods`` as specs (no import: parse-time checks import their classes)."""
    custom_methods = custom_methods or {}
    specs: dict[str, MethodSpec] = {}

    def spec_of(name: str, wrapping: frozenset) -> MethodSpec:
        if name in specs:
            return specs[name]
        if name not in custom_methods:
            return get_method(name)
        if name in wrapping:
            raise UnknownMethodError(f"custom_methods.{name} wraps itself through its inner methods (a cycle)")
        settings = custom_methods[name]
        kwargs = dict(settings.get("kwargs") or {})
        inner = settings.get("inner")
        if inner is not None:
            inner_specs = [spec_of(n, wrapping | {name}) for n in (inner if isinstance(inner, list) else [inner])]
            if any(spec.construction is None for spec in inner_specs):
                raise UnknownMethodError(f"custom_methods.{name}.inner: a method without a press cannot be wrapped")
            field_name = WRAPPER_CLASSES.get(settings["press"].rpartition(":")[2], "__positional__")
            constructions = [spec.construction for spec in inner_specs]
            kwargs[field_name] = constructions if field_name in ("presses", "__positional__") else constructions[0]
        construction = Construction(settings["press"], kwargs)
        specs[name] = MethodSpec(
            name,
            settings.get("label") or name,
            construction,
            CUSTOM,
            takes_retention=settings.get("takes_retention", True),
            requires_eager_attention="ObservedAttentionPress" in classes_in(construction),
            origin="custom",
        )
        return specs[name]

    for name in custom_methods:
        spec_of(name, frozenset())
    return specs


def all_methods(custom_methods: dict | None = None) -> dict[str, MethodSpec]:
    return {**METHODS, **custom_specs(custom_methods)} if custom_methods else METHODS


def method_label(name: str, custom_methods: dict | None = None) -> str:
    """How users know a method (tables, legends); an unregistered name as it is."""
    known = all_methods(custom_methods)
    return known[name].label if name in known else name


def did_you_mean(name: str, known) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"did you mean {close[0]!r}? " if close else ""


def get_method(name: str, custom_methods: dict | None = None) -> MethodSpec:
    if custom_methods and name in custom_methods:
        spec = custom_specs(custom_methods)[name]
    elif name in METHODS:
        spec = METHODS[name]
    else:
        known = all_methods(custom_methods)
        raise UnknownMethodError(
            f"unknown method {name!r}; {did_you_mean(name, known)}known methods: {', '.join(sorted(known))}"
        ) from None
    return spec


def compression_ratio_for(retention: float) -> float:
    """kvpress's compression_ratio (fraction dropped) for a retention (fraction kept)."""
    if not 0.0 < retention <= 1.0:
        raise ValueError(f"retention must be in (0, 1], got {retention}")
    return round(1.0 - retention, 10)


def retentions_for(method: str, retentions: list[float], custom_methods: dict | None = None) -> list[float]:
    """A method that takes no retention (full cache, quantised caches, decoding-time presses) has one cell, at 1.0."""
    return list(retentions) if get_method(method, custom_methods).takes_retention else [FULL_RETENTION]


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
        raise UnknownMethodError(
            f"method {name!r} (QuantizedCache) does not accept {unknown}; accepted: {list(QUANTIZED_CACHE_OPTIONS)}"
        )
    return options


def cache_factory_for(name: str, model, kwargs: dict | None = None, custom_methods: dict | None = None):
    """A zero-argument function making the empty KV cache a method generates with."""
    from transformers import DynamicCache, QuantizedCache

    spec = get_method(name, custom_methods)
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
        raise UnknownMethodError(
            f"method {name!r}: q_group_size {options['q_group_size']} must divide kv_heads x head_dim = {width}"
        )

    def make_quantized_cache():
        return QuantizedCache(backend=QUANTIZED_CACHE_BACKEND, config=model.config, nbits=spec.kv_cache_bits, **options)

    return make_quantized_cache


def apply_retention(built, compression_ratio: float) -> None:
    """Set the fraction dropped on a built press, as kvpress's ``evaluation/evaluate.py`` sets it."""
    kvpress = import_kvpress()
    if isinstance(built, kvpress.ComposedPress):
        for component in built.presses:
            apply_retention(component, compression_ratio)
    elif isinstance(built, kvpress.ThinKPress):
        built.key_channel_compression_ratio = compression_ratio
    elif isinstance(built, kvpress.DuoAttentionPress):
        built.head_compression_ratio = compression_ratio
    elif hasattr(built, "compression_ratio"):
        built.compression_ratio = compression_ratio


def build_press(
    name: str,
    retention: float,
    kwargs: dict | None = None,
    seed: int | None = None,
    custom_methods: dict | None = None,
    workdir: str = ".",
):
    """Instantiate the press for a method at a retention, or ``None`` when the method has no press."""
    spec = get_method(name, custom_methods)
    if spec.construction is None:
        if retention != FULL_RETENTION:
            raise ValueError(f"{name} keeps the whole cache; its retention must be 1.0, got {retention}")
        if spec.kv_cache_bits is not None:
            resolve_quantization_backend(spec)
            _quantized_cache_options(name, kwargs)
        elif kwargs:
            raise UnknownMethodError(f"method {name!r} takes no kwargs, got {sorted(kwargs)}")
        return None
    if not spec.takes_retention and retention != FULL_RETENTION:
        raise ValueError(
            f"{name} takes no retention (its budget is in its kwargs); its retention must be 1.0, got {retention}"
        )
    try:
        kvpress_import = import_kvpress()
    except ImportError as error:
        raise UnknownMethodError(f"method {name!r} needs kvpress, which is not importable: {error}") from error
    options = dict(kwargs or {})
    try:
        built = build(spec.construction, options, workdir)
    except ValueError as error:
        raise UnknownMethodError(f"method {name!r}: {error}") from error
    if seed is not None and "seed" not in options and hasattr(built, "seed") and built.seed is None:
        built.seed = seed
    if spec.takes_retention:
        apply_retention(built, compression_ratio_for(retention))
    assert isinstance(built, kvpress_import.BasePress)
    return built


def press_construction(built) -> dict | None:
    """What a record says was run: the press's class tree with every argument (None: no press)."""
    return construction_of(built)


def attention_implementation_for(method: str, configured: str, custom_methods: dict | None = None) -> str:
    return "eager" if get_method(method, custom_methods).requires_eager_attention else configured


def doctor(custom_methods: dict | None = None) -> list[dict]:
    """Which methods resolve against the installed kvpress: each construction built at retention 0.5."""
    rows = []
    for spec in all_methods(custom_methods).values():
        try:
            backend = resolve_quantization_backend(spec)
            if backend is not None:
                target = f"transformers.QuantizedCache({spec.kv_cache_bits}-bit, {backend})"
            else:
                build_press(spec.name, 0.5 if spec.takes_retention else FULL_RETENTION, custom_methods=custom_methods)
                target = describe(spec.construction)
            status = "ok"
        except (UnknownMethodError, TypeError, ValueError, AssertionError) as error:
            status, target = "missing", str(error)
        rows.append(
            {"method": spec.name, "label": spec.label, "status": status, "press": target, "family": spec.family}
        )
    return rows

"""Every method this benchmark knows, as data: kvpress 0.5.5's evaluation registry under its own names, then
the press classes it does not name, then this project's own (full cache, quantised caches, h2o).

A name from kvpress's ``evaluation/evaluate_registry.py`` (``PRESS_REGISTRY``) means exactly what it means
there and is built the same way; ``tests/test_catalogue.py`` holds the transcription to kvpress's text. The
retention (``compression_ratio`` = 1 - retention) is set on the built press afterwards, as kvpress's
``evaluate.py`` sets it (``registry.apply_retention``); kwargs from the config go to the outermost press.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcache_bench.methods.constructions import Construction, press

# Families group the figures' small multiples and the README's table.
SCORER, HEAD_BUDGET, STRUCTURE, CHANNEL, DECODING, MERGING, LEARNED, BASELINE, CUSTOM = (
    "token scorer",
    "per-head budget",
    "chunk/block",
    "key channels",
    "while decoding",
    "merging",
    "needs hub data",
    "baseline",
    "custom",
)


@dataclass(frozen=True)
class MethodSpec:
    name: str
    label: str  # how users know the method, for tables and legends
    construction: Construction | None  # None: no press (the full cache, or a quantised cache)
    family: str
    takes_retention: bool = True  # one cell per configured retention; False: one cell at retention 1.0
    requires_eager_attention: bool = False  # needs the attention matrix, which SDPA does not return
    kv_cache_bits: int | None = None  # a transformers QuantizedCache at this many bits instead of a DynamicCache
    hub_data: str | None = (
        None  # what it downloads when not given locally (a declared cross-check of the measured fact)
    )
    origin: str = "kvpress registry"  # or "kvpress class", "this project", "custom"

    @property
    def evicts(self) -> bool:
        """Compresses the prompt at a retention (the declared fact; the check job measures what it does)."""
        return self.takes_retention


def _spec(name, label, construction, family, **options):
    return MethodSpec(name, label, construction, family, **options)


def _kvpress(name, label, construction, family, **options):
    return _spec(name, label, construction, family, origin="kvpress registry", **options)


def _decoding(name, label, construction):
    # Their budget is target_size tokens while decoding, not a retention of the prompt (kvpress's evaluate.py).
    return _kvpress(name, label, construction, DECODING, takes_retention=False)


P = press
EXPECTED_ATTENTION_E2 = P("ExpectedAttentionPress", epsilon=1e-2)
QFILTER_DATA = "QFilterPress.q_filters (hub: nthngdy/<model>_qfilt)"
KVZAP_DATA = "KVzapPress.kvzap_model_name (hub: nvidia/KVzap-<model_type>-<model>)"

KVPRESS_REGISTRY = [
    _spec(
        "full_cache", "Full cache", None, BASELINE, takes_retention=False, origin="this project"
    ),  # kvpress: no_press
    _kvpress("adakv_snapkv", "AdaKV (SnapKV)", P("AdaKVPress", P("SnapKVPress")), HEAD_BUDGET),
    _kvpress("block_keydiff", "Block (KeyDiff)", P("BlockPress", press=P("KeyDiffPress"), block_size=128), STRUCTURE),
    _kvpress("chunkkv", "ChunkKV (SnapKV)", P("ChunkKVPress", press=P("SnapKVPress"), chunk_length=20), STRUCTURE),
    _kvpress(
        "critical_adakv_expected_attention",
        "CriticalAdaKV (Expected Attention)",
        P("CriticalAdaKVPress", P("ExpectedAttentionPress", use_vnorm=False)),
        HEAD_BUDGET,
    ),
    _kvpress("critical_adakv_snapkv", "CriticalAdaKV (SnapKV)", P("CriticalAdaKVPress", P("SnapKVPress")), HEAD_BUDGET),
    _kvpress(
        "critical_expected_attention",
        "CriticalKV (Expected Attention)",
        P("CriticalKVPress", P("ExpectedAttentionPress", use_vnorm=False)),
        SCORER,
    ),
    _kvpress("critical_snapkv", "CriticalKV (SnapKV)", P("CriticalKVPress", P("SnapKVPress")), SCORER),
    _kvpress("cur", "CUR", P("CURPress"), SCORER),
    _kvpress(
        "duo_attention",
        "DuoAttention",
        P("DuoAttentionPress"),
        LEARNED,
        hub_data="DuoAttentionPress patterns (hub: mit-han-lab/duo-attention)",
    ),
    _kvpress(
        "duo_attention_on_the_fly",
        "DuoAttention (on the fly)",
        P("DuoAttentionPress", on_the_fly_scoring=True),
        LEARNED,
        hub_data="calibration text (hub dataset)",
    ),
    _kvpress(
        "expected_attention",
        "Expected Attention (AdaKV, eps 1e-2)",
        P("AdaKVPress", EXPECTED_ATTENTION_E2),
        HEAD_BUDGET,
    ),
    _kvpress("fastkvzip", "FastKVzip", P("FastKVzipPress"), LEARNED, hub_data="FastKVzipPress gates (hub)"),
    _kvpress("finch", "Finch", P("FinchPress"), SCORER),
    _kvpress("keydiff", "KeyDiff", P("KeyDiffPress"), SCORER),
    _kvpress("kvcompose", "KVCompose", P("KVComposePress"), STRUCTURE),
    _kvpress("kvcompose_unstructured", "KVCompose (unstructured)", P("KVComposePress", structured=False), STRUCTURE),
    _kvpress("kvzip", "KVzip", P("KVzipPress"), HEAD_BUDGET),
    _kvpress("kvzip_plus", "KVzip+", P("KVzipPress", kvzip_plus_normalization=True), HEAD_BUDGET),
    _kvpress(
        "kvzap_linear",
        "KVzap (linear, DMS)",
        P("DMSPress", press=P("KVzapPress", model_type="linear")),
        LEARNED,
        takes_retention=False,
        hub_data=KVZAP_DATA,
    ),
    _kvpress(
        "kvzap_mlp",
        "KVzap (MLP, DMS)",
        P("DMSPress", press=P("KVzapPress", model_type="mlp")),
        LEARNED,
        takes_retention=False,
        hub_data=KVZAP_DATA,
    ),
    _kvpress(
        "kvzap_mlp_head", "KVzap (MLP, per head)", P("KVzapPress", model_type="mlp"), LEARNED, hub_data=KVZAP_DATA
    ),
    _kvpress(
        "kvzap_mlp_layer",
        "KVzap (MLP, AdaKV)",
        P("AdaKVPress", P("KVzapPress", model_type="mlp")),
        LEARNED,
        hub_data=KVZAP_DATA,
    ),
    _kvpress("lagkv", "LagKV", P("LagKVPress"), SCORER),
    _kvpress(
        "lukv",
        "LUKV (Expected Attention)",
        P("LUKVPress", P("ExpectedAttentionPress", epsilon=2e-2), sink=4, window=1),
        LEARNED,
        hub_data="LUKVPress budget curves (hub)",
    ),
    _kvpress("knorm", "Knorm", P("KnormPress"), SCORER),
    _kvpress(
        "observed_attention", "Observed attention", P("ObservedAttentionPress"), SCORER, requires_eager_attention=True
    ),
    _kvpress("pyramidkv", "PyramidKV", P("PyramidKVPress"), SCORER),
    _kvpress("qfilter", "Q-Filters", P("QFilterPress"), LEARNED, hub_data=QFILTER_DATA),
    _kvpress("random", "Random", P("RandomPress"), SCORER),
    # kvpress spells these "RestoreKV" and "RestoreKV_plus"; a result path here is lower-case.
    _kvpress("restorekv", "RestoreKV", P("RestoreKVPress"), LEARNED, hub_data="RestoreKVPress restore model (hub)"),
    _kvpress(
        "restorekv_plus",
        "RestoreKV+",
        P("RestoreKVPress", kvzip_plus_normalization=True),
        LEARNED,
        hub_data="RestoreKVPress restore model (hub)",
    ),
    _kvpress("snap_think", "SnapKV + ThinK", P("ComposedPress", [P("SnapKVPress"), P("ThinKPress")]), CHANNEL),
    _kvpress("snapkv", "SnapKV", P("SnapKVPress"), SCORER),
    _kvpress("streaming_llm", "StreamingLLM", P("StreamingLLMPress"), SCORER),
    _kvpress("think", "ThinK", P("ThinKPress"), CHANNEL),
    _kvpress("tova", "TOVA", P("TOVAPress"), SCORER),
    _kvpress("compactor", "Compactor", P("CompactorPress"), SCORER),
    _kvpress("adakv_compactor", "AdaKV (Compactor)", P("AdaKVPress", P("CompactorPress")), HEAD_BUDGET),
    _decoding("cam_streaming_llm", "CAM (StreamingLLM)", P("CAMPress", base_press=P("StreamingLLMPress"))),
    _decoding("cam_knorm", "CAM (Knorm)", P("CAMPress", base_press=P("KnormPress"))),
    _decoding("cam_adakv_snapkv", "CAM (AdaKV SnapKV)", P("CAMPress", base_press=P("AdaKVPress", P("SnapKVPress")))),
    _decoding("cam_tova", "CAM (TOVA)", P("CAMPress", base_press=P("TOVAPress"))),
    _decoding("decoding_knorm", "Decoding Knorm", P("DecodingPress", base_press=P("KnormPress"))),
    _decoding("decoding_streaming_llm", "Decoding StreamingLLM", P("DecodingPress", base_press=P("StreamingLLMPress"))),
    _decoding("decoding_tova", "Decoding TOVA", P("DecodingPress", base_press=P("TOVAPress"))),
    _kvpress(
        "decoding_qfilter",
        "Decoding Q-Filters",
        P("DecodingPress", base_press=P("QFilterPress")),
        LEARNED,
        takes_retention=False,
        hub_data=QFILTER_DATA,
    ),
    _decoding(
        "decoding_adakv_expected_attention_e2",
        "Decoding AdaKV (EA, eps 1e-2)",
        P("DecodingPress", base_press=P("AdaKVPress", EXPECTED_ATTENTION_E2)),
    ),
    _decoding(
        "decoding_adakv_snapkv",
        "Decoding AdaKV (SnapKV)",
        P("DecodingPress", base_press=P("AdaKVPress", P("SnapKVPress"))),
    ),
    _decoding("decoding_keydiff", "Decoding KeyDiff", P("DecodingPress", base_press=P("KeyDiffPress"))),
    _kvpress("merging_knorm", "Merging (Knorm)", P("MergingPress", P("KnormPress")), MERGING),
    _kvpress("merging_snapkv", "Merging (SnapKV)", P("MergingPress", P("SnapKVPress")), MERGING),
    _kvpress(
        "merging_expected_attention", "Merging (Expected Attention)", P("MergingPress", EXPECTED_ATTENTION_E2), MERGING
    ),
    _kvpress(
        "merging_kvzap_mlp",
        "Merging (KVzap MLP)",
        P("MergingPress", P("KVzapPress", model_type="mlp")),
        LEARNED,
        hub_data=KVZAP_DATA,
    ),
]


def _class(name, label, construction, family, **options):
    return _spec(name, label, construction, family, origin="kvpress class", **options)


# Press classes kvpress 0.5.5 exports that its registry does not name, under their snake_case names.
KVPRESS_CLASSES = [
    _class("plain_expected_attention", "Expected Attention (plain press)", P("ExpectedAttentionPress"), SCORER),
    _class("kvgrad", "KVgrad", P("KVgradPress"), HEAD_BUDGET),
    _class("simlayerkv", "SimLayerKV", P("SimLayerKVPress"), STRUCTURE, takes_retention=False),
    _class("leverage_score", "Leverage score", P("LeverageScorePress"), SCORER),
    _class("non_causal_attn", "Non-causal attention", P("NonCausalAttnPress"), SCORER),
    _class("cap", "CAP", P("CapPress"), SCORER),
    _class(
        "expected_attention_stats",
        "Expected Attention (stats)",
        P("ExpectedAttentionStatsPress"),
        LEARNED,
        hub_data="ExpectedAttentionStatsPress mu/cov or stats_folder (hub: alessiodevoto/exp_att_stats)",
    ),
]

# Presses that wrap another: usable only as `custom_methods: {press: <Class>, inner: <method>}`.
WRAPPER_CLASSES = {
    "AdaKVPress": "press",
    "BlockPress": "press",
    "ChunkKVPress": "press",
    "ChunkPress": "press",
    "CriticalAdaKVPress": "press",
    "CriticalKVPress": "press",
    "DMSPress": "press",
    "EntropyGatedChunkKVPress": "press",
    "KeyRerotationPress": "press",
    "LUKVPress": "press",
    "MergingPress": "press",
    "PerLayerCompressionPress": "press",
    "CAMPress": "base_press",
    "DecodingPress": "base_press",
    "CompressionRatioDecodingPress": "base_press",
    "ComposedPress": "presses",
    "PrefillDecodingPress": "prefilling_press",
}

THIS_PROJECT = [
    # The project's name for observed attention since before kvpress's registry was followed; same press.
    _spec("h2o", "H2O", P("ObservedAttentionPress"), SCORER, requires_eager_attention=True, origin="this project"),
    # KIVI-style quantised KV cache (transformers' QuantizedCache, optimum-quanto backend): keeps every
    # token, at fewer bits. kwargs: residual_length, q_group_size, axis_key, axis_value.
    _spec(
        "kv_quant_4bit",
        "KV quant (4-bit)",
        None,
        BASELINE,
        takes_retention=False,
        kv_cache_bits=4,
        origin="this project",
    ),
    _spec(
        "kv_quant_2bit",
        "KV quant (2-bit)",
        None,
        BASELINE,
        takes_retention=False,
        kv_cache_bits=2,
        origin="this project",
    ),
]

BUILT_IN: dict[str, MethodSpec] = {spec.name: spec for spec in KVPRESS_REGISTRY + KVPRESS_CLASSES + THIS_PROJECT}

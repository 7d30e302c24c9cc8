"""The press library: kvpress's names mean what kvpress means, every kvpress press class is reachable, and a
record says exactly which construction ran."""

import pytest

from kvcache_bench.methods.catalogue import KVPRESS_CLASSES, KVPRESS_REGISTRY, WRAPPER_CLASSES
from kvcache_bench.methods.constructions import classes_in
from kvcache_bench.methods.registry import METHODS, build_press, import_kvpress, press_construction


def test_expected_attention_means_what_kvpress_evaluation_means():
    kvpress = import_kvpress()
    press = build_press("expected_attention", 0.25)
    assert type(press) is kvpress.AdaKVPress
    assert type(press.press) is kvpress.ExpectedAttentionPress and press.press.epsilon == pytest.approx(1e-2)
    assert press.press.compression_ratio == pytest.approx(0.75)
    plain = build_press("plain_expected_attention", 0.25)
    assert type(plain) is kvpress.ExpectedAttentionPress and plain.epsilon == 0.0


def test_retention_reaches_the_press_that_scores_as_kvpress_evaluate_sets_it():
    critical = build_press("critical_snapkv", 0.4)
    assert critical.press.compression_ratio == pytest.approx(0.6)
    composed = build_press("snap_think", 0.4)
    snap, think = composed.presses
    assert snap.compression_ratio == pytest.approx(0.6) and think.key_channel_compression_ratio == pytest.approx(0.6)
    assert build_press("block_keydiff", 0.5).block_size == 128
    assert build_press("chunkkv", 0.5, {"chunk_length": 8}).chunk_length == 8
    # a kwarg goes to the outermost press that takes it: AdaKV has no n_future_positions, its scorer does
    assert build_press("expected_attention", 0.5, {"n_future_positions": 64}).press.n_future_positions == 64
    with pytest.raises(ValueError, match="accepts \\['window'\\]"):
        build_press("adakv_snapkv", 0.5, {"window": 8})


def test_every_press_class_kvpress_exports_is_a_method_or_a_wrapper():
    kvpress = import_kvpress()
    exported = {
        name for name in kvpress.__all__
        if isinstance(getattr(kvpress, name), type) and issubclass(getattr(kvpress, name), kvpress.BasePress)
    }
    abstract = {"BasePress", "ScorerPress"}
    named = {cls for spec in METHODS.values() if spec.construction for cls in classes_in(spec.construction)}
    assert exported - abstract - named - set(WRAPPER_CLASSES) == set()
    assert len({spec.name for spec in KVPRESS_REGISTRY}) == len(KVPRESS_REGISTRY)
    assert {spec.name for spec in KVPRESS_CLASSES}.isdisjoint(spec.name for spec in KVPRESS_REGISTRY)


def test_a_record_names_the_whole_class_tree_with_every_argument():
    tree = press_construction(build_press("adakv_snapkv", 0.5, {"alpha_safeguard": 0.3}))
    assert tree["class"] == "kvpress.presses.adakv_press.AdaKVPress"
    assert tree["kwargs"]["alpha_safeguard"] == 0.3
    inner = tree["kwargs"]["press"]
    assert inner["class"].endswith("SnapKVPress")
    assert inner["kwargs"] == {"compression_ratio": 0.5, "window_size": 64, "kernel_size": 5}
    assert press_construction(None) is None

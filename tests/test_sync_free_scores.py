"""SnapKV scores without a host sync: kvpress's scores bit for bit, no `.item()` in the engine's prefill, kvpress's
own press untouched outside it."""

import pytest
import torch

import kvcache_bench.engine.prefill as prefill_module
from kvcache_bench.engine.prefill import prefill_example
from kvcache_bench.engine.sync_free_scores import snapkv_scores, sync_free_scores, window_attention
from kvcache_bench.methods.registry import build_press
from kvcache_bench.study.prompt_tokens import PromptTokens
from kvcache_bench.study.question_modes import QuestionMode
from tests.fixtures.tiny_models import random_prompt_ids, tiny_llama

SNAPKV_METHODS = ["snapkv", "pyramidkv", "adakv_snapkv", "chunkkv", "critical_snapkv"]


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab_size=256, seed=0)


@pytest.fixture(scope="module")
def prompt():
    return PromptTokens(random_prompt_ids(150, seed=1), random_prompt_ids(9, seed=2))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("given_attentions", [False, True])
@pytest.mark.parametrize("window_size", [64, 8])
def test_scores_are_kvpress_own_bit_for_bit(model, dtype, given_attentions, window_size):
    """The window's score is max + 1 rounded to the scores' dtype (in bf16 near 1.0 that rounding is a real step):
    any other rounding, or a different pooling, would move which slots survive."""
    from kvpress import SnapKVPress

    attention = model.model.layers[0].self_attn.to(dtype)
    try:
        generator = torch.Generator().manual_seed(3)
        length, heads, kv_heads = 130, model.config.num_attention_heads, model.config.num_key_value_heads
        hidden = torch.randn(2, length, model.config.hidden_size, generator=generator).to(dtype)
        keys = torch.randn(2, kv_heads, length, attention.head_dim, generator=generator).to(dtype)
        angles = torch.randn(2, length, attention.head_dim, generator=generator)
        kwargs = {"position_embeddings": (angles.cos().to(dtype), angles.sin().to(dtype))}
        attentions = None
        if given_attentions:
            attentions = torch.softmax(torch.randn(2, heads, length, length, generator=generator), -1).to(dtype)
        press = SnapKVPress(compression_ratio=0.5, window_size=window_size)
        ours = snapkv_scores(press, attention, hidden, keys, keys, attentions, kwargs)
        theirs = SnapKVPress.score(press, attention, hidden, keys, keys, attentions, kwargs)
    finally:
        attention.to(torch.float32)
    assert ours.dtype == theirs.dtype == dtype and ours.shape == theirs.shape == (2, kv_heads, length)
    assert torch.equal(ours, theirs)
    assert (ours[..., -window_size:] > ours[..., :-window_size].max()).all()  # the window always survives


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("length, window_size", [(130, 64), (65, 64), (300, 8)])
def test_window_attention_is_kvpress_own_bit_for_bit_without_its_full_size_mask(model, dtype, length, window_size):
    """The weights every SnapKV score is made of: kvpress's bit for bit, a prompt one token longer than the window
    included, and zero keys before and inside the window (weights of exactly 0 before softmax, to which kvpress adds
    0 and the engine adds nothing)."""
    from kvpress import SnapKVPress

    attention = model.model.layers[0].self_attn.to(dtype)
    try:
        generator = torch.Generator().manual_seed(length)
        hidden = torch.randn(2, length, model.config.hidden_size, generator=generator).to(dtype)
        keys = torch.randn(2, model.config.num_key_value_heads, length, attention.head_dim, generator=generator)
        keys[:, :, [3, length - 2]] = 0.0
        angles = torch.randn(2, length, attention.head_dim, generator=generator)
        embeddings = (angles.cos().to(dtype), angles.sin().to(dtype))
        ours = window_attention(attention, hidden, keys.to(dtype), window_size, embeddings)
        theirs = SnapKVPress.compute_window_attention(attention, hidden, keys.to(dtype), window_size, embeddings)
    finally:
        attention.to(torch.float32)
    assert ours.shape == theirs.shape == (2, model.config.num_attention_heads, window_size, length - window_size)
    assert torch.equal(ours, theirs)


def test_a_press_with_a_window_attention_of_its_own_keeps_it(model):
    """A SnapKV subclass that computes its window attention its own way is scored with it, not with the engine's."""
    from kvpress import SnapKVPress

    calls = []

    class Uniform(SnapKVPress):
        @staticmethod
        def compute_window_attention(module, hidden_states, keys, window_size, position_embeddings):
            calls.append(window_size)
            batch, kv_heads, k_len, _ = keys.shape
            return torch.full((batch, module.config.num_attention_heads, window_size, k_len - window_size), 0.5)

    press, attention = Uniform(compression_ratio=0.5, window_size=8), model.model.layers[0].self_attn
    hidden = torch.randn(1, 40, model.config.hidden_size)
    keys = torch.randn(1, model.config.num_key_value_heads, 40, attention.head_dim)
    angles = torch.randn(1, 40, attention.head_dim)
    kwargs = {"position_embeddings": (angles.cos(), angles.sin())}
    ours = snapkv_scores(press, attention, hidden, keys, keys, None, kwargs)
    theirs = SnapKVPress.score(press, attention, hidden, keys, keys, None, kwargs)
    assert calls == [8, 8] and torch.equal(ours, theirs)


@pytest.mark.parametrize("method", SNAPKV_METHODS)
def test_the_engines_snapkv_prefill_reads_nothing_back_and_keeps_kvpress_cache(model, prompt, method, monkeypatch):
    """On a GPU every `.item()` stalls the prefill once per layer (docs/perf-reference.md): the engine's SnapKV
    prefill makes none, and the compressed cache and first logits equal those of kvpress's own scoring."""
    reads = []
    item = torch.Tensor.item

    def counting_item(tensor):
        reads.append(tuple(tensor.shape))
        return item(tensor)

    def cache_of():
        done = prefill_example(model, prompt, build_press(method, 0.5, seed=0), QuestionMode.QUESTION_AWARE)
        # AdaKV hides slots rather than dropping them: its per-head masks are on the attention modules
        masks = [getattr(layer.self_attn, "masked_key_indices", None) for layer in model.model.layers]
        kept = [(layer.keys.clone(), layer.values.clone()) for layer in done.cache.layers]
        return done, kept + [tuple(t.clone() for t in mask) for mask in masks if mask is not None]

    monkeypatch.setattr(torch.Tensor, "item", counting_item)
    done, cache = cache_of()
    assert reads == []

    # kvpress's own score: one read-back per layer, the same cache and logits
    monkeypatch.setattr(prefill_module, "sync_free_scores", lambda press: _nothing())
    reference, reference_cache = cache_of()
    assert len(reads) >= model.config.num_hidden_layers
    assert torch.equal(done.last_logits, reference.last_logits)
    assert len(cache) == len(reference_cache) >= model.config.num_hidden_layers
    for ours, theirs in zip(cache, reference_cache):
        assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))
    assert done.kept_tokens < done.pressed_tokens or method == "adakv_snapkv"  # the press did compress


def _nothing():
    import contextlib

    return contextlib.nullcontext()


def test_kvpress_own_press_is_untouched_outside_the_engines_pass():
    """kvpress's pipeline (the baseline every speed-up is measured against) must run kvpress's code: the swap
    lasts the engine's pass only, reaches a SnapKV inside another press, and spares a subclass's own score."""
    from kvpress import SnapKVPress, TOVAPress

    press = build_press("adakv_snapkv", 0.5, seed=0)
    inner = press.press
    assert type(inner) is SnapKVPress
    with sync_free_scores(press):
        assert inner.score.__func__ is snapkv_scores
    assert "score" not in vars(inner) and inner.score.__func__ is SnapKVPress.score

    tova = TOVAPress(compression_ratio=0.5)
    with sync_free_scores(tova):
        assert tova.score.__func__ is TOVAPress.score
    with sync_free_scores(None):
        pass

"""The engine's prefill asks kvpress's hooks "is this the prefill?" without a GPU sync, and gets kvpress's answer."""

import pytest
import torch

import kvcache_bench.engine.host_positions as host_positions
import kvcache_bench.engine.prefill as prefill_module
from kvcache_bench.engine.prefill import prefill_example
from kvcache_bench.methods.registry import build_press
from kvcache_bench.study.prompt_tokens import PromptTokens
from kvcache_bench.study.question_modes import QuestionMode
from tests.fixtures.tiny_models import random_prompt_ids, tiny_llama


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab_size=256, seed=0)


@pytest.fixture(scope="module")
def prompt():
    return PromptTokens(random_prompt_ids(150, seed=1), random_prompt_ids(9, seed=2))


def cache_of(model, prompt, method):
    done = prefill_example(model, prompt, build_press(method, 0.5, seed=0), QuestionMode.QUESTION_AWARE)
    return done, [(layer.keys.clone(), layer.values.clone()) for layer in done.cache.layers]


@pytest.mark.parametrize("method", ["snapkv", "knorm", "streaming_llm", "tova", "keydiff"])
def test_no_press_hook_reads_positions_back_and_the_cache_is_kvpress_own(model, prompt, method, monkeypatch):
    """A read-back per attention layer stalled an H200's prefill (docs/perf-reference.md): none is left, and the
    compressed cache and the first answer token's logits are those of kvpress's own is_prefilling."""
    done, cache = cache_of(model, prompt, method)  # installs the engine's is_prefilling
    assert done.kept_tokens < done.pressed_tokens  # the press did compress: the hooks saw a prefill
    original = host_positions._ORIGINAL["is_prefilling"]
    asked = []

    def counting(cache_position, q_len):
        asked.append(q_len)
        return original(cache_position, q_len)

    monkeypatch.setitem(host_positions._ORIGINAL, "is_prefilling", counting)
    cache_of(model, prompt, method)
    assert asked == []  # every layer's question was answered on the host

    # kvpress's own answer, read off the tensor, everywhere: the same cache and logits
    monkeypatch.setattr(prefill_module, "install", lambda: None)
    for name in host_positions.KVPRESS_MODULES:
        module = pytest.importorskip(name)
        monkeypatch.setattr(module, "is_prefilling", counting)
    reference, reference_cache = cache_of(model, prompt, method)
    assert len(asked) == model.config.num_hidden_layers
    assert torch.equal(done.last_logits, reference.last_logits)
    for (keys, values), (ref_keys, ref_values) in zip(cache, reference_cache):
        assert torch.equal(keys, ref_keys) and torch.equal(values, ref_values)


def test_a_tensor_the_engine_did_not_make_is_asked_the_original_way():
    host_positions.install()
    made = host_positions.cache_positions(10, 5, "cpu")
    assert made.tolist() == [10, 11, 12, 13, 14] and host_positions.known_last_position(made) == 14
    assert host_positions.is_prefilling(made, 15) and not host_positions.is_prefilling(made, 5)
    foreign = torch.arange(10, 15)
    assert host_positions.known_last_position(foreign) is None
    assert not host_positions.is_prefilling(foreign, 5)  # kvpress's own: 14 + 1 != 5
    assert host_positions.is_prefilling(torch.arange(0, 5), 5)
    del made  # a freed tensor's id may be reused by another: it is forgotten with its tensor
    reused = [torch.arange(0, 3) for _ in range(50)]
    assert all(host_positions.known_last_position(t) is None for t in reused)


def test_a_press_that_replaces_the_models_forward_keeps_transformers_own_positions(model):
    """KVCompose runs the prompt a second time inside its replaced forward with the caller's arguments: positions
    given to the first pass would reach the second (kvpress parity broke on it), so none are given."""
    from transformers import DynamicCache

    from kvcache_bench.engine.prefill import press_context

    with press_context(build_press("kvcompose", 0.5, seed=0), model):
        assert host_positions.forward_replaced(model)
        model(input_ids=torch.tensor([random_prompt_ids(40, seed=3)]), past_key_values=DynamicCache(), use_cache=True)
    with press_context(build_press("snapkv", 0.5, seed=0), model):
        assert not host_positions.forward_replaced(model)
    assert not host_positions.forward_replaced(model)

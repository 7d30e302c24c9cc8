"""Prefill one, decode many: greedy outputs must equal the batch-1 engine's, token for token."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from kvcache_bench.engine.decoders import one_by_one as engine
from kvcache_bench.engine.decoders.decode_many import generate_prefill_one_decode_many
from kvcache_bench.engine.greedy import DecodePath, Decoding
from kvcache_bench.methods.registry import METHODS, attention_implementation_for, build_press
from kvcache_bench.study.prompt_tokens import PromptTokens
from kvcache_bench.study.question_modes import QuestionMode

DEMO_CONFIG = Path(__file__).resolve().parents[1] / "resources" / "demo" / "model_config.json"
VOCAB = 256
STOP = {2}
NEW_TOKENS = 6
# (context, question) lengths: every row of a batch is padded differently
SHAPES = [(80, 8), (290, 12), (150, 5), (200, 16)]
_models: dict[str, torch.nn.Module] = {}
# Methods that change the cache type (KV quantisation) are not stacked; see the fallback test below. Masking
# presses have their own test below (their masks travel with each example's snapshot): here the evicting scorers,
# one per kind of scoring.
BATCHABLE_METHODS = ["full_cache", "h2o", "knorm", "plain_expected_attention", "pyramidkv", "random", "snapkv", "streaming_llm", "tova"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def demo_shaped_llama(attn_implementation: str):
    """The demo model's shape (2 layers, GQA 4 heads / 2 KV heads), random weights, fp32."""
    if attn_implementation not in _models:
        from transformers import LlamaConfig, LlamaForCausalLM

        settings = json.loads(DEMO_CONFIG.read_text())
        settings.update(vocab_size=VOCAB, bos_token_id=1, eos_token_id=2, pad_token_id=0)
        config = LlamaConfig(**settings)
        config._attn_implementation = attn_implementation
        torch.manual_seed(0)
        _models[attn_implementation] = LlamaForCausalLM(config).eval()
    return _models[attn_implementation]


def random_prompts(shapes=SHAPES, seed: int = 1) -> list[PromptTokens]:
    generator = torch.Generator().manual_seed(seed)
    prompts = []
    for context, question in shapes:
        ids = torch.randint(3, VOCAB, (context + question,), generator=generator).tolist()
        prompts.append(PromptTokens([1] + ids[1:context], ids[context:]))
    return prompts


def press_for(method: str):
    return build_press(method, 1.0 if not METHODS[method].evicts else 0.5, seed=0)


def engine_tokens(model, prompts, method, mode, stop_ids=STOP, new_tokens=NEW_TOKENS):
    press = press_for(method)
    return [engine.generate_one(Decoding(model, press, mode, new_tokens, stop_ids), p).token_ids for p in prompts]


def batched(model, prompts, method, mode, decode_batch_size, stop_ids=STOP, new_tokens=NEW_TOKENS):
    generations, path = generate_prefill_one_decode_many(Decoding(model, press_for(method), mode, new_tokens, stop_ids, decode_batch_size=decode_batch_size), prompts)
    return [g.token_ids for g in generations], path


@pytest.mark.parametrize("mode", [QuestionMode.QUESTION_AWARE, QuestionMode.QUESTION_AGNOSTIC], ids=str)
@pytest.mark.parametrize("method", BATCHABLE_METHODS)
def test_decode_batches_match_the_batch_one_engine(method, mode):
    model = demo_shaped_llama(attention_implementation_for(method, "sdpa"))
    prompts = random_prompts()
    expected = engine_tokens(model, prompts, method, mode)
    for decode_batch_size in (1, 3, 8):
        tokens, path = batched(model, prompts, method, mode, decode_batch_size)
        assert tokens == expected, f"decode batch {decode_batch_size}"
        assert path == DecodePath(decode_batch_size, min(decode_batch_size, len(prompts)), None)


def test_pyramidkv_layers_of_unequal_length_decode_together():
    model = demo_shaped_llama("sdpa")
    prompts = random_prompts()
    generations, path = generate_prefill_one_decode_many(Decoding(model, press_for("pyramidkv"), QuestionMode.QUESTION_AWARE, NEW_TOKENS, STOP, decode_batch_size=8), prompts)
    from kvcache_bench.engine.prefilled import prefill_prompt

    lengths = {tuple(k.shape[-2] for k in prefill_prompt(model, prompts[1], press_for("pyramidkv"), QuestionMode.QUESTION_AWARE).keys)}
    assert len(set(next(iter(lengths)))) > 1, "the test needs a press keeping different counts per layer"
    assert path.effective_decode_batch_size == len(prompts) and path.fallback is None
    assert [g.token_ids for g in generations] == engine_tokens(model, prompts, "pyramidkv", QuestionMode.QUESTION_AWARE)


def test_rows_stop_on_their_own():
    model = demo_shaped_llama("sdpa")
    prompts = random_prompts()
    free = engine_tokens(model, prompts, "snapkv", QuestionMode.QUESTION_AWARE, stop_ids=set(), new_tokens=8)
    stop_ids = {free[1][2], free[3][4]}  # rows 1 and 3 (at least) stop early, others may run on
    expected = engine_tokens(model, prompts, "snapkv", QuestionMode.QUESTION_AWARE, stop_ids=stop_ids, new_tokens=8)
    assert sorted({len(t) for t in expected}) != [8], "some row must stop before the limit"
    assert len({len(t) for t in expected}) > 1, "rows must stop at different steps"
    tokens, _ = batched(model, prompts, "snapkv", QuestionMode.QUESTION_AWARE, 8, stop_ids=stop_ids, new_tokens=8)
    assert tokens == expected


# Presses that hide slots per KV head through kvpress's masks instead of evicting them (measured masks_slots)
MASKING_METHODS = ["adakv_snapkv", "critical_adakv_snapkv", "critical_adakv_expected_attention", "expected_attention", "adakv_compactor"]  # (KVzip and KVGrad read a tokenizer: their cells are tested in test_engine_cell)


@pytest.mark.parametrize("method", MASKING_METHODS)
def test_a_press_that_masks_keys_per_head_decodes_together_with_the_batch_one_answers(method):
    """kvpress keeps one sequence's masks on the model: each example's masks now go with its snapshot, and the rows
    of a decode batch each hide their own slots, with the greedy ids of decoding alone (kvpress's fake keys)."""
    model = demo_shaped_llama(attention_implementation_for(method, "sdpa"))
    prompts = random_prompts()
    expected = engine_tokens(model, prompts, method, QuestionMode.QUESTION_AWARE)
    for decode_batch_size in (3, 8):
        tokens, path = batched(model, prompts, method, QuestionMode.QUESTION_AWARE, decode_batch_size)
        assert tokens == expected, f"decode batch {decode_batch_size}"
        assert path == DecodePath(decode_batch_size, min(decode_batch_size, len(prompts)), None)
    # the masks reach the decode batch: without them the rows would read the slots the press hid
    from kvcache_bench.engine.prefill import prefill_example
    from kvcache_bench.engine.prefilled import take_key_masks

    done = prefill_example(model, prompts[1], press_for(method), QuestionMode.QUESTION_AWARE, run_held_back=False)
    masks = take_key_masks(model, done.cache)
    assert masks is not None and all(m is None or m.shape[0] == model.config.num_key_value_heads for m in masks)
    assert any(m is not None and 0 < int(m.sum()) < m.numel() for m in masks)
    assert not any(getattr(m, "masked_key_indices", None) is not None for m in model.modules())  # taken off


def shared_context_prompts() -> list[PromptTokens]:
    """Two contexts of two questions each, in a row: a question-agnostic cell compresses each context once."""
    contexts = random_prompts([(120, 6), (260, 9)], seed=11)
    questions = random_prompts([(1, 7), (1, 4), (1, 10), (1, 5)], seed=12)
    return [PromptTokens(contexts[i // 2].context_ids, questions[i].question_ids) for i in range(4)]


def shared_contexts_batched(model, prompts, method, decode_batch_size=4):
    from kvcache_bench.engine.decoders import shared_contexts_together

    settings = Decoding(model, press_for(method), QuestionMode.QUESTION_AGNOSTIC, NEW_TOKENS, STOP, decode_batch_size=decode_batch_size)
    generations, path = shared_contexts_together.decode(settings, prompts)
    return [g.token_ids for g in generations], path


@pytest.mark.parametrize("method", MASKING_METHODS)
def test_a_masking_press_question_agnostic_decodes_its_shared_contexts_together_with_the_batch_one_answers(method):
    """Question-agnostic, a context's masks hide its slots from each of its questions' prefills (kvpress's fake keys)
    and each question's row carries a copy into the decode batch: the greedy ids of compressing the context for each
    question alone. Nothing is left on the model for the next context."""
    model = demo_shaped_llama(attention_implementation_for(method, "sdpa"))
    prompts = shared_context_prompts()
    expected = engine_tokens(model, prompts, method, QuestionMode.QUESTION_AGNOSTIC)
    tokens, path = shared_contexts_batched(model, prompts, method)
    assert tokens == expected and path.effective_decode_batch_size == 4 and path.fallback is None
    assert not any(getattr(m, "masked_key_indices", None) is not None for m in model.modules())


def test_a_shared_contexts_masks_are_what_keeps_its_batch_equal_to_decoding_alone(monkeypatch):
    """Not vacuous: with the masks left out of the question-agnostic snapshots, the batch answers differently."""
    import kvcache_bench.engine.prefilled as prefilled

    model = demo_shaped_llama("sdpa")
    prompts = shared_context_prompts()
    expected = engine_tokens(model, prompts, "adakv_snapkv", QuestionMode.QUESTION_AGNOSTIC)
    original = prefilled.take_key_masks
    monkeypatch.setattr(prefilled, "take_key_masks", lambda model, cache, **how: original(model, cache, **how) and None)
    tokens, _ = shared_contexts_batched(model, prompts, "adakv_snapkv")
    assert tokens != expected


def test_masked_slots_are_what_keeps_a_masking_press_batch_equal_to_decoding_alone(monkeypatch):
    """The parity above is not vacuous: with the masks dropped from the snapshots, the batch answers differently."""
    import kvcache_bench.engine.prefilled as prefilled

    model = demo_shaped_llama("sdpa")
    prompts = random_prompts()
    expected = engine_tokens(model, prompts, "adakv_snapkv", QuestionMode.QUESTION_AWARE)
    original = prefilled.take_key_masks

    def dropped(model, cache, **how):
        original(model, cache, **how)  # cleared off the model as usual, but not carried
        return None

    monkeypatch.setattr(prefilled, "take_key_masks", dropped)
    tokens, _ = batched(model, prompts, "adakv_snapkv", QuestionMode.QUESTION_AWARE, 8)
    assert tokens != expected


def test_each_question_of_a_masked_shared_context_carries_the_contexts_masks_and_the_model_none_after():
    """A shared context's masks serve each of its questions' prefills, then travel with every question's snapshot: the
    same hidden context slots in each, none among the question's own; nothing stays on the model."""
    from kvpress import AdaKVPress, SnapKVPress

    from kvcache_bench.engine.prefilled import prefilled_shared_context

    model = demo_shaped_llama("sdpa")
    prompt = random_prompts(SHAPES[:1])[0]
    questions = [prompt.question_ids, prompt.question_ids[:3]]
    snapshots = prefilled_shared_context(model, prompt.context_ids, questions, AdaKVPress(SnapKVPress(0.5)))
    first, second = (s.key_masks for s in snapshots)
    assert any(m is not None and bool(m.any()) for m in first)
    for layer, (a, b) in enumerate(zip(first, second)):
        if a is None:
            assert b is None
            continue
        context_slots = snapshots[0].keys[layer].shape[-2] - len(questions[0])
        assert torch.equal(a[:, :context_slots], b[:, :context_slots]) and not a[:, context_slots:].any()
    assert not any(getattr(m, "masked_key_indices", None) is not None for m in model.modules())


def test_model_attention_is_restored_after_batched_decoding():
    model = demo_shaped_llama("sdpa")
    batched(model, random_prompts(SHAPES[:2]), "snapkv", QuestionMode.QUESTION_AWARE, 2)
    assert model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("method", ["snapkv", "knorm"])
def test_shared_context_compressed_once_decodes_like_each_question_alone(method):
    from kvcache_bench.engine.prefilled import prefilled_shared_context
    from kvcache_bench.engine.static_decode import decode_together

    model = demo_shaped_llama("sdpa")
    context = random_prompts([(250, 0)])[0].context_ids
    questions = [q.question_ids for q in random_prompts([(1, 6), (1, 15), (1, 9)], seed=7)]
    prompts = [PromptTokens(context, q) for q in questions]
    expected = engine_tokens(model, prompts, method, QuestionMode.QUESTION_AGNOSTIC)
    prefilled = prefilled_shared_context(model, context, questions, press_for(method))
    assert [p.prompt_tokens for p in prefilled] == [len(context) + len(q) for q in questions]
    assert decode_together(model, prefilled, NEW_TOKENS, STOP) == expected


def test_a_quantized_cache_falls_back_to_batch_one_and_says_so():

    from transformers import QuantizedCache

    model = demo_shaped_llama("sdpa")
    prompts = random_prompts(SHAPES[:3])

    made = []

    def make_cache():
        made.append(1)
        return QuantizedCache(backend="quanto", config=model.config, nbits=4, residual_length=16, q_group_size=16)

    def run(decode_batch_size):
        generations, path = generate_prefill_one_decode_many(Decoding(model, None, QuestionMode.QUESTION_AWARE, NEW_TOKENS, STOP, make_cache=make_cache, decode_batch_size=decode_batch_size), prompts)
        return [g.token_ids for g in generations], path

    alone, _ = run(1)
    tokens, path = run(3)
    assert tokens == alone
    assert path.effective_decode_batch_size == 1 and "QuantizedCache" in path.fallback
    assert len(made) == 2 * len(prompts), "every example must be prefilled into a cache from make_cache"
    assert tokens == [engine.generate_one(Decoding(model, None, QuestionMode.QUESTION_AWARE, NEW_TOKENS, STOP, make_cache=make_cache), p).token_ids for p in prompts]


def test_min_new_tokens_blocks_early_stops_in_every_row():

    model = demo_shaped_llama("sdpa")
    prompts = random_prompts()
    free = engine_tokens(model, prompts, "snapkv", QuestionMode.QUESTION_AWARE, stop_ids=set())
    stop_ids = {free[0][0], free[2][1]}  # would stop rows 0 and 2 at their first or second token

    def run(decode_batch_size):
        generations, _ = generate_prefill_one_decode_many(Decoding(model, press_for("snapkv"), QuestionMode.QUESTION_AWARE, NEW_TOKENS, stop_ids, min_new_tokens=3, decode_batch_size=decode_batch_size), prompts)
        return [g.token_ids for g in generations]

    alone = run(1)
    assert all(len(t) >= 3 for t in alone) and alone != free
    assert run(4) == alone
    press = press_for("snapkv")
    assert alone == [engine.generate_one(Decoding(model, press, QuestionMode.QUESTION_AWARE, NEW_TOKENS, stop_ids, min_new_tokens=3), p).token_ids for p in prompts]


def test_grouped_query_decode_attention_equals_repeated_kv_attention():
    """The copy-free GQA path computes what transformers' repeat_kv + SDPA computes, mask included."""
    from types import SimpleNamespace

    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from kvcache_bench.engine.layer_masks import _grouped_query_sdpa

    generator = torch.Generator().manual_seed(0)
    query = torch.randn(3, 8, 1, 16, generator=generator)
    key = torch.randn(3, 2, 40, 16, generator=generator)
    value = torch.randn(3, 2, 40, 16, generator=generator)
    mask = torch.ones(3, 1, 1, 40, dtype=torch.bool)
    mask[0, ..., :7] = False  # left padding of different widths per row
    mask[2, ..., :31] = False
    module = SimpleNamespace(num_key_value_groups=4, is_causal=True, scaling=0.25)
    expected, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.25)
    grouped, _ = _grouped_query_sdpa(module, query, key, value, mask, 0.25)
    assert grouped.shape == expected.shape
    torch.testing.assert_close(grouped, expected, rtol=1e-5, atol=1e-6)


def test_a_second_batch_of_the_same_shape_reuses_the_decode_buffers_and_answers_the_same():
    # Same-length prompts: both decode batches of 2 get one buffer shape, so the second batch runs on the
    # buffers (and, on a GPU, the graph) the first one left behind, stale slots included.
    from kvcache_bench.engine.static_decode import release_decode_states

    model = demo_shaped_llama("sdpa")
    release_decode_states(model)
    prompts = random_prompts([(150, 8), (150, 8), (150, 8), (150, 8)], seed=7)
    states = []
    from kvcache_bench.engine import static_decode

    original = static_decode._state_for

    def spy(model, shape):
        states.append(original(model, shape))
        return states[-1]

    static_decode._state_for = spy
    try:
        tokens, path = batched(model, prompts, "snapkv", QuestionMode.QUESTION_AWARE, 2, stop_ids=set(), new_tokens=8)
    finally:
        static_decode._state_for = original
    assert len(states) == 2 and states[0] is states[1]
    assert tokens == engine_tokens(model, prompts, "snapkv", QuestionMode.QUESTION_AWARE, stop_ids=set(), new_tokens=8)


def test_a_memory_budget_cuts_decode_batches_without_changing_answers():
    model = demo_shaped_llama("sdpa")
    prompts = random_prompts()
    generations, path = generate_prefill_one_decode_many(Decoding(model, press_for("snapkv"), QuestionMode.QUESTION_AWARE, NEW_TOKENS, STOP, decode_batch_size=4, memory_budget_bytes=1), prompts)
    assert [g.token_ids for g in generations] == engine_tokens(model, prompts, "snapkv", QuestionMode.QUESTION_AWARE)
    assert path.effective_decode_batch_size == 1 and "cut at 1 rows" in path.fallback


@pytest.mark.parametrize("method", ["snapkv", "pyramidkv"])
def test_held_back_suffixes_of_different_lengths_run_together_as_the_engine_runs_them_alone(method):
    # A chat template's generation suffix (and RULER's answer prefix) is held back from the press; a decode
    # batch runs every row's held-back tokens in one forward, rows with fewer left-padded inside the block.
    from dataclasses import replace

    model = demo_shaped_llama("sdpa")
    prompts = [replace(p, held_back_tokens=n) for p, n in zip(random_prompts(), (3, 1, 6, 2))]
    expected = engine_tokens(model, prompts, method, QuestionMode.QUESTION_AWARE)
    tokens, _ = batched(model, prompts, method, QuestionMode.QUESTION_AWARE, 4)
    assert tokens == expected

"""The engine measures the method: true RoPE positions after eviction, one compression per shared
context in question-agnostic mode, batch 4 == batch 1 for the full cache, a real quantised cache."""

import pytest
import torch

from kvcache_bench.engine.decoders.one_by_one import generate_one
from kvcache_bench.engine.decoders.padded_batch import generate_padded_batch
from kvcache_bench.engine.decoders.shared_context import generate_shared_context
from kvcache_bench.engine.greedy import Decoding
from kvcache_bench.engine.prefill import prefill
from kvcache_bench.methods.registry import build_press, cache_factory_for
from kvcache_bench.study.prompt_tokens import PromptTokens
from kvcache_bench.study.question_modes import QuestionMode
from tests.fixtures.tiny_models import random_prompt_ids, tiny_llama

STOP_IDS = {2}


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab_size=256, seed=0)


@pytest.fixture(scope="module")
def context():
    return random_prompt_ids(120, seed=1)


@pytest.fixture(scope="module")
def questions():
    return [random_prompt_ids(n, seed=s) for n, s in ((9, 2), (6, 3), (11, 4))]


class PositionRecorder:
    """Every position_ids tensor the rotary embedding is asked for, in call order."""

    def __init__(self, model):
        self.calls: list[list[int]] = []
        self._handle = model.model.rotary_emb.register_forward_hook(self._record, with_kwargs=True)

    def _record(self, module, args, kwargs, output):
        position_ids = kwargs["position_ids"] if "position_ids" in kwargs else args[1]
        self.calls.append(position_ids[0].tolist())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._handle.remove()


@pytest.mark.parametrize("mode", [QuestionMode.QUESTION_AWARE, QuestionMode.QUESTION_AGNOSTIC], ids=str)
def test_tokens_after_eviction_continue_at_the_original_prompt_length(model, context, questions, mode):
    prompt = PromptTokens(context, questions[0])
    press = build_press("knorm", 0.5)
    with PositionRecorder(model) as recorder:
        generation = generate_one(Decoding(model, press, mode, 5, set()), prompt)
    pressed = prompt.length - 1 if mode == QuestionMode.QUESTION_AWARE else len(context)
    assert generation.kept_tokens == pressed // 2  # half the pressed tokens really were dropped
    # What the press did not see (the last prompt token, or the question) runs on the compressed cache
    # at its original positions, so even the first answer token reads only what the press kept.
    expected = [list(range(pressed)), list(range(pressed, prompt.length))]
    expected += [[prompt.length + step] for step in range(4)]
    assert recorder.calls == expected


def test_the_first_answer_token_reads_the_compressed_cache(model, context, questions):
    """A pass under the press attends the whole prompt, so its logits must not choose the first answer token."""
    from kvcache_bench.engine.prefill import prefill_example

    prompt = PromptTokens(context, questions[0])
    full = prefill_example(model, prompt, None, QuestionMode.QUESTION_AWARE)
    pressed = prefill_example(model, prompt, build_press("streaming_llm", 0.1), QuestionMode.QUESTION_AWARE)
    assert pressed.pressed_tokens == prompt.length - 1 and pressed.kept_tokens < prompt.length / 5
    assert not torch.allclose(full.last_logits, pressed.last_logits, atol=1e-4)


def test_shared_context_answers_continue_at_each_prompts_length(model, context, questions):
    with PositionRecorder(model) as recorder:
        generate_shared_context(Decoding(model, build_press("streaming_llm", 0.25), QuestionMode.QUESTION_AGNOSTIC, 3, set()), context, questions)
    expected = [list(range(len(context)))]
    for question in questions:
        length = len(context) + len(question)
        expected += [list(range(len(context), length)), [length], [length + 1]]
    assert recorder.calls == expected


QUESTION_AGNOSTIC_CASES = [
    ("snapkv", 0.5, {"window_size": 8}),
    ("streaming_llm", 0.25, {}),
    ("knorm", 0.5, {}),
    ("pyramidkv", 0.5, {"window_size": 8}),  # layers end up with different lengths
    ("full_cache", 1.0, {}),
    ("kv_quant_2bit", 1.0, {"residual_length": 16, "q_group_size": 16}),  # rolled back without cropping
]


@pytest.mark.parametrize("method,retention,kwargs", QUESTION_AGNOSTIC_CASES, ids=[c[0] for c in QUESTION_AGNOSTIC_CASES])
def test_compressing_a_shared_context_once_answers_like_compressing_per_question(model, context, questions, method, retention, kwargs):
    press = build_press(method, retention, kwargs if method != "kv_quant_2bit" else None)
    make_cache = cache_factory_for(method, model, kwargs if method == "kv_quant_2bit" else None)
    compressions = []
    if press is not None:
        original = press.compress
        press.compress = lambda *args, **kw: compressions.append(1) or original(*args, **kw)
    shared = generate_shared_context(Decoding(model, press, QuestionMode.QUESTION_AGNOSTIC, 8, STOP_IDS, make_cache=make_cache), context, questions)
    if press is not None:
        assert len(compressions) == model.config.num_hidden_layers  # once per layer, not per question
    separate = [
        generate_one(Decoding(model, press, QuestionMode.QUESTION_AGNOSTIC, 8, STOP_IDS, make_cache=make_cache), PromptTokens(context, q))
        for q in questions
    ]
    assert [g.token_ids for g in shared] == [g.token_ids for g in separate]
    assert [g.kept_tokens for g in shared] == [g.kept_tokens for g in separate]
    assert all(g.shared_context_questions == len(questions) for g in shared)


def test_full_cache_batch_of_four_left_padded_equals_batch_one(model):
    prompts = [PromptTokens(random_prompt_ids(n, seed=20 + n), random_prompt_ids(5, seed=n)) for n in (70, 52, 31, 17)]
    batched = generate_padded_batch(Decoding(model, None, QuestionMode.QUESTION_AWARE, 10, STOP_IDS, pad_token_id=0), prompts)
    single = [generate_one(Decoding(model, None, QuestionMode.QUESTION_AWARE, 10, STOP_IDS), p) for p in prompts]
    assert [g.token_ids for g in batched] == [g.token_ids for g in single]
    assert all(len(g.token_ids) == 10 for g in single)  # nothing stopped early: every token compared


def test_quantised_cache_changes_the_computation_and_two_bits_more_than_four(model, context, questions):
    def last_logits(method):
        cache = cache_factory_for(method, model, {"residual_length": 16, "q_group_size": 16} if method != "full_cache" else None)()
        with torch.inference_mode():
            prefill(model, cache, context)
            return prefill(model, cache, questions[0], start_position=len(context))

    reference = last_logits("full_cache")
    error4 = (last_logits("kv_quant_4bit") - reference).abs().max().item()
    error2 = (last_logits("kv_quant_2bit") - reference).abs().max().item()
    assert 0 < error4 < error2


def test_samsum_style_minimum_forbids_stopping_at_the_first_token(model, context):
    first = generate_one(Decoding(model, None, QuestionMode.QUESTION_AWARE, 4, set()), PromptTokens(context, [])).token_ids[0]
    stopped = generate_one(Decoding(model, None, QuestionMode.QUESTION_AWARE, 4, {first}), PromptTokens(context, []))
    assert stopped.token_ids == [first]
    forced = generate_one(Decoding(model, None, QuestionMode.QUESTION_AWARE, 4, {first}, min_new_tokens=1), PromptTokens(context, []))
    assert forced.token_ids[0] != first


def test_a_cell_answers_alike_whatever_masking_cell_ran_before_it_on_the_model(context, questions):
    """A model worker runs cell after cell on one model. A per-head press (KVCompose unstructured) leaves its key
    masks on the attention modules; KVCompose prefills in eager attention, which never clears them, so the next
    cell decoded through the last cell's masks (an IndexError on a shorter prompt; wrong keys hidden otherwise)."""
    fresh = tiny_llama(vocab_size=256, seed=0)  # not the module's model: this test leaves masks on it
    prompt = PromptTokens(context[:60], questions[0])
    alone = generate_one(Decoding(fresh, build_press("kvcompose", 0.5), QuestionMode.QUESTION_AWARE, 6, set()), prompt)
    generate_one(Decoding(fresh, build_press("kvcompose_unstructured", 0.5), QuestionMode.QUESTION_AWARE, 6, set()), PromptTokens(context, questions[1]))
    after = generate_one(Decoding(fresh, build_press("kvcompose", 0.5), QuestionMode.QUESTION_AWARE, 6, set()), prompt)
    assert after.token_ids == alone.token_ids and after.kept_tokens == alone.kept_tokens

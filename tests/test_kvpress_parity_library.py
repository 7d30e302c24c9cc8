"""Parity for every method that runs offline: greedy ids equal kvpress 0.5.5's own on SmolLM2 (fp32, CPU).

The methods come from ``kvcache_bench.methods.parity.parity_plan()``, derived from the catalogue: every built-in
method with a press and no hub data, the full cache and the quantised caches, at retention 0.5 (a method that
takes no retention at its ``BUDGET_KWARGS``), question-aware, 6 new tokens, on a haystack of ~260 tokens.
Where kvpress's pipeline itself fails (``PIPELINE_FAILS``) the reference is the press applied by hand through
kvpress's own hooks, and the test asserts that the pipeline still fails; where this engine refuses a method
(Finch, and the two decoding-time presses that fail in kvpress itself) the test asserts the refusal. Decoding-time
presses are compared at ``DECODING_BUDGET``, 12 new tokens, with the press active over question and decoding.

Question-agnostic for ``question_agnostic_methods()`` only, the first method of each family: that path is the
same engine code for every press, and all of them would double this module's time.
tests/test_kvpress_parity.py adds five presses at retention 0.25 in both modes, 12 new tokens.
"""

import pytest
import torch
from test_kvpress_parity import (  # noqa: F401
    ANSWER_PREFIX,
    QUESTION,
    haystack,
    kvpress_answer_ids,
    kvpress_pipeline,
    smollm2,
)

from kvcache_bench.engine.decoders.one_by_one import generate_one
from kvcache_bench.engine.decoders.press_while_decoding import generate_one_pressing_while_decoding
from kvcache_bench.engine.greedy import Decoding
from kvcache_bench.engine.loading import load_model, stop_token_ids
from kvcache_bench.engine.prefill import pressed_and_trailing
from kvcache_bench.methods.catalogue import DECODING
from kvcache_bench.methods.parity import (
    BUDGET_KWARGS,
    DECODING_BUDGET,
    DECODING_FAILS,
    ENGINE_REFUSES,
    HOOKS,
    PIPELINE,
    PIPELINE_ERROR,
    REFUSED,
    WHILE_DECODING,
    methods_checked,
    question_agnostic_methods,
)
from kvcache_bench.methods.properties_table import runs_offline
from kvcache_bench.methods.registry import (
    FULL_RETENTION,
    attention_implementation_for,
    build_press,
    cache_factory_for,
    get_method,
)
from kvcache_bench.runtime.method_checks import measure
from kvcache_bench.study.cell_checks import Cell, problems_with
from kvcache_bench.study.prompt_tokens import build_prompt_tokens
from kvcache_bench.study.question_modes import QuestionMode

pytestmark = pytest.mark.usefixtures("one_torch_thread")

NEW_TOKENS = 6
DECODING_NEW_TOKENS = 12  # DECODING_BUDGET compresses every 2 passes: most of the answer reads a compressed cache
RETENTION = 0.5
CONTEXT = haystack(8, needle_at=3)
AWARE, AGNOSTIC = QuestionMode.QUESTION_AWARE, QuestionMode.QUESTION_AGNOSTIC


def cases(how: str) -> list:
    agnostic = set(question_agnostic_methods())
    return [pytest.param(m, mode, id=f"{m}-{mode}") for m in methods_checked(how) for mode in (AWARE, AGNOSTIC) if mode == AWARE or m in agnostic]


@pytest.fixture(scope="module")
def models(smollm2, kvpress_pipeline, smollm2_model_dir):  # noqa: F811
    """(model, kvpress pipeline) per attention implementation: observed attention needs eager, as the engine loads it."""
    from kvpress import KVPressTextGenerationPipeline

    loaded = {"sdpa": (smollm2[0], kvpress_pipeline)}

    def get(attention: str):
        if attention not in loaded:
            model = load_model(smollm2_model_dir, "float32", attention, torch.device("cpu"))
            loaded[attention] = (model, KVPressTextGenerationPipeline(model=model, tokenizer=smollm2[1], device=torch.device("cpu")))
        return loaded[attention]

    return get


def fresh_press(method: str):
    torch.manual_seed(0)  # presses that draw from torch's generator (LeverageScore's sketch) draw the same numbers
    spec = get_method(method)
    return build_press(method, RETENTION if spec.takes_retention else FULL_RETENTION, BUDGET_KWARGS.get(method), seed=0)


def kvpress_inputs(mode: QuestionMode) -> tuple[str, str]:
    """(context, question) as kvpress is used in each mode: question-aware, the question inside the context."""
    return (CONTEXT + QUESTION, "") if mode == AWARE else (CONTEXT, QUESTION)


def engine_answer(model, tokenizer, method: str, mode: QuestionMode):
    """This engine's answer (``generate_one``, as a cell runs it), the prompt, and what the press did to the cache."""
    prompt = build_prompt_tokens(tokenizer, "niah_single_1", CONTEXT, QUESTION, 100_000, answer_prefix=ANSWER_PREFIX)
    made = []
    factory = cache_factory_for(method, model)

    def recording_cache():
        made.append(factory())
        return made[-1]

    ours = generate_one(Decoding(model, fresh_press(method), mode, NEW_TOKENS, stop_token_ids(model, tokenizer), make_cache=recording_cache), prompt)
    return ours, prompt, made[0], what_the_press_did(model, made[0], ours)


def what_the_press_did(model, cache, generation) -> set[str]:
    """The compression visible in the cache after generating: so that no test compares two full caches."""
    from transformers import QuantizedCache

    if isinstance(cache, QuantizedCache):
        return {"quantised"}
    done = set()
    if generation.kept_tokens < generation.pressed_tokens:
        done.add("removed tokens")
    masks = [getattr(layer.self_attn, "masked_key_indices", None) for layer in model.model.layers]
    if any(m is not None and len(m[0]) > 0 for m in masks):
        done.add("masked slots")
    kept = int(generation.kept_tokens)
    if any(bool((layer.keys[:, :, :kept].abs().amax(dim=2) == 0).any()) for layer in cache.layers):
        done.add("zeroed key channels")
    return done


def hidden_slots(model) -> list[set]:
    """Per layer, the (batch, head, position) slots kvpress's attention patch hides (masking presses)."""
    masks = [getattr(layer.self_attn, "masked_key_indices", None) for layer in model.model.layers]
    return [set() if m is None else set(zip(*(t.tolist() for t in m))) for m in masks]


def assert_same_slots_kept(theirs_cache, theirs_hidden, ours_cache, model, lengths=None):
    """The compressed prompt is the same on both sides: each layer's kept keys (zeroed channels included) and
    hidden slots. ``lengths``: each layer's length after compression (default: ``theirs_cache``'s own)."""
    from transformers import QuantizedCache

    if not isinstance(theirs_cache, QuantizedCache):
        for layer, (theirs, ours) in enumerate(zip(theirs_cache.layers, ours_cache.layers)):
            kept = theirs.keys.shape[2] if lengths is None else lengths[layer]
            torch.testing.assert_close(ours.keys[:, :, :kept], theirs.keys[:, :, :kept], rtol=0, atol=1e-5, msg=f"layer {layer}")
    assert hidden_slots(model) == theirs_hidden


def assert_same_tokens_pressed(inputs, prompt, mode):
    pressed, trailing = pressed_and_trailing(prompt, mode)
    assert inputs["context_ids"][0].tolist() == pressed
    assert inputs["questions_ids"][0][0].tolist() == trailing


@pytest.mark.parametrize("method, mode", cases(PIPELINE))
def test_greedy_ids_equal_kvpress_pipeline(models, smollm2, method, mode):  # noqa: F811
    model, pipeline = models(attention_implementation_for(method, "sdpa"))
    tokenizer = smollm2[1]
    theirs_cache = cache_factory_for(method, model)()  # kvpress's pipeline cuts it back to the compressed prompt
    theirs, inputs = kvpress_answer_ids(pipeline, *kvpress_inputs(mode), fresh_press(method), NEW_TOKENS, theirs_cache)
    theirs_hidden = hidden_slots(model)
    ours, prompt, ours_cache, done = engine_answer(model, tokenizer, method, mode)
    assert_same_tokens_pressed(inputs, prompt, mode)
    assert bool(done) == (method != "full_cache"), done  # the press really compressed
    assert_same_slots_kept(theirs_cache, theirs_hidden, ours_cache, model)
    assert ours.token_ids == theirs, (tokenizer.decode(ours.token_ids), tokenizer.decode(theirs))


def kvpress_hooks_answer_ids(model, inputs, press, one_token_at_a_time: bool | None = None):
    """kvpress's pipeline by hand, for the presses it cannot run: the context through the model without its head
    under ``with press(model)`` (kvpress's own hooks, positions implicit, as its ``_forward`` does), then the
    question at the positions after the context and greedy decoding, stopping at the model's EOS, as its
    ``generate_answer`` does. Layers of unequal length take the question one token at a time (one query needs
    no causal mask, which is what the pipeline's single pass trips on).

    Returns the greedy ids, the cache, each layer's length after compression and the slots the press hid."""
    from transformers import DynamicCache

    context_ids, question_ids = inputs["context_ids"], inputs["questions_ids"][0]
    stop = model.generation_config.eos_token_id
    stop = set(stop if isinstance(stop, list) else [stop])
    cache = DynamicCache()
    with torch.no_grad():  # as transformers' Pipeline.forward runs kvpress's _forward
        with press(model):
            model.model(input_ids=context_ids, past_key_values=cache)
        lengths, hidden = [cache.get_seq_length(i) for i in range(len(cache.layers))], hidden_slots(model)
        if one_token_at_a_time is None:
            one_token_at_a_time = len(set(lengths)) > 1
        step = 1 if one_token_at_a_time else question_ids.shape[1]
        position = context_ids.shape[1]
        for start in range(0, question_ids.shape[1], step):
            chunk = question_ids[:, start : start + step]
            positions = torch.arange(position, position + chunk.shape[1]).unsqueeze(0)
            logits = model(input_ids=chunk, past_key_values=cache, position_ids=positions, logits_to_keep=1).logits[0, -1]
            position += chunk.shape[1]
        generated = [int(logits.argmax())]
        while len(generated) < NEW_TOKENS and generated[-1] not in stop:
            logits = model(input_ids=torch.tensor([[generated[-1]]]), past_key_values=cache, position_ids=torch.tensor([[position]])).logits[0, -1]
            position += 1
            generated.append(int(logits.argmax()))
    return generated, cache, lengths, hidden


@pytest.mark.parametrize("method, mode", cases(HOOKS))
def test_greedy_ids_equal_kvpress_hooks_where_its_pipeline_fails(models, smollm2, method, mode):  # noqa: F811
    model, pipeline = models(attention_implementation_for(method, "sdpa"))
    with pytest.raises(Exception, match=PIPELINE_ERROR):  # when this stops failing, move the method to the pipeline
        kvpress_answer_ids(pipeline, *kvpress_inputs(mode), fresh_press(method), NEW_TOKENS)
    context, question = kvpress_inputs(mode)
    inputs = pipeline.preprocess(context, [question], ANSWER_PREFIX, max_context_length=10**9)
    theirs, theirs_cache, lengths, theirs_hidden = kvpress_hooks_answer_ids(model, inputs, fresh_press(method))
    ours, prompt, ours_cache, done = engine_answer(model, smollm2[1], method, mode)
    assert_same_tokens_pressed(inputs, prompt, mode)
    assert "removed tokens" in done and len(set(lengths)) > 1  # layers of unequal length, what the pipeline fails on
    assert_same_slots_kept(theirs_cache, theirs_hidden, ours_cache, model, lengths)
    assert ours.token_ids == theirs, (smollm2[1].decode(ours.token_ids), smollm2[1].decode(theirs))


def test_the_hook_reference_is_kvpress_pipeline_where_both_run(kvpress_pipeline):  # noqa: F811
    """The by-hand reference, question one token at a time, answers exactly as kvpress's pipeline (SnapKV)."""
    from transformers import DynamicCache

    pipeline_cache = DynamicCache()
    theirs, inputs = kvpress_answer_ids(kvpress_pipeline, CONTEXT + QUESTION, "", fresh_press("snapkv"), NEW_TOKENS, pipeline_cache)
    pipeline_hidden = hidden_slots(kvpress_pipeline.model)
    by_hand, hooks_cache, lengths, _ = kvpress_hooks_answer_ids(kvpress_pipeline.model, inputs, fresh_press("snapkv"), one_token_at_a_time=True)
    assert by_hand == theirs and lengths == [layer.keys.shape[2] for layer in pipeline_cache.layers]
    assert_same_slots_kept(pipeline_cache, pipeline_hidden, hooks_cache, kvpress_pipeline.model)


@pytest.mark.parametrize("method", methods_checked(REFUSED))
def test_a_method_the_engine_cannot_run_is_refused_before_generation(method):
    """Not parity-tested because refused: its check says why, before any job runs (docs/parity.md lists them)."""
    properties = measure(method)
    spec = get_method(method)
    cell = Cell("haystack", "niah_single_1", "smollm2", method, "question_aware", RETENTION if spec.takes_retention else FULL_RETENTION, 1)
    refusals = " ".join(problems_with(cell, measured=properties))
    assert not runs_offline(properties)
    measured_error, _ = DECODING_FAILS[method] if spec.family == DECODING else ENGINE_REFUSES[method]
    assert measured_error in refusals, refusals


@pytest.mark.parametrize("method, mode", cases(WHILE_DECODING))
def test_greedy_ids_equal_kvpress_pipeline_with_the_press_active_while_decoding(models, smollm2, method, mode):  # noqa: F811
    """kvpress's pipeline prefills the context without a DecodingPress, then runs the question and greedy decoding
    under it; the engine's eager path does the same, at DECODING_BUDGET (compressing within the new tokens)."""
    from transformers import DynamicCache

    model, pipeline = models(attention_implementation_for(method, "sdpa"))
    tokenizer = smollm2[1]
    theirs, inputs = kvpress_answer_ids(pipeline, *kvpress_inputs(mode), fresh_press(method), DECODING_NEW_TOKENS, DynamicCache())
    prompt = build_prompt_tokens(tokenizer, "niah_single_1", CONTEXT, QUESTION, 100_000, answer_prefix=ANSWER_PREFIX)
    cache = []

    def recording_cache():
        cache.append(DynamicCache())
        return cache[-1]

    ours = generate_one_pressing_while_decoding(Decoding(model, fresh_press(method), mode, DECODING_NEW_TOKENS, stop_token_ids(model, tokenizer), make_cache=recording_cache), prompt)
    assert_same_tokens_pressed(inputs, prompt, mode)
    through = prompt.length + len(ours.token_ids) - 1
    assert ours.pressed_tokens == through and len(ours.token_ids) > DECODING_BUDGET["compression_interval"]
    removed = ours.kept_tokens == cache[0].get_seq_length() == DECODING_BUDGET["target_size"] < through
    assert removed or any(hidden_slots(model)), "the press compressed nothing while decoding"
    assert ours.token_ids == theirs, (tokenizer.decode(ours.token_ids), tokenizer.decode(theirs))


def test_a_prefill_decoding_press_compresses_the_prompt_and_while_decoding_as_kvpress_pipeline(smollm2, kvpress_pipeline):  # noqa: F811
    """kvpress's PrefillDecodingPress (a wrapper, used through custom_methods): the press over the context's prefill
    too, read from its class as the pipeline reads it; ids equal, the prompt compressed and then the decoding."""
    from kvpress import DecodingPress, KnormPress, PrefillDecodingPress, SnapKVPress
    from transformers import DynamicCache

    def press():
        decoding = DecodingPress(KnormPress(), **{**DECODING_BUDGET, "target_size": 100})
        return PrefillDecodingPress(prefilling_press=SnapKVPress(0.5, window_size=8), decoding_press=decoding)

    model, tokenizer = smollm2
    prompt = build_prompt_tokens(tokenizer, "niah_single_1", CONTEXT, QUESTION, 100_000, answer_prefix=ANSWER_PREFIX)
    theirs, _ = kvpress_answer_ids(kvpress_pipeline, CONTEXT, QUESTION, press(), DECODING_NEW_TOKENS, DynamicCache())
    ours = generate_one_pressing_while_decoding(Decoding(model, press(), AGNOSTIC, DECODING_NEW_TOKENS, stop_token_ids(model, tokenizer)), prompt)
    assert ours.kept_tokens == 100 < ours.pressed_tokens and ours.token_ids == theirs, tokenizer.decode(ours.token_ids)

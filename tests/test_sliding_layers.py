"""Sliding-window layers (Gemma 3) as a setting: ``keep`` compresses the global layers and keeps each sliding layer as
the model's own window, ``compress`` compresses every layer, its windows still in positions, not slots.

The reference here is built independently of the engine's masks: the whole prompt in a plain cache that holds every
position in every layer, each later token attending through a mask made in this file from positions alone (the
positions the press kept in that layer, within a sliding layer's window, causal). An engine whose mask compared
positions with slot indices, or let a block of appended tokens see its own future, gives other tokens.
"""

from __future__ import annotations

import logging
from functools import partial

import pytest
import torch

from kvcache_bench.engine.decoders import decode_many, one_by_one, shared_context, shared_contexts_together
from kvcache_bench.engine.greedy import Decoding
from kvcache_bench.engine.layer_masks import LAYER_MASKS_KWARG, per_layer_masks
from kvcache_bench.engine.layer_types import GLOBAL, SLIDING, SlidingLayers, attach, layer_types_of
from kvcache_bench.engine.layered_cache import new_cache
from kvcache_bench.engine.prefill import prefill, pressed_and_trailing
from kvcache_bench.engine.slot_positions import KeptPositions
from kvcache_bench.methods.registry import build_press
from kvcache_bench.study.prompt_tokens import PromptTokens
from kvcache_bench.study.question_modes import QuestionMode
from tests.fixtures.tiny_models import TINY_GEMMA3_WINDOW, tiny_gemma3_text, tiny_llama

pytestmark = pytest.mark.usefixtures("one_torch_thread")
logging.getLogger("kvpress").setLevel(logging.ERROR)  # "Gemma3ForCausalLM not tested", once per press

NEW_TOKENS = 8
# presses that only choose slots (no key rewritten, no slot masked): the reference masks what they evicted
SELECTING = ["snapkv", "knorm", "streaming_llm", "tova", "pyramidkv", "random", "keydiff", "lagkv"]
SETTINGS = ["keep", "compress"]


def prompts(count: int = 4, seed: int = 1) -> list[PromptTokens]:
    """Contexts of 90-150 tokens (several 16-token windows), questions of 7, the last 2 held back."""
    generator = torch.Generator().manual_seed(seed)
    made = []
    for index in range(count):
        context = [2] + torch.randint(3, 300, (89 + 19 * index,), generator=generator).tolist()
        made.append(PromptTokens(context, torch.randint(3, 300, (7,), generator=generator).tolist(), held_back_tokens=2))
    return made


def model_with(setting: str | None):
    model = tiny_gemma3_text()
    attach(model, setting)
    return model


def kept_positions(model, pressed_ids: list[int], press) -> dict[int, set[int]]:
    """Per layer, the prompt positions a compressed run keeps (every position of a layer the press leaves alone)."""
    layer_types = layer_types_of(model)
    cache = new_cache(layer_types)
    with KeptPositions(model, layer_types.pressed_layers) as tracker:
        prefill(model, cache, pressed_ids, press)
    traced = tracker.positions_by_layer(cache)
    everything = set(range(len(pressed_ids)))
    return {layer: set(traced[layer][0].tolist()) if layer in traced else everything for layer in range(len(cache.layers))}


@torch.inference_mode()
def masked_full_cache_answer(
    model, prompt: PromptTokens, mode: QuestionMode, press, window_over: str = "positions"
) -> list[int]:
    """Greedy tokens from the full cache, each later token's attention masked to what the compressed cache holds.

    ``window_over="slots"`` is the defect, for contrast: a sliding layer then sees its W most recent held slots,
    however many positions they span."""
    from transformers import DynamicCache

    layer_types = layer_types_of(model)
    pressed_ids, trailing = pressed_and_trailing(prompt, mode)
    kept = kept_positions(model, pressed_ids, press) if press is not None else None
    cache = DynamicCache()  # every layer holds every position: nothing evicted, nothing windowed away
    logits = model(input_ids=torch.tensor([pressed_ids]), past_key_values=cache, use_cache=True).logits[:, -1]
    fed, generated = list(trailing), []
    position = len(pressed_ids)
    while len(generated) < NEW_TOKENS:
        if fed:
            token = fed.pop(0)
        else:
            token = int(logits.argmax(-1))
            generated.append(token)
            if len(generated) == NEW_TOKENS:
                break
        keys = torch.arange(position + 1)
        masks = []
        for layer in range(len(layer_types.kinds)):
            seen = keys >= len(pressed_ids)  # appended tokens: all earlier ones (causal by construction)
            if kept is not None:
                seen |= torch.tensor([k in kept[layer] for k in range(len(pressed_ids))] + [False] * (position + 1 - len(pressed_ids)))
            else:
                seen |= keys < len(pressed_ids)
            if layer_types.is_sliding(layer) and window_over == "positions":
                seen &= keys > position - layer_types.window
            elif layer_types.is_sliding(layer):
                held = seen.nonzero().view(-1)
                seen = torch.zeros_like(seen)
                seen[held[-layer_types.window :]] = True
            masks.append(seen.view(1, 1, 1, -1))
        with per_layer_masks(model):
            logits = model(
                input_ids=torch.tensor([[token]]),
                past_key_values=cache,
                position_ids=torch.tensor([[position]]),
                use_cache=True,
                **{LAYER_MASKS_KWARG: masks},
            ).logits[:, -1]
        position += 1
    return generated


def engine_answers(model, batch: list[PromptTokens], mode: QuestionMode, method: str, decode_batch_size: int):
    def settings():
        press = None if method == "full_cache" else build_press(method, 0.5, {}, seed=0)
        layer_types = layer_types_of(model)
        return Decoding(model, press, mode, NEW_TOKENS, set(), partial(new_cache, layer_types), decode_batch_size=decode_batch_size)

    if decode_batch_size == 1:
        return [one_by_one.decode(settings(), [prompt])[0][0].token_ids for prompt in batch]
    decoder = decode_many if mode == QuestionMode.QUESTION_AWARE else shared_contexts_together
    generations, path = decoder.decode(settings(), batch)
    assert path.effective_decode_batch_size == len(batch)  # stacked, not fallen back to batch 1
    return [generation.token_ids for generation in generations]


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("mode", [QuestionMode.QUESTION_AWARE, QuestionMode.QUESTION_AGNOSTIC], ids=lambda m: m.value)
def test_the_full_cache_equals_transformers_own_generation(setting, mode):
    # Nothing evicted: whatever the setting, the model's own windows in positions, as transformers' generate runs them.
    model = model_with(setting)
    batch = prompts(3)
    expected = []
    for prompt in batch:
        ids = torch.tensor([prompt.context_ids + prompt.question_ids])
        output = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0)
        expected.append(output[0, ids.shape[1] :].tolist())
    assert engine_answers(model, batch, mode, "full_cache", 1) == expected
    assert engine_answers(model, batch, mode, "full_cache", 32) == expected


@pytest.mark.parametrize("method", SELECTING)
@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("mode", [QuestionMode.QUESTION_AWARE, QuestionMode.QUESTION_AGNOSTIC], ids=lambda m: m.value)
def test_a_compressed_cache_answers_as_the_full_cache_masked_to_what_it_kept(method, setting, mode):
    # Decode batch 1 and 32 both equal the positions-only reference: windows measured in positions, the appended
    # question (agnostic) or held-back tail (aware) causal among itself, every row's window its own.
    model = model_with(setting)
    batch = prompts(4)
    expected = [masked_full_cache_answer(model, prompt, mode, build_press(method, 0.5, {}, seed=0)) for prompt in batch]
    assert engine_answers(model, batch, mode, method, 1) == expected
    assert engine_answers(model, batch, mode, method, 32) == expected


def test_a_mask_comparing_positions_with_slots_would_be_caught():
    # The reference is not blind to the defect it guards against: windows counted in slots (kvpress's pipeline on
    # Gemma3ForCausalLM) give other tokens than windows in positions once a compressed sliding layer's slots span
    # more positions than its window, and the engine gives the positions' tokens.
    model = model_with("compress")
    prompt = prompts(1)[0]
    mode = QuestionMode.QUESTION_AGNOSTIC
    layer_types = layer_types_of(model)
    kept = kept_positions(model, pressed_and_trailing(prompt, mode)[0], build_press("knorm", 0.5, {}, seed=0))
    sliding = [layer for layer in range(len(layer_types.kinds)) if layer_types.is_sliding(layer)]
    assert min(max(kept[layer]) - min(kept[layer]) for layer in sliding) > TINY_GEMMA3_WINDOW
    in_positions = masked_full_cache_answer(model, prompt, mode, build_press("knorm", 0.5, {}, seed=0))
    in_slots = masked_full_cache_answer(model, prompt, mode, build_press("knorm", 0.5, {}, seed=0), window_over="slots")
    assert in_slots != in_positions
    assert engine_answers(model, [prompt], mode, "knorm", 1) == [in_positions]


def test_the_settings_compress_different_layers_and_records_count_them_by_type():
    batch = prompts(1)
    kept = {}
    for setting in SETTINGS:
        model = model_with(setting)
        press = build_press("snapkv", 0.5, {}, seed=0)
        decoding = Decoding(model, press, QuestionMode.QUESTION_AGNOSTIC, 2, set(), partial(new_cache, layer_types_of(model)))
        kept[setting] = one_by_one.decode(decoding, batch)[0][0].kept_by_layer_type
    context = len(batch[0].context_ids)
    # keep: the global layer halved, the sliding layers the model's own window (W - 1 positions) whatever the press
    assert kept["keep"] == {GLOBAL: context // 2, SLIDING: TINY_GEMMA3_WINDOW - 1}
    # compress: every layer halved
    assert kept["compress"] == {GLOBAL: context // 2, SLIDING: context // 2}


def test_a_model_without_a_setting_runs_the_default_and_says_so():
    model = tiny_gemma3_text()
    record = attach(model, None).record()
    assert record["sliding_layers"] == "keep" and record["sliding_layers_default"] is True
    assert attach(model, "compress").record()["sliding_layers_default"] is False
    # a model without sliding layers has nothing to say
    assert attach(tiny_llama(), None).record() == {"sliding_layers": None}


def test_shared_context_questions_each_see_the_compressed_context_alone():
    # question-agnostic, several questions on one context: the cache (its windows included) is rolled back between
    # them, so each equals its own compression
    model = model_with("keep")
    first = prompts(1)[0]
    second = PromptTokens(first.context_ids, [5, 6, 7, 8, 9, 10, 11], held_back_tokens=2)
    decoding = Decoding(model, build_press("snapkv", 0.5, {}, seed=0), QuestionMode.QUESTION_AGNOSTIC, NEW_TOKENS,
                        set(), partial(new_cache, layer_types_of(model)))
    together = [g.token_ids for g in shared_context.decode(decoding, [first, second])[0]]
    alone = [one_by_one.decode(decoding, [prompt])[0][0].token_ids for prompt in (first, second)]
    assert together == alone


def test_presses_computing_rope_themselves_get_their_layers_own():
    # Gemma 3's one rotary module needs the layer's type; kvpress's presses call it without one. Expected Attention
    # (it rotates its expected query) crashes on plain kvpress and runs here, each layer on its own base.
    from kvpress import ExpectedAttentionPress

    from kvcache_bench.engine.layer_types import LayerRotary, language_model, press_on_pressed_layers

    model = model_with("compress")
    ids = torch.tensor([prompts(1)[0].context_ids])
    with pytest.raises(AttributeError, match="None_inv_freq"):
        with torch.inference_mode(), ExpectedAttentionPress(compression_ratio=0.5)(model):
            model(input_ids=ids, use_cache=True)
    press = ExpectedAttentionPress(compression_ratio=0.5)
    with torch.inference_mode(), press_on_pressed_layers(press, model):
        model(input_ids=ids, use_cache=True)
        layers = language_model(model).layers
        rotary = language_model(model).rotary_emb
        x, positions = torch.zeros(1, 1, 64), torch.tensor([[100]])
        for index, layer in enumerate(layers):
            assert isinstance(layer.self_attn.rotary_emb, LayerRotary)
            cos, _ = layer.self_attn.rotary_emb(x, positions)
            own = rotary(x, positions, layer_types_of(model).kinds[index])[0]
            assert torch.equal(cos, own)
    local, global_ = (rotary(x, positions, kind)[0] for kind in (SLIDING, GLOBAL))
    assert not torch.allclose(local, global_)  # the bases differ: a press given the wrong one rotates otherwise


def test_the_class_that_loads_the_weights_does_not_decide():
    # The same weights as Gemma3ForConditionalGeneration (how AutoModelForCausalLM loads a multimodal checkpoint,
    # kvpress's supported class: it skips sliding layers) and as Gemma3ForCausalLM (kvpress hooks every layer):
    # the setting decides, so both give the same tokens.
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    text_model = tiny_gemma3_text()
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14)
    config = Gemma3Config(text_config=text_model.config.to_dict(), vision_config=vision, mm_tokens_per_image=4,
                          image_token_index=299, boi_token_index=297, eoi_token_index=298)
    config._attn_implementation = "sdpa"
    multimodal = Gemma3ForConditionalGeneration(config).eval()
    multimodal.model.language_model.load_state_dict(text_model.model.state_dict())
    multimodal.lm_head.load_state_dict(text_model.lm_head.state_dict())
    batch = prompts(2)
    for setting in SETTINGS:
        answers = []
        for model in (text_model, multimodal):
            attach(model, setting)
            answers.append(engine_answers(model, batch, QuestionMode.QUESTION_AGNOSTIC, "snapkv", 1))
        assert answers[0] == answers[1], setting


def test_a_block_appended_to_a_compressed_llama_cache_stays_causal():
    # The models already in (every layer global): transformers' own mask, from slots, keeps an appended question
    # causal among itself after compression. Appending it token by token is the reference.
    model = tiny_llama()
    prompt = PromptTokens([1] + list(range(3, 120)), list(range(130, 140)))
    press = build_press("snapkv", 0.5, {}, seed=0)
    decoding = Decoding(model, press, QuestionMode.QUESTION_AGNOSTIC, NEW_TOKENS, set())
    block = one_by_one.decode(decoding, [prompt])[0][0].token_ids
    cache = new_cache(layer_types_of(model))
    prefill(model, cache, prompt.context_ids, build_press("snapkv", 0.5, {}, seed=0))
    for offset, token in enumerate(prompt.question_ids):
        logits = prefill(model, cache, [token], None, start_position=len(prompt.context_ids) + offset)
    from kvcache_bench.engine.greedy import greedy_decode

    assert greedy_decode(decoding, cache, logits, prompt.length) == block


def test_a_press_that_does_not_run_on_sliding_layers_is_refused_before_any_job(tmp_path):
    # kvpress's KVzip refuses every Gemma 3 class: on a model with sliding layers its cells are refused at parse with
    # kvpress's reason, as measured on a tiny Gemma 3 (the shipped properties), while SnapKV's run
    import json

    from kvcache_bench.methods.shipped_properties import shipped_properties
    from kvcache_bench.study.cell_checks import problems_of
    from kvcache_bench.study.sliding_layers import sliding_layers_of

    folder = tmp_path / "gemma"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"layer_types": ["sliding_attention", "full_attention"]}))
    setting = sliding_layers_of({"path": str(folder)})
    assert setting == "keep"  # no setting: the documented default
    assert sliding_layers_of({"path": str(tmp_path / "absent")}) is None
    assert sliding_layers_of({"path": str(tmp_path / "absent"), "sliding_layers": "compress"}) == "compress"

    def problems(method, sliding):
        cell = dict(dataset="d", task="niah_single_1", model="m", method=method, question_mode="question_agnostic",
                    retention=0.5 if method != "kv_quant_4bit" else 1.0, batch_size=1, decode_batch_size=32)
        return problems_of(cell, None, shipped_properties(method), 32, sliding)

    assert any("KVzipPress is not supported for Gemma3" in p for p in problems("kvzip", setting))
    assert problems("kvzip", None) == []  # the same cell on a model without sliding layers runs
    assert problems("snapkv", setting) == []
    assert any("compresses while decoding" in p for p in problems("decoding_knorm", setting))
    assert any("quantises the cache" in p for p in problems("kv_quant_4bit", setting))


def test_doctor_says_which_layer_types_each_press_touches():
    from kvcache_bench.methods.properties_table import on_sliding_layers
    from kvcache_bench.methods.shipped_properties import shipped_properties

    assert on_sliding_layers(shipped_properties("snapkv")) == "keep:global compress:global+sliding"
    assert on_sliding_layers(shipped_properties("kvzip")) == "keep:no compress:no"


def test_the_summary_says_what_a_model_with_sliding_layers_ran_and_whether_it_was_the_default():
    import pandas as pd

    from kvcache_bench.analysis.measured import measure_cell
    from kvcache_bench.analysis.summary_markdown import sliding_layer_notes

    records = [{"effective_retention": 0.5, "truncated": False, "sliding_layers": "keep", "sliding_layers_default": True}]
    measured = measure_cell(records, 0.5)
    assert measured["sliding_layers"] == "keep (default)"
    notes = sliding_layer_notes(pd.DataFrame([{"model": "gemma3-270m", **measured}]))
    assert notes == [
        "**gemma3-270m has sliding-window layers**: `sliding_layers: keep` (the default: `models.<name>.sliding_layers` "
        "unset), presses compressed its global layers alone and each sliding layer held the model's own window "
        "(docs/sliding-layers.md)."
    ]
    # a model without sliding layers: no column, no note
    assert measure_cell([{"effective_retention": 0.5, "truncated": False}], 0.5)["sliding_layers"] == ""
    assert sliding_layer_notes(pd.DataFrame([{"model": "smollm2"}])) == []


class _RecordingTokenizer:
    """What kvpress's pipeline asks of a tokenizer once it has ids: decode, here recording the ids it decodes."""

    def __init__(self):
        self.decoded = []

    def decode(self, ids, *args, **kwargs):
        self.decoded.append([int(i) for i in ids])
        return ""


def kvpress_pipeline_answer(model, context_ids: list[int], question_ids: list[int], press, new_tokens: int) -> list[int]:
    """Greedy ids of kvpress 0.5.5's own pipeline (``_forward``: the context compressed alone, the question after it),
    run on token ids: what kvpress does with ``Gemma3ForCausalLM`` (every layer hooked, a plain DynamicCache)."""
    from kvpress import KVPressTextGenerationPipeline

    pipeline = object.__new__(KVPressTextGenerationPipeline)  # no tokenizer needed for ids
    pipeline.model, pipeline.tokenizer = model, _RecordingTokenizer()
    inputs = {"context_ids": torch.tensor([context_ids]), "questions_ids": [torch.tensor([question_ids])]}
    with torch.inference_mode():
        pipeline._forward(inputs, max_new_tokens=new_tokens, press=press)
    return pipeline.tokenizer.decoded[-1]


@pytest.mark.parametrize("method", ["knorm", "snapkv", "streaming_llm"])
def test_compress_equals_kvpress_pipeline_where_its_windows_are_right(method):
    # Prompt and answer within one window: kvpress's slot windows and this engine's position windows see the same
    # slots, so `compress` (kvpress's choice of layers) gives kvpress's own greedy ids.
    model = tiny_gemma3_text(window=512)
    attach(model, "compress")
    generator = torch.Generator().manual_seed(3)
    context = [2] + torch.randint(3, 300, (200,), generator=generator).tolist()
    question = torch.randint(3, 300, (7,), generator=generator).tolist()
    model.generation_config.eos_token_id = None  # both decode the whole budget
    theirs = kvpress_pipeline_answer(model, context, question, build_press(method, 0.5, {}, seed=0), NEW_TOKENS)
    decoding = Decoding(model, build_press(method, 0.5, {}, seed=0), QuestionMode.QUESTION_AGNOSTIC, NEW_TOKENS, set(),
                        partial(new_cache, layer_types_of(model)))
    ours = one_by_one.decode(decoding, [PromptTokens(context, question)])[0][0].token_ids
    assert ours == theirs


def test_kvpress_pipeline_windows_count_slots_past_the_window_where_this_engine_counts_positions():
    # Past one window, kvpress's pipeline masks a compressed sliding layer by slot index: the last W slots, which
    # here hold positions further back than W, are all seen. This engine's answer is the positions-only reference's,
    # and kvpress's is another.
    from transformers import DynamicCache

    model = model_with("compress")
    prompt = prompts(1)[0]
    press = build_press("knorm", 0.5, {}, seed=0)
    layer_types = layer_types_of(model)
    cache = DynamicCache()  # kvpress's pipeline's cache, every layer hooked: what it keeps per sliding layer
    with KeptPositions(model) as tracker, torch.inference_mode(), press(model):
        model.model(input_ids=torch.tensor([prompt.context_ids]), past_key_values=cache)
    held = tracker.positions_by_layer(cache)
    first_query = len(prompt.context_ids)
    for layer in (index for index in range(len(layer_types.kinds)) if layer_types.is_sliding(index)):
        last_slots = held[layer][0][-TINY_GEMMA3_WINDOW:]  # what a slot window lets the first question token see
        assert int(last_slots.min()) <= first_query - TINY_GEMMA3_WINDOW  # positions out of the trained window
    model.generation_config.eos_token_id = None
    theirs = kvpress_pipeline_answer(model, prompt.context_ids, prompt.question_ids, build_press("knorm", 0.5, {}, seed=0),
                                     NEW_TOKENS)
    ours = engine_answers(model, [prompt], QuestionMode.QUESTION_AGNOSTIC, "knorm", 1)[0]
    reference = masked_full_cache_answer(model, prompt, QuestionMode.QUESTION_AGNOSTIC, build_press("knorm", 0.5, {}, seed=0))
    assert ours == reference and theirs != ours


def _runs_on_sliding_layers(setting: str) -> list[str]:
    """Every built-in press the shipped measurement found running on a tiny Gemma 3 under ``setting``."""
    from kvcache_bench.methods.properties_table import runs_offline
    from kvcache_bench.methods.registry import METHODS
    from kvcache_bench.methods.shipped_properties import shipped_properties

    names = []
    for method in METHODS:
        facts = shipped_properties(method) or {}
        if facts.get("sliding_layers") and runs_offline(facts) and facts["sliding_layers"][setting]["runs"]:
            names.append(method)
    return names


@pytest.mark.parametrize(
    "setting,method", [(setting, method) for setting in SETTINGS for method in _runs_on_sliding_layers(setting)]
)
def test_every_press_that_runs_decodes_alike_at_decode_batch_1_and_32(setting, method):
    # Question-agnostic (kvpress's leaderboard mode): each row's windows, masks and positions go with it into the
    # decode batch. Random presses draw from torch's generator: seeded alike for both.
    from kvcache_bench.methods.registry import FULL_RETENTION, attention_implementation_for, get_method

    model = model_with(setting)
    model.config._attn_implementation = attention_implementation_for(method, "sdpa", None)
    retention = 0.5 if get_method(method).takes_retention else FULL_RETENTION
    answers = []
    for decode_batch_size in (1, 32):
        torch.manual_seed(0)
        press = build_press(method, retention, {}, seed=0)
        decoding = Decoding(model, press, QuestionMode.QUESTION_AGNOSTIC, 4, set(),
                            partial(new_cache, layer_types_of(model)), decode_batch_size=decode_batch_size)
        decoder = one_by_one if decode_batch_size == 1 else shared_contexts_together
        batch = prompts(2)
        if decode_batch_size == 1:
            answers.append([decoder.decode(decoding, [prompt])[0][0].token_ids for prompt in batch])
        else:
            generations, path = decoder.decode(decoding, batch)
            assert path.effective_decode_batch_size == len(batch)
            answers.append([generation.token_ids for generation in generations])
    assert answers[0] == answers[1]


def test_bytes_held_count_what_each_layer_type_holds():
    # A 4,000-token context on Gemma 3 270M's pattern (15 sliding layers of 512, 3 global), half kept by the press:
    # the global layers hold 2,000 slots each, each window the last 511 positions whatever the press; the full cache
    # for the same prompt holds 4,000 in the global layers and 511 in each window (keep), every position in every
    # layer (compress).
    from kvcache_bench.engine.cell_runner import bytes_held
    from kvcache_bench.engine.greedy import Generation
    from kvcache_bench.engine.layer_types import LayerTypes

    kinds = tuple(([SLIDING] * 5 + [GLOBAL]) * 3)
    slot = 18 * 2 * 1 * 256 * 2  # bytes of one token in all 18 layers: K and V, one head of 256, bf16
    for setting, sliding_kept, full_windows in (("keep", 511, 511), ("compress", 2000, 4000)):
        layer_types = LayerTypes(kinds, 512, SlidingLayers(setting))
        generation = Generation([1], 4010, 2000.0, 0.0, 4000, kept_by_layer_type={GLOBAL: 2000.0, SLIDING: sliding_kept})
        held = bytes_held(generation, layer_types, slot, slot)
        per_layer = slot / 18
        assert held["kv_bytes_held_by_layer_type"] == {
            GLOBAL: round(2000 * 3 * per_layer), SLIDING: round(sliding_kept * 15 * per_layer)}
        assert held["kv_bytes_held"] == sum(held["kv_bytes_held_by_layer_type"].values())
        assert held["kv_bytes_uncompressed"] == round((3 * 4000 + 15 * full_windows) * per_layer)

"""The real-model probes: attention on position 0 (a sink or not), and padding as the only difference
between the batching harness at batch 1 and on left-padded batches."""

import pytest
import torch

from kvcache_bench.engine.loading import ModelSettings, load_model, load_tokenizer
from kvcache_bench.methods.registry import build_press
from kvcache_bench.runtime.probes import (
    attention_on_first_position,
    attention_sink_report,
    interleave_by_length,
    padding_effect,
    pads_kept,
)
from kvcache_bench.study.cell import CellRun
from tests.fixtures.tiny_models import random_prompt_ids, tiny_gemma3_with_vision, tiny_llama
from tests.test_kvpress_parity import ANSWER_PREFIX, QUESTION, haystack

# SmolLM2 prefills of up to 1k tokens in process: two intra-op threads time-slice against the other xdist worker
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def needle_rows(sentence_counts):
    return [
        {"_id": f"row-{n}", "context": haystack(n, needle_at=n // 2), "input": QUESTION, "answer_prefix": ANSWER_PREFIX, "answers": ["lantern"]}
        for n in sentence_counts
    ]


def test_attention_on_position_0_is_each_layers_mean_weight_on_the_first_key():
    model = tiny_llama(vocab_size=256, seed=0, attn_implementation="eager")
    ids = random_prompt_ids(40, seed=3)
    per_layer = attention_on_first_position(model, ids)
    with torch.inference_mode():
        attentions = model(input_ids=torch.tensor([ids]), output_attentions=True).attentions
    assert len(per_layer) == model.config.num_hidden_layers
    # query 0 can only see key 0 (weight 1): it is left out, or every model would look like a sink
    expected = [float(a[0, :, 1:, 0].mean()) for a in attentions]
    assert per_layer == pytest.approx(expected)
    assert all(0 < x < 1 for x in per_layer)


@pytest.fixture(scope="module")
def smollm2_eager(smollm2_model_dir):
    return load_model(smollm2_model_dir, "float32", "eager", torch.device("cpu")), load_tokenizer(smollm2_model_dir)


def test_smollm2_parks_attention_on_its_first_token(smollm2_eager):
    model, tokenizer = smollm2_eager
    report = attention_sink_report(model, tokenizer, needle_rows([6]), "niah_single_1", 100_000)
    assert report["mean_attention_on_position_0_middle_layers"] > 10 * report["if_attention_were_uniform"]


def test_left_padding_changes_compressed_answers_and_nothing_else(smollm2_eager):
    model, tokenizer = smollm2_eager
    rows = interleave_by_length([needle_rows([2, 3]), needle_rows([9, 10])])
    assert [r["_id"] for r in rows] == ["row-2", "row-9", "row-3", "row-10"]
    def run(method: str, retention: float) -> CellRun:
        return CellRun(task="niah_single_1", model_settings=ModelSettings("smollm2", max_context_tokens=100_000), method=method,
                       retention=retention, question_mode="question_aware", max_new_tokens=6, seed=0, batch_size=4)

    full = padding_effect(model, tokenizer, rows, run("full_cache", 1.0))
    assert max(full["pad_tokens_per_row"]) > 100 and full["changed_answers"] == 0  # padding alone moves nothing
    streaming = padding_effect(model, tokenizer, rows, run("streaming_llm", 0.5))
    assert streaming["changed_answers"] >= 1  # its kept "sink" positions are the pads of the short rows
    layers = model.config.num_hidden_layers
    # the full cache keeps every pad in every layer; the longest row has none
    assert full["pads_kept_per_row_and_layer"] == [[float(p)] * layers for p in full["pad_tokens_per_row"]]
    # StreamingLLM's 4 sinks are the first positions: in a padded row, pads, in every layer
    for row_pads, kept in zip(streaming["pad_tokens_per_row"], streaming["pads_kept_per_row_and_layer"]):
        assert len(kept) == layers and all(min(row_pads, 4) <= k <= row_pads for k in kept), (row_pads, kept)


def test_pads_kept_counts_a_gemma3_whose_layers_sit_under_its_language_model():
    # AutoModelForCausalLM loads Gemma 3 checkpoints with their vision tower: the probe once looked for the layers at
    # model.model.layers and crashed on them before counting anything
    model = tiny_gemma3_with_vision()
    rows = [random_prompt_ids(100, 290, seed=1), random_prompt_ids(70, 290, seed=2)]  # the second has 30 pads
    streaming = pads_kept(model, rows, build_press("streaming_llm", 0.5, {}, seed=0), pad_token_id=0)
    assert streaming == [[0.0, 0.0], [4.0, 4.0]]  # its 4 sinks are the padded row's first positions, in both layers
    full = pads_kept(model, rows, None, pad_token_id=0)
    assert full == [[0.0, 0.0], [30.0, 30.0]]

"""The other-question mode: the press saw a different question about the same context, whose slots are then
removed; this example's question runs where it would in question-agnostic mode.

The slots' positions are checked against an uncompressed prefill and against each press's own scores, the
decode batches against batch 1 and against a cache built by hand, and the cell against its rows.
"""

from __future__ import annotations

import pytest
import torch

from kvcache_bench.engine.decoders.other_question import (
    OtherQuestionGroup,
    compress_with_other_question,
    generate_other_question,
    prefilled_question,
)
from kvcache_bench.engine.greedy import Decoding, greedy_decode
from kvcache_bench.engine.prefill import prefill
from kvcache_bench.engine.slot_positions import KeptPositions
from kvcache_bench.engine.static_decode import decode_together
from kvcache_bench.methods.registry import build_press
from kvcache_bench.study.cell import CellRun
from kvcache_bench.study.question_modes import QuestionMode, other_questions
from tests.fixtures.tiny_models import random_prompt_ids, tiny_llama

STOP = {2}
NEW_TOKENS = 6
RETENTION = 0.3
KWARGS = {"snapkv": {"window_size": 4}, "pyramidkv": {"window_size": 4}}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab_size=256, seed=0)


def press_for(method, retention=RETENTION):
    return build_press(method, retention, KWARGS.get(method), seed=0)


def uncompressed_keys(model, token_ids):
    from transformers import DynamicCache

    cache = DynamicCache()
    prefill(model, cache, token_ids)
    return [layer.keys[0] for layer in cache.layers]  # per layer [kv_heads, length, head_dim]


def chosen_by_score(press, keys: torch.Tensor) -> list[set[int]]:
    """The positions a scorer press keeps for each head, from its own score of the uncompressed keys."""
    from kvpress.utils import compute_n_kept

    scores = press.score(None, None, keys[None], None, None, {})[0]
    n_kept = compute_n_kept(keys.shape[-2], press.compression_ratio)
    return [set(scores[head].topk(n_kept).indices.tolist()) for head in range(keys.shape[0])]


@pytest.mark.parametrize("method", ["knorm", "streaming_llm", "snapkv"])
def test_the_cache_holds_the_context_slots_the_press_chose_and_none_of_the_other_question(model, method):
    context, other = random_prompt_ids(150, seed=1), random_prompt_ids(12, seed=2)
    press = press_for(method)
    compressed = compress_with_other_question(model, context, other, press)
    assert compressed.kept_tokens > compressed.kept_context_slots, "the press kept some of the other question: removal is tested"
    for layer, full in enumerate(uncompressed_keys(model, context + other)):
        width = compressed.keys[layer].shape[-2]
        for head, (length, positions) in enumerate(zip(compressed.head_lengths[layer], compressed.context_positions[layer])):
            assert len(positions) == length and all(position < len(context) for position in positions)
            # each real slot holds exactly the key of the context position it names: no question token is left
            assert torch.equal(compressed.keys[layer][0, head, width - length :], full[head, positions])
        if method != "snapkv":  # a query-free scorer: its choice follows from the uncompressed keys alone
            expected = chosen_by_score(press, full)
            assert [set(p) for p in compressed.context_positions[layer]] == [{p for p in e if p < len(context)} for e in expected]
    if method == "knorm":
        assert any(len(set(lengths)) > 1 for lengths in compressed.head_lengths), "heads keep different counts (the ragged case)"


def agnostic_positions(model, context, press) -> list[list[set[int]]]:
    from transformers import DynamicCache

    cache = DynamicCache()
    with KeptPositions(model) as tracker:
        prefill(model, cache, context, press)
    return [[set(head.tolist()) for head in layer] for layer in tracker.positions(cache)]


@pytest.mark.parametrize("method", ["knorm", "streaming_llm"])
def test_a_press_that_reads_no_query_keeps_the_agnostic_context_up_to_the_slots_the_question_took(model, method):
    context, other = random_prompt_ids(150, seed=3), random_prompt_ids(12, seed=4)
    compressed = compress_with_other_question(model, context, other, press_for(method))
    agnostic = agnostic_positions(model, context, press_for(method))
    for layer, heads in enumerate(compressed.context_positions):
        for head, positions in enumerate(heads):
            with_question, alone = set(positions), agnostic[layer][head]
            # one set holds the other: the extra question only moved where the budget runs out
            assert with_question <= alone or alone <= with_question
            assert len(with_question ^ alone) == abs(len(with_question) - len(alone)) <= len(other)


def test_a_press_that_reads_the_question_keeps_other_context_positions(model):
    """The contrast that makes the mode worth measuring: SnapKV's choice over the context moves with the question."""
    context, other = random_prompt_ids(150, seed=3), random_prompt_ids(12, seed=4)
    compressed = compress_with_other_question(model, context, other, press_for("snapkv"))
    agnostic = agnostic_positions(model, context, press_for("snapkv"))
    nested = [
        set(p) <= agnostic[layer][head] or agnostic[layer][head] <= set(p)
        for layer, heads in enumerate(compressed.context_positions) for head, p in enumerate(heads)
    ]
    assert not all(nested)


def groups_of_shapes():
    shapes = [(140, [7, 11]), (90, [5]), (200, [9, 4])]
    return [
        OtherQuestionGroup(random_prompt_ids(n, seed=10 + n), random_prompt_ids(8, seed=n), [random_prompt_ids(q, seed=q + n) for q in qs])
        for n, qs in shapes
    ]


@pytest.mark.parametrize("method", ["knorm", "snapkv", "pyramidkv", "streaming_llm"])
def test_decode_batches_give_the_ids_of_decode_batch_one(model, method):
    groups = groups_of_shapes()
    alone, path_one = generate_other_question(Decoding(model, press_for(method), QuestionMode.OTHER_QUESTION, NEW_TOKENS, STOP, decode_batch_size=1), groups)
    together, path_many = generate_other_question(Decoding(model, press_for(method), QuestionMode.OTHER_QUESTION, NEW_TOKENS, STOP, decode_batch_size=4), groups)
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]
    assert path_one.effective_decode_batch_size == 1 and path_many.effective_decode_batch_size == 4
    assert [g.shared_context_questions for g in alone] == [2, 2, 1, 2, 2]
    assert [g.prompt_tokens for g in alone] == [len(g.context_ids) + len(q) for g in groups for q in g.questions]


def test_the_question_runs_where_it_would_in_question_agnostic_mode(model):
    """StreamingLLM keeps the same slots in every head, so the cache is an ordinary one: built by hand, with the
    question run at the context's end and decoded by the batch-1 engine, it must give the same ids."""
    from transformers import DynamicCache

    group = groups_of_shapes()[0]
    compressed = compress_with_other_question(model, group.context_ids, group.other_question_ids, press_for("streaming_llm"))
    assert all(len(set(lengths)) == 1 for lengths in compressed.head_lengths)
    question = group.questions[0]
    cache = DynamicCache()
    for layer, (keys, values) in enumerate(zip(compressed.keys, compressed.values)):
        cache.update(keys.clone(), values.clone(), layer)
    logits = prefill(model, cache, question, None, start_position=len(group.context_ids))
    expected = greedy_decode(Decoding(model, None, QuestionMode.OTHER_QUESTION, NEW_TOKENS, STOP), cache, logits, len(group.context_ids) + len(question))
    assert decode_together(model, [prefilled_question(compressed, question, 0.0)], NEW_TOKENS, STOP) == [expected]


def test_other_questions_are_drawn_from_the_same_context_by_seed_and_row_alone():
    rows = [{"_id": f"{doc}-{q}", "context": f"document {doc}"} for doc, n in ((0, 3), (1, 1), (2, 2)) for q in range(n)]
    chosen = other_questions(rows, seed=5)
    assert chosen["1-0"] is None  # the only question on its context
    assert chosen["2-0"] == "2-1" and chosen["2-1"] == "2-0"
    assert all(chosen[f"0-{q}"] in {"0-0", "0-1", "0-2"} - {f"0-{q}"} for q in range(3))
    assert other_questions(list(reversed(rows)), seed=5) == chosen  # the order of the rows changes nothing
    assert any(other_questions(rows, seed=s)["0-0"] != chosen["0-0"] for s in range(6, 12))  # the seed does


@pytest.fixture(scope="module")
def canary():
    """The trained canary: unlike a random model, its answers move when its attention does."""
    from kvcache_bench.canary.report_card import CANARY_DIR, has_weights
    from kvcache_bench.engine.loading import load_model, load_tokenizer

    if not has_weights(CANARY_DIR):
        pytest.skip("no canary weights committed")
    return load_model(str(CANARY_DIR), "float32", "sdpa", torch.device("cpu")), load_tokenizer(str(CANARY_DIR))


def canary_groups(tokenizer, n_documents=3) -> list[OtherQuestionGroup]:
    """Each document's second question pressed as the other question, its first asked."""
    from kvcache_bench.data.synthetic import make_synthetic_rows
    from kvcache_bench.study.prompt_tokens import build_prompt_tokens

    rows = make_synthetic_rows(n_documents, seed=11, min_words=150, max_words=300, questions_per_document=2)
    prompts = [build_prompt_tokens(tokenizer, "synthetic_qa", r["context"], r["input"], 4096) for r in rows]
    return [OtherQuestionGroup(first.context_ids, second.question_ids[:-1], [first.question_ids]) for first, second in zip(prompts[::2], prompts[1::2])]


def test_heads_of_different_lengths_decode_as_kvpress_masks_them(canary):
    """Knorm keeps a different number of context slots per head once the question's are removed. The reference
    is kvpress's own per-head masking (``masked_key_indices``: a fake key no query attends) over the padded
    slots of an ordinary cache, decoded by the batch-1 engine."""
    from transformers import DynamicCache

    model, tokenizer = canary
    for group in canary_groups(tokenizer):
        compressed = compress_with_other_question(model, group.context_ids, group.other_question_ids, press_for("knorm", 0.25))
        assert any(len(set(lengths)) > 1 for lengths in compressed.head_lengths)
        question = group.questions[0]
        cache = DynamicCache()
        attention = [layer.self_attn for layer in model.model.layers]
        try:
            for layer, (keys, values, lengths) in enumerate(zip(compressed.keys, compressed.values, compressed.head_lengths)):
                cache.update(keys.clone(), values.clone(), layer)
                padded = [(head, slot) for head, length in enumerate(lengths) for slot in range(keys.shape[-2] - length)]
                heads = torch.tensor([h for h, _ in padded], dtype=torch.long)
                attention[layer].masked_key_indices = (torch.zeros_like(heads), heads, torch.tensor([s for _, s in padded], dtype=torch.long))
            logits = prefill(model, cache, question, None, start_position=len(group.context_ids))
            expected = greedy_decode(Decoding(model, None, QuestionMode.OTHER_QUESTION, NEW_TOKENS, STOP), cache, logits, len(group.context_ids) + len(question))
        finally:
            for module in attention:
                module.masked_key_indices = None
        assert decode_together(model, [prefilled_question(compressed, question, 0.0)], NEW_TOKENS, STOP) == [expected]


def facts_at_both_ends(n_documents: int) -> list[dict]:
    """Documents with two facts, one in the first 15% of the text and one in the last 15%, both asked."""
    from kvcache_bench.data.synthetic import make_synthetic_rows

    rows = make_synthetic_rows(300, seed=21, min_words=500, max_words=800, facts_per_document=2, questions_per_document=2)
    chosen = []
    for first, second in zip(rows[::2], rows[1::2]):
        where = sorted(r["context"].index(f" is {r['answers'][0]} .") / len(r["context"]) for r in (first, second))
        if where[0] < 0.15 and where[1] > 0.85:
            chosen += [first, second]
    return chosen[: 2 * n_documents]


def test_snapkv_answers_the_question_it_saw_and_loses_it_when_it_saw_the_other(canary):
    """SnapKV keeps what its observation window (the question) attends to; shown the question about the other
    end of the document, at 10% it keeps that end. Measured on 15 such documents (30 questions): F1 0.99
    question-aware, 0.84 question-agnostic, 0.74 other-question; these are the first two."""
    from kvcache_bench.analysis.metrics import score_example
    from kvcache_bench.canary.report_card import CANARY_DIR, METHOD_KWARGS
    from kvcache_bench.data.longbench import normalise_rows
    from kvcache_bench.engine.cell_runner import run_cell
    from kvcache_bench.engine.loading import ModelSettings

    rows = normalise_rows(facts_at_both_ends(2), "synthetic_qa", None)
    settings = ModelSettings(path=str(CANARY_DIR), dtype="float32", device="cpu", max_context_tokens=4096)

    def f1(mode):
        run = CellRun(task="synthetic_qa", model_settings=settings, method="snapkv", retention=0.1, question_mode=mode,
                      max_new_tokens=8, seed=0, method_kwargs=METHOD_KWARGS["snapkv"])
        records = run_cell(rows, run, progress=False)
        return [score_example("synthetic_qa", r["prediction"], r["references"]) for r in records]

    aware, other = f1("question_aware"), f1("other_question")
    assert all(score == 1.0 for score in aware)
    assert min(other) == 0.0 and sum(other) < sum(aware)

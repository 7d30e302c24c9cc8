"""run_cell (the generate rule's work) on the demo model: records carry the mode, retention and truncation."""


import pytest

from kvcache_bench.data.longbench import normalise_rows
from kvcache_bench.data.synthetic import make_synthetic_rows
from kvcache_bench.engine.cell_runner import run_cell
from kvcache_bench.engine.loading import ModelSettings
from kvcache_bench.study.cell import CellRun


@pytest.fixture(scope="module")
def rows():
    generated = make_synthetic_rows(3, seed=7, min_words=60, max_words=90, questions_per_document=2)
    return normalise_rows(generated, "synthetic_qa", None)


def cell(rows, model_path, mode, method="snapkv", retention=0.5, max_context_tokens=2048, batch_size=1, decode_batch_size=1,
         **engine):
    return list(
        run_cell(
            rows,
            CellRun(
                task="synthetic_qa",
                model_settings=ModelSettings(path=model_path, dtype="float32", device="cpu", max_context_tokens=max_context_tokens),
                method=method,
                retention=retention,
                batch_size=batch_size,
                question_mode=mode,
                max_new_tokens=4,
                seed=0,
                method_kwargs={"window_size": 4} if method == "snapkv" else None,
                decode_batch_size=decode_batch_size,
                **engine,
            ),
            progress=False,
        )
    )


def test_question_agnostic_cell_compresses_each_document_once_and_keeps_row_order(rows, demo_model):
    records = cell(rows, demo_model, "question_agnostic")
    assert [r["id"] for r in records] == [r["_id"] for r in rows]
    assert all(r["question_mode"] == "question_agnostic" and r["shared_context_questions"] == 2 for r in records)
    for record in records:
        assert record["pressed_tokens"] < record["prompt_tokens"]  # the question was not pressed
        assert record["effective_retention"] == pytest.approx(0.5, abs=0.01)
        assert record["kept_tokens"] == pytest.approx(record["pressed_tokens"] // 2, abs=1)
    aware = cell(rows, demo_model, "question_aware")
    # Question-aware, the press sees the whole prompt but the last token, which reads the compressed cache.
    assert all(r["pressed_tokens"] == r["prompt_tokens"] - 1 and r["shared_context_questions"] == 1 for r in aware)


def test_truncation_is_recorded(rows, demo_model):
    records = cell(rows[:2], demo_model, "question_aware", method="full_cache", retention=1.0, max_context_tokens=48)
    # pred.py's cut: 2 x 24 raw-prompt tokens, decoded and re-encoded (the word tokenizer may glue the edge words)
    assert all(r["truncated"] and 46 <= r["prompt_tokens"] <= 48 < r["original_prompt_tokens"] for r in records)
    assert all(r["truncation"] == "longbench_pred_py" for r in records)
    assert all(r["max_context_tokens"] == 48 and r["effective_retention"] == 1.0 for r in records)


@pytest.mark.parametrize("mode", ["question_aware", "question_agnostic", "other_question"])
@pytest.mark.parametrize("method,retention", [("snapkv", 0.5), ("pyramidkv", 0.25), ("full_cache", 1.0)])
def test_decode_batching_in_a_cell_changes_no_answer_and_says_so(rows, demo_model, mode, method, retention):
    alone = cell(rows, demo_model, mode, method=method, retention=retention)
    together = cell(rows, demo_model, mode, method=method, retention=retention, decode_batch_size=4)
    assert [r["prediction"] for r in together] == [r["prediction"] for r in alone]
    assert [r["id"] for r in together] == [r["_id"] for r in rows]
    assert [r["kept_tokens"] for r in together] == [r["kept_tokens"] for r in alone]
    assert [r["effective_retention"] for r in together] == pytest.approx([r["effective_retention"] for r in alone])
    assert all(r["decode_batch_size"] == 4 and r["decode_fallback"] is None for r in together)
    assert max(r["effective_decode_batch_size"] for r in together) == 4
    assert all(r["decode_batch_size"] == 1 and r["effective_decode_batch_size"] == 1 for r in alone)
    # what ran and what the seconds cover: on a CPU, eager steps and no warm-up pass
    assert {r["decode_steps"] for r in together} == {"eager"} and {r["warmup_seconds"] for r in together} == {0.0}
    assert all("warm-up" in r["seconds_cover"] and "decode batch" in r["seconds_cover"] for r in together)
    # only question-aware prefills one example at a time for a decode batch, and so skips the waits between them
    assert {r["prefill_waits"] for r in together} == {"per_decode_batch" if mode == "question_aware" else "per_example"}
    assert {r["prefill_waits"] for r in alone} == {"per_example"}
    if mode == "question_agnostic":
        assert all(r["shared_context_questions"] == 2 for r in together)


@pytest.mark.parametrize("method", ["adakv_snapkv", "kvzip"])
def test_a_masking_press_decodes_together_in_both_question_modes_with_the_same_answers(rows, demo_model, method):
    """kvpress keeps one sequence's masks on the model. Question-aware, each example's masks travel with its snapshot;
    question-agnostic, a context's masks stay on the model through each of its questions' prefills and each question's
    snapshot carries a copy. Decode batch 4 decodes together either way, with decode batch 1's answers."""
    for mode in ("question_aware", "question_agnostic"):
        alone = cell(rows, demo_model, mode, method=method)
        asked = cell(rows, demo_model, mode, method=method, decode_batch_size=4)
        assert [r["prediction"] for r in asked] == [r["prediction"] for r in alone], mode
        assert [r["kept_tokens"] for r in asked] == [r["kept_tokens"] for r in alone], mode
        assert {r["decode_fallback"] for r in alone} == {r["decode_fallback"] for r in asked} == {None}
        # 6 rows, 2 questions per context: batches of 4 and 2 (whole contexts packed, question-agnostic)
        assert [r["effective_decode_batch_size"] for r in asked] == [4, 4, 4, 4, 2, 2], mode
        assert {r["decode_steps"] for r in asked} == {"eager"}


def test_a_masking_press_never_appears_to_save_memory(rows, demo_model):
    """AdaKV hides slots behind fake keys and keeps them: its records hold every byte; SnapKV's hold fewer."""
    masking = cell(rows[:2], demo_model, "question_aware", method="adakv_snapkv")
    evicting = cell(rows[:2], demo_model, "question_aware")
    for record in masking:
        assert record["kv_bytes_held"] == record["kv_bytes_uncompressed"] > 0
        assert record["construction"]["class"].endswith("AdaKVPress")
    for record in evicting:
        assert record["kv_bytes_held"] < record["kv_bytes_uncompressed"]
        assert record["kv_bytes_held"] / record["kv_bytes_uncompressed"] == pytest.approx(record["effective_retention"])


def test_other_question_cell_uses_contexts_with_two_questions_and_names_the_other(rows, demo_model):
    lone = normalise_rows(make_synthetic_rows(1, seed=8, min_words=60, max_words=90, questions_per_document=1), "synthetic_qa", None)
    records = cell(rows + lone, demo_model, "other_question")
    assert [r["id"] for r in records] == [r["_id"] for r in rows]  # the lone question has no other: no record
    context_of = {r["_id"]: r["context"] for r in rows}
    for record in records:
        assert record["question_mode"] == "other_question"
        assert record["other_question_id"] != record["id"] and context_of[record["other_question_id"]] == context_of[record["id"]]
        # the press saw the context and the other question but its last token (synthetic questions are all as long)
        assert record["pressed_tokens"] == record["prompt_tokens"] - 1
        assert record["kept_context_slots"] <= record["kept_tokens"] == pytest.approx(record["pressed_tokens"] // 2, abs=1)
    agnostic = cell(rows, demo_model, "question_agnostic")
    assert all(r["kept_context_slots"] == r["kept_tokens"] and r["other_question_id"] is None for r in agnostic)


def test_same_question_is_other_question_with_this_question_in_view(rows, demo_model):
    """The control of the other-question mode: every row can be in it, and a press that reads no query (StreamingLLM
    keeps the first and last slots) cannot tell the two apart when the questions are as long (synthetic ones are)."""
    same = cell(rows, demo_model, "same_question", method="streaming_llm")
    other = cell(rows, demo_model, "other_question", method="streaming_llm")
    assert [r["other_question_id"] for r in same] == [r["id"] for r in same] == [r["_id"] for r in rows]
    assert [r["prediction"] for r in same] == [r["prediction"] for r in other]
    assert [r["kept_context_slots"] for r in same] == [r["kept_context_slots"] for r in other]
    snapkv_same = cell(rows, demo_model, "same_question")
    assert all(r["pressed_tokens"] == r["prompt_tokens"] - 1 and r["kept_context_slots"] < r["kept_tokens"] for r in snapkv_same)


DECODING_BUDGET = {"compression_interval": 2, "target_size": 32, "hidden_states_buffer_size": 4}


def decoding_cell(rows, model_path, mode, decode_batch_size=1, method_kwargs=DECODING_BUDGET):
    return list(
        run_cell(
            rows,
            CellRun(
                task="synthetic_qa", model_settings=ModelSettings(path=model_path, dtype="float32", device="cpu", max_context_tokens=2048),
                method="decoding_knorm", retention=1.0, batch_size=1, question_mode=mode, max_new_tokens=4, seed=0,
                method_kwargs=method_kwargs, decode_batch_size=decode_batch_size,
            ),
            progress=False,
        )
    )


@pytest.mark.parametrize("mode", ["question_aware", "question_agnostic"])
def test_a_decoding_press_compresses_while_decoding_and_its_records_say_what_the_cache_held(rows, demo_model, mode):
    from kvcache_bench.engine.cell_runner import WHILE_DECODING_FALLBACK

    alone = decoding_cell(rows[:2], demo_model, mode)
    asked_together = decoding_cell(rows[:2], demo_model, mode, decode_batch_size=2)
    assert [r["prediction"] for r in asked_together] == [r["prediction"] for r in alone]
    for record in alone + asked_together:
        assert record["compressed_while_decoding"] and record["decode_steps"] == "eager"
        # every token through the cache: the whole prompt and the answer but its last token
        assert record["pressed_tokens"] == record["prompt_tokens"] + record["generated_tokens"] - 1
        assert record["kept_tokens"] == 32 < record["pressed_tokens"]  # compressed to target_size while decoding
        assert record["effective_retention"] == pytest.approx(32 / record["pressed_tokens"])
        assert record["kept_context_slots"] is None  # the cache after decoding holds question and answer too: not traced
    assert all(r["decode_fallback"] is None for r in alone)
    assert all(r["decode_fallback"] == WHILE_DECODING_FALLBACK and r["effective_decode_batch_size"] == 1 for r in asked_together)


def test_a_decoding_budget_the_prompts_never_outgrow_is_refused_naming_its_kwarg(rows, demo_model):
    with pytest.raises(ValueError, match="method_kwargs.decoding_knorm.target_size is 100000"):
        decoding_cell(rows[:1], demo_model, "question_aware", method_kwargs={**DECODING_BUDGET, "target_size": 100_000})


def test_kvpress_pipeline_engine_records_a_decoding_press_as_compressed_while_decoding(rows, demo_model):
    """The head-to-head engine: its cells of a decoding press are not flagged against retention 1.0 either."""
    from kvcache_bench.engine.kvpress_pipeline import run_cell_on_kvpress_pipeline

    settings = ModelSettings(path=demo_model, dtype="float32", device="cpu", max_context_tokens=2048)
    # question-agnostic: the demo tokenizer has no chat template, so question-aware leaves the pipeline no question to run
    common = dict(task="synthetic_qa", model_settings=settings, retention=1.0, batch_size=1, question_mode="question_agnostic", max_new_tokens=4, seed=0)
    records = list(run_cell_on_kvpress_pipeline(rows[:1], CellRun(method="decoding_knorm", method_kwargs=DECODING_BUDGET, **common)))
    assert records[0]["compressed_while_decoding"] and records[0]["kept_tokens"] == 32 < records[0]["pressed_tokens"]
    assert not next(run_cell_on_kvpress_pipeline(rows[:1], CellRun(method="snapkv", **{**common, "retention": 0.5})))["compressed_while_decoding"]

"""The multi_turn mode: turn 1 compressed as question_aware, each later turn's answer and question appended uncompressed.

Every turn is checked against a plain transformers greedy run over the whole conversation (the full cache), against a
hand-written loop over kvpress's own press (prefill context + first question under it, feed the appended tokens
without it, decode greedily), and its decode batches against one turn at a time.
"""

from __future__ import annotations

import pytest
import torch

from kvcache_bench.engine.decoders.multi_turn import ConversationTurn, generate_multi_turn
from kvcache_bench.engine.greedy import Decoding
from kvcache_bench.methods.registry import build_press
from kvcache_bench.study.prompt_tokens import PromptTokens
from kvcache_bench.study.question_modes import QuestionMode, conversations
from tests.fixtures.tiny_models import random_prompt_ids, tiny_llama

STOP = {2}
NEW_TOKENS = 6
RETENTION = 0.3
HELD_BACK = 2  # a chat template's generation suffix: the first prompt's tail no press sees
KWARGS = {"snapkv": {"window_size": 4}}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def model():
    """Random weights scaled up so that attention is sharp: a token at a wrong position, or a slot the press did not
    keep, then changes the greedy ids (at the default scale attention is near uniform and hides both)."""
    model = tiny_llama(vocab_size=256, seed=0)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.mul_(3.0)
    return model


def press_for(method):
    return build_press(method, RETENTION, KWARGS.get(method), seed=0) if method != "full_cache" else None


def conversation_turns(context_length: int, turns: int, seed: int) -> list[ConversationTurn]:
    """A context's turns: its first prompt, and per later turn its appended ids (answer + next question) so far."""
    first = PromptTokens(
        random_prompt_ids(context_length, seed=seed),
        random_prompt_ids(10, seed=seed + 1),
        held_back_tokens=HELD_BACK,
    )
    appended: list[int] = []
    found = [ConversationTurn(first, [])]
    for turn in range(2, turns + 1):
        appended = appended + random_prompt_ids(5 + turn, seed=seed + 10 * turn)
        found.append(ConversationTurn(first, appended))
    return found


def many_conversations() -> list[ConversationTurn]:
    return [t for n, (length, turns) in enumerate([(150, 3), (90, 2), (200, 4), (120, 3)]) for t in conversation_turns(length, turns, 100 * n)]


def settings(model, method, decode_batch_size=1):
    return Decoding(model, press_for(method), QuestionMode.MULTI_TURN, NEW_TOKENS, STOP, decode_batch_size=decode_batch_size)


def up_to_stop(tokens: list[int]) -> list[int]:
    out = []
    for token in tokens:
        out.append(token)
        if token in STOP:
            break
    return out


@torch.inference_mode()
def plain_greedy(model, ids: list[int]) -> list[int]:
    """transformers' own greedy generation over the whole conversation, no press, no engine code."""
    generated = model.generate(
        torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=sorted(STOP), pad_token_id=0
    )
    return up_to_stop(generated[0, len(ids) :].tolist())


@torch.inference_mode()
def kvpress_reference_loop(model, press, turn: ConversationTurn) -> list[int]:
    """kvpress's press over context + first question (but the held-back tail) in a plain DynamicCache; the tail and
    every appended id fed after it without the press, at their true positions; then greedy decoding."""
    from transformers import DynamicCache

    ids = turn.first_turn.context_ids + turn.first_turn.question_ids
    pressed, rest = ids[:-HELD_BACK], ids[-HELD_BACK:] + turn.appended_ids
    from kvcache_bench.engine.caches import clear_key_masks, has_key_masks

    cache = DynamicCache()
    with press(model):
        model(input_ids=torch.tensor([pressed]), past_key_values=cache, use_cache=True)
    # a masking press (AdaKV, KVzip) keeps every slot and leaves its masks on the model: kvpress's attention patch then
    # gives every later query fake keys there, the appended turns' and the answer's alike
    assert cache.get_seq_length() < len(pressed) or has_key_masks(model), "the press compressed the first turn"
    try:
        return _greedy_after(model, cache, rest, len(pressed))
    finally:
        clear_key_masks(model)


def _greedy_after(model, cache, rest: list[int], position: int) -> list[int]:
    """The appended tokens one at a time (causal attention, as one block computes it: kvpress's fake key for a masked
    slot is found per block of queries, and one query always has one), then greedy decoding."""
    for token in rest:
        logits = model(
            input_ids=torch.tensor([[token]]), past_key_values=cache, position_ids=torch.tensor([[position]]), use_cache=True
        ).logits[:, -1]
        position += 1
    tokens = []
    for _ in range(NEW_TOKENS):
        token = int(logits.argmax(-1))
        tokens.append(token)
        if token in STOP:
            break
        logits = model(
            input_ids=torch.tensor([[token]]), past_key_values=cache, position_ids=torch.tensor([[position]]), use_cache=True
        ).logits[:, -1]
        position += 1
    return tokens


def test_the_full_cache_answers_every_turn_as_a_plain_run_over_the_whole_conversation(model):
    turns = conversation_turns(150, 4, seed=7)
    generations, _ = generate_multi_turn(settings(model, "full_cache"), turns)
    for turn, generation in zip(turns, generations):
        ids = turn.first_turn.context_ids + turn.first_turn.question_ids + turn.appended_ids
        assert generation.prompt_tokens == len(ids)
        assert generation.token_ids == plain_greedy(model, ids)
    assert len({tuple(g.token_ids) for g in generations}) > 1, "the turns ask different things"


@pytest.mark.parametrize("method", ["snapkv", "knorm", "streaming_llm", "adakv_snapkv"])
def test_every_turn_equals_a_hand_written_loop_over_kvpress_press(model, method):
    """SnapKV reads the first question (its window); Knorm and StreamingLLM read no query; AdaKV masks slots per head,
    its masks carried with the first turn's snapshot to every turn."""
    turns = conversation_turns(150, 4, seed=3)
    generations, _ = generate_multi_turn(settings(model, method), turns)
    expected = [kvpress_reference_loop(model, press_for(method), turn) for turn in turns]
    assert [g.token_ids for g in generations] == expected
    full, _ = generate_multi_turn(settings(model, "full_cache"), turns)
    assert [g.token_ids for g in full] != expected, "the compression changes some answer: the loop is tested"
    pressed = 150 + 10 - HELD_BACK
    assert all(g.pressed_tokens == pressed and g.kept_tokens <= pressed for g in generations)
    # the press kept the same context slots for every turn: the appended turns were never compressed
    assert len({g.kept_context_slots for g in generations}) == 1 and generations[0].kept_context_slots < 150


@pytest.mark.parametrize("method", ["snapkv", "knorm", "adakv_snapkv"])
def test_decode_batch_32_gives_the_ids_of_one_turn_at_a_time(model, method):
    turns = many_conversations()
    alone, path_one = generate_multi_turn(settings(model, method, decode_batch_size=1), turns)
    together, path_many = generate_multi_turn(settings(model, method, decode_batch_size=32), turns)
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]
    assert path_one.effective_decode_batch_size == 1 and path_many.effective_decode_batch_size == len(turns) == 12
    assert [g.shared_context_questions for g in alone] == [3] * 3 + [2] * 2 + [4] * 4 + [3] * 3


def rows_of(shapes) -> list[dict]:
    return [{"_id": f"{doc}-{q}", "context": f"document {doc}"} for doc, n in shapes for q in range(n)]


def test_the_turn_order_comes_from_the_seed_and_the_context_not_the_row_order():
    rows = rows_of([(0, 4), (1, 1), (2, 3)])
    found = conversations(rows, seed=5)
    assert [c.turns for c in found] == [4, 3]  # the one-question context has no conversation
    order = {c.conversation_id: [r["_id"] for r in c.rows] for c in found}
    shuffled = list(reversed(rows))
    shuffled.insert(0, shuffled.pop(3))
    assert {c.conversation_id: [r["_id"] for r in c.rows] for c in conversations(shuffled, seed=5)} == order
    # another file holding only one of the contexts orders it the same way
    assert [r["_id"] for r in conversations(rows[:4], seed=5)[0].rows] == order[found[0].conversation_id]
    seeds = {tuple(r["_id"] for r in conversations(rows, seed=s)[0].rows) for s in range(5, 15)}
    assert len(seeds) > 1, "the seed draws the order"


def synthetic_conversation() -> list[dict]:
    context = "the red key is in the blue box . the green key is in the old shed . the cat sleeps on the mat ."
    asked = [("where is the red key ?", "the blue box"), ("where is the green key ?", "the old shed"), ("who sleeps on the mat ?", "the cat")]
    return [{"_id": str(i), "context": context, "input": q, "answers": [a]} for i, (q, a) in enumerate(asked)]


def test_a_chat_models_later_turns_are_its_template_over_the_whole_conversation(smollm2_tokenizer):
    from kvcache_bench.study.prompt_tokens import appended_turn_ids, build_prompt_tokens
    from kvcache_bench.study.prompts import split_prompt

    tokenizer, rows = smollm2_tokenizer, synthetic_conversation()
    answers = [row["answers"][0] for row in rows]
    first = build_prompt_tokens(tokenizer, "synthetic_qa", rows[0]["context"], rows[0]["input"], 4096)
    appended = appended_turn_ids(tokenizer, "synthetic_qa", rows, answers)
    assert first.chat_template and appended[0] == [] and len(appended) == 3
    context_text, first_question = split_prompt("synthetic_qa", rows[0]["context"], rows[0]["input"])
    messages = [{"role": "user", "content": context_text + first_question}]
    ids = first.context_ids + first.question_ids
    for turn in (1, 2):
        messages += [{"role": "assistant", "content": answers[turn - 1]}, {"role": "user", "content": split_prompt("synthetic_qa", rows[turn]["context"], rows[turn]["input"])[1]}]
        ids = ids + appended[turn]
        # the ids up to turn t are the template's rendering of the conversation up to turn t's generation prompt
        assert tokenizer.decode(ids) == tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        # the answer is tokenised on its own: no token merges it with the template's text
        answer_ids = tokenizer(answers[turn - 1], add_special_tokens=False)["input_ids"]
        assert appended[turn][: len(answer_ids)] == answer_ids
        assert appended[turn][len(answer_ids)] == tokenizer.convert_tokens_to_ids("<|im_end|>")


def test_a_base_models_later_turns_are_the_answer_a_blank_line_and_the_next_question(smollm2_tokenizer):
    from kvcache_bench.study.prompt_tokens import appended_turn_ids, build_prompt_tokens
    from kvcache_bench.study.prompts import split_prompt

    tokenizer, rows = smollm2_tokenizer, synthetic_conversation()
    answers = [row["answers"][0] for row in rows]
    first = build_prompt_tokens(tokenizer, "synthetic_qa", rows[0]["context"], rows[0]["input"], 4096, chat_template=False)
    appended = appended_turn_ids(tokenizer, "synthetic_qa", rows, answers, chat_template=False)
    questions = [split_prompt("synthetic_qa", row["context"], row["input"])[1] for row in rows]
    # "answer :" ends each question: the answer follows it after a space, as a base model writes it
    expected = "".join(split_prompt("synthetic_qa", rows[0]["context"], rows[0]["input"])) + " the blue box\n\n" + questions[1] + " the old shed\n\n" + questions[2]
    ids = first.context_ids + first.question_ids + appended[1] + appended[2]
    assert tokenizer.decode(ids, skip_special_tokens=True) == expected
    assert all(token != tokenizer.bos_token_id for token in appended[1] + appended[2])


@pytest.fixture(scope="module")
def synthetic_rows():
    """Three documents with three questions each, and one with a single question (no conversation)."""
    from kvcache_bench.data.longbench import normalise_rows
    from kvcache_bench.data.synthetic import make_synthetic_rows

    several = make_synthetic_rows(3, seed=7, min_words=60, max_words=90, questions_per_document=3)
    single = make_synthetic_rows(1, seed=8, min_words=60, max_words=90, questions_per_document=1)
    return normalise_rows(several + single, "synthetic_qa", None)


def run_synthetic_cell(rows, model_path, mode, method="snapkv", decode_batch_size=1, history="reference"):
    from kvcache_bench.engine.cell_runner import run_cell
    from kvcache_bench.engine.loading import ModelSettings
    from kvcache_bench.study.cell import CellRun

    run = CellRun(
        task="synthetic_qa",
        model_settings=ModelSettings(path=model_path, dtype="float32", device="cpu", max_context_tokens=2048),
        method=method, retention=0.5, question_mode=mode, max_new_tokens=4, seed=0,
        method_kwargs={"window_size": 4} if method == "snapkv" else None, decode_batch_size=decode_batch_size,
        multi_turn_history=history,
    )
    return list(run_cell(rows, run, progress=False))


def test_a_multi_turn_cell_records_each_turn_of_each_conversation(synthetic_rows, demo_model):
    from kvcache_bench.study.question_modes import MULTI_TURN_RECORD_FIELDS

    records = run_synthetic_cell(synthetic_rows, demo_model, "multi_turn", decode_batch_size=6)
    assert all(set(MULTI_TURN_RECORD_FIELDS) <= set(r) for r in records)  # the names the tables read
    assert len(records) == 9 and synthetic_rows[-1]["_id"] not in {r["id"] for r in records}  # the lone question
    by_conversation: dict[str, list[dict]] = {}
    for record in records:
        by_conversation.setdefault(record["conversation_id"], []).append(record)
    assert len(by_conversation) == 3
    aware = {r["id"]: r for r in run_synthetic_cell(synthetic_rows, demo_model, "question_aware")}
    for turns in by_conversation.values():
        assert [r["turn"] for r in turns] == [1, 2, 3] and all(r["turns"] == 3 for r in turns)
        assert all(r["multi_turn_history"] == "reference" and r["appended_turns_compressed"] is False for r in turns)
        first = turns[0]
        # turn 1 is question_aware: the same cache, the same answer
        assert first["prediction"] == aware[first["id"]]["prediction"]
        assert first["kept_tokens"] == aware[first["id"]]["kept_tokens"] and first["cache_tokens_before_turn"] == first["kept_tokens"]
        # the context slots the press kept serve every turn; each later turn holds more than the one before
        assert len({r["context_tokens_kept"] for r in turns}) == 1 and turns[0]["context_tokens_kept"] < first["pressed_tokens"]
        assert all(a["cache_tokens_before_turn"] < b["cache_tokens_before_turn"] for a, b in zip(turns, turns[1:]))
        assert all(a["kv_bytes_held"] < b["kv_bytes_held"] < b["kv_bytes_uncompressed"] for a, b in zip(turns, turns[1:]))
        for previous, record in zip(turns, turns[1:]):
            # everything in the cache before this turn: the first turn's kept slots, then every token since, uncompressed
            assert record["cache_tokens_before_turn"] == record["kept_tokens"] + previous["prompt_tokens"] - record["pressed_tokens"]
    # the decode batch changes no answer
    alone = run_synthetic_cell(synthetic_rows, demo_model, "multi_turn", decode_batch_size=1)
    assert [r["prediction"] for r in alone] == [r["prediction"] for r in records]
    # a chunk holds whole conversations: two of three turns each
    assert records[0]["effective_decode_batch_size"] == 6 and alone[0]["effective_decode_batch_size"] == 1


def multi_turn_problems(method, *, batch_size=1, sliding=None):
    from kvcache_bench.methods.shipped_properties import shipped_properties
    from kvcache_bench.study.cell_checks import problems_of

    cell = dict(dataset="d", task="niah_multikey_1", model="m", method=method, question_mode="multi_turn",
                retention=0.5, batch_size=batch_size, decode_batch_size=32 if batch_size == 1 else 1)
    return problems_of(cell, None, shipped_properties(method), 32, sliding)


def test_only_batch_size_above_1_is_refused_and_masking_and_decoding_presses_run():
    assert multi_turn_problems("snapkv") == [] and multi_turn_problems("knorm") == []
    assert multi_turn_problems("kvzip") == multi_turn_problems("adakv_snapkv") == []  # masks go with every turn's row
    assert not any("multi_turn" in p for p in multi_turn_problems("decoding_knorm"))  # it runs, over appended turns too
    assert any("batch size 4" in p for p in multi_turn_problems("snapkv", batch_size=4))
    assert multi_turn_problems("snapkv", sliding="keep") == []  # Gemma 3's sliding layers run (tested below)


def test_a_dataset_whose_contexts_each_have_one_question_is_not_run_with_the_reason(tmp_path):
    import json

    from kvcache_bench.runtime.not_run import refusal_of
    from kvcache_bench.workflow import job_from_argv

    def refusal(rows, mode="multi_turn"):
        path = tmp_path / f"{mode}-{len(rows)}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        wildcards = dict(dataset="haystacks", task="niah_multikey_1", model="m", method="snapkv", question_mode=mode,
                         retention="0.5", batch_size="1", decode_batch_size="32")
        return refusal_of(job_from_argv(["--input", f"rows={path}", "--wildcards", json.dumps(wildcards)]))

    lone = rows_of([(0, 1), (1, 1)])
    assert refusal(lone) == [
        "multi_turn asks one context's questions as a conversation, and none of the 2 contexts of haystacks/niah_multikey_1 "
        "has two or more questions. Use a dataset whose contexts share questions (e.g. RULER's niah_multikey_1 haystacks "
        "with questions_per_haystack, or LongBench's qasper)."
    ]
    assert refusal(rows_of([(0, 1), (1, 2)])) == []  # one conversation is enough
    assert refusal(lone, mode="question_aware") == []  # the other modes use every row


def test_models_on_kvpress_pipeline_engine_are_refused_at_parse_whichever_history():
    from kvcache_bench.study.config_checks import multi_turn_problems as parse_problems

    for history in ("reference", "generated"):
        asked = {"question_modes": ["question_aware", "multi_turn"], "multi_turn": {"history": history}, "models": {"smollm2": {}}}
        assert parse_problems(asked) == []
        assert parse_problems({**asked, "question_modes": ["question_aware"]}) == []
        # kvpress's pipeline engine has no conversation to run: refused, not run as question_agnostic
        pipeline = {**asked, "models": {"smollm2": {}, "kvpress-smollm2": {"engine": "kvpress_pipeline"}}}
        assert parse_problems(pipeline) == [
            "the multi_turn mode runs on this benchmark's engine only, and models ['kvpress-smollm2'] use engine: "
            "kvpress_pipeline, which has no multi-turn conversation; remove multi_turn from question_modes or run "
            "those models in a study of their own"
        ]


def haystack_conversation() -> list[dict]:
    """RULER's multi-key layout (kvpress's split): a question part and an answer prefix that opens the answer."""
    context = "Some text about keys. One of the special magic numbers for alpha is: 1234. For beta it is: 5678. " * 3
    return [
        {"_id": key, "context": context, "input": f" What is the special magic number for {key} mentioned in the provided text?",
         "answer_prefix": f" The special magic number for {key} mentioned in the provided text is", "answers": [number]}
        for key, number in (("alpha", "1234"), ("beta", "5678"), ("gamma", "none"))
    ]


@pytest.mark.parametrize("name", ["smollm2", "llama3"])
def test_every_chat_template_spells_the_whole_conversation_with_the_answer_prefixes(name, request):
    """SmolLM2 (ChatML with a default system turn) and Llama 3.1 (trims each message, a dated system turn): the ids up
    to each turn are the template's rendering of the conversation, each answer after its turn's answer prefix."""
    from kvcache_bench.study.prompt_tokens import appended_turn_ids, build_prompt_tokens

    tokenizer, rows = request.getfixturevalue(f"{name}_tokenizer"), haystack_conversation()
    answers = [row["answers"][0] for row in rows]
    first = build_prompt_tokens(tokenizer, "niah_multikey_1", rows[0]["context"], rows[0]["input"], 4096, rows[0]["answer_prefix"])
    appended = appended_turn_ids(tokenizer, "niah_multikey_1", rows, answers)
    messages = [{"role": "user", "content": rows[0]["context"] + rows[0]["input"]}]
    ids = first.context_ids + first.question_ids
    for turn in (1, 2):
        messages += [{"role": "assistant", "content": rows[turn - 1]["answer_prefix"] + answers[turn - 1]}, {"role": "user", "content": rows[turn]["input"]}]
        ids = ids + appended[turn]
        rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        assert tokenizer.decode(ids, clean_up_tokenization_spaces=False) == rendered + rows[turn]["answer_prefix"]


def test_a_base_model_on_ruler_continues_each_answer_prefix_with_the_answer(llama3_tokenizer):
    """A base model (Gemma 3 270M runs RULER so, chat_template: false): RULER's raw prompt, its answer prefix, the
    answer after a space, a blank line, the next question and its answer prefix."""
    from kvcache_bench.study.prompt_tokens import appended_turn_ids, build_prompt_tokens

    rows = haystack_conversation()
    first = build_prompt_tokens(llama3_tokenizer, "niah_multikey_1", rows[0]["context"], rows[0]["input"], 4096, rows[0]["answer_prefix"], chat_template=False)
    appended = appended_turn_ids(llama3_tokenizer, "niah_multikey_1", rows, [row["answers"][0] for row in rows], chat_template=False)
    ids = first.context_ids + first.question_ids + appended[1] + appended[2]
    expected = "".join(
        [rows[0]["context"], rows[0]["input"], rows[0]["answer_prefix"], " 1234\n\n", rows[1]["input"], rows[1]["answer_prefix"],
         " 5678\n\n", rows[2]["input"], rows[2]["answer_prefix"]]
    )
    assert llama3_tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False) == expected
    assert llama3_tokenizer.bos_token_id not in appended[1] + appended[2]  # one BOS, turn 1's


def as_question_aware(turn: ConversationTurn) -> PromptTokens:
    """Turn t as a question_aware prompt whose held-back tail is the first prompt's tail and every appended id: the
    press sees the same tokens, and the rest runs uncompressed after them."""
    first = turn.first_turn
    return PromptTokens(first.context_ids, first.question_ids + turn.appended_ids, held_back_tokens=max(1, first.held_back_tokens) + len(turn.appended_ids))


@pytest.mark.parametrize("setting", ["keep", "compress"])
@pytest.mark.parametrize("method", ["full_cache", "snapkv", "knorm"])
def test_a_model_with_sliding_layers_answers_every_turn_as_the_full_cache_masked_to_what_it_kept(method, setting):
    """Gemma 3's pattern in miniature (16-position windows): every appended turn crosses windows, each masked by
    positions. The reference is the sliding-layer tests' own (tests/test_sliding_layers.py), the full cache masked to
    what the press kept, on turn t as a question_aware prompt; the full cache is transformers' own generation."""
    from functools import partial

    from kvcache_bench.engine.layer_types import layer_types_of
    from kvcache_bench.engine.layered_cache import new_cache
    from tests.test_sliding_layers import masked_full_cache_answer, model_with

    model = model_with(setting)
    turns = [t for n, turns in enumerate([3, 2]) for t in conversation_turns(90 + 30 * n, turns, 50 * n + 1)]
    press = press_for(method)
    decoding = Decoding(model, press, QuestionMode.MULTI_TURN, NEW_TOKENS, set(), partial(new_cache, layer_types_of(model)), decode_batch_size=32)
    generations, path = generate_multi_turn(decoding, turns)
    assert path.effective_decode_batch_size == len(turns)
    for turn, generation in zip(turns, generations):
        prompt = as_question_aware(turn)
        if press is None:
            ids = torch.tensor([prompt.context_ids + prompt.question_ids])
            expected = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0)[0, ids.shape[1] :].tolist()
        else:
            expected = masked_full_cache_answer(model, prompt, QuestionMode.QUESTION_AWARE, press_for(method))[:NEW_TOKENS]
        assert generation.token_ids == expected


def test_a_sliding_layer_holds_at_most_its_window_however_many_turns_are_appended():
    from kvcache_bench.engine.cell_runner import TurnPlace, multi_turn_record
    from kvcache_bench.engine.greedy import Generation
    from kvcache_bench.engine.layer_types import layer_types_of
    from tests.test_sliding_layers import model_with

    layer_types = layer_types_of(model_with("keep"))  # five 16-position windows, one global layer
    assert layer_types.kinds.count("sliding_attention") == 5 and layer_types.window == 16
    # turn 3: the press kept 40 of 98 pressed global slots; 30 tokens appended since (turn 2 ended at 120)
    generation = Generation([5], 128, 40.0, 0.0, 98, 3, kept_context_slots=35.0,
                            kept_by_layer_type={"full_attention": 40.0, "sliding_attention": 15.0})
    record = multi_turn_record(TurnPlace("c", 3, 3, 120, tuple(range(30))), generation, "reference", layer_types, 10.0, 10.0)
    assert record["kv_bytes_held_by_layer_type"] == {"full_attention": round(70 * 10 / 6), "sliding_attention": round(15 * 5 * 10 / 6)}
    assert record["kv_bytes_held"] == sum(record["kv_bytes_held_by_layer_type"].values())
    assert record["kv_bytes_uncompressed"] == round((128 + 5 * 15) * 10 / 6)  # the full cache's windows hold 15 too
    assert record["cache_tokens_before_turn"] == 40 + 120 - 98 and record["context_tokens_kept"] == 35.0


def conversations_in_order(count: int = 3):
    """Conversations whose turn t appends the model's own answer to turn t - 1 and a question of its own."""
    from kvcache_bench.engine.decoders.multi_turn import ConversationInOrder

    made = []
    for n in range(count):
        first = conversation_turns(100 + 40 * n, 1, seed=300 + n)[0].first_turn
        questions = {turn: random_prompt_ids(4 + turn, seed=400 + 10 * n + turn) for turn in range(2, 5)}
        made.append(ConversationInOrder(first, 2 + n, lambda turn, answers, q=questions: answers[-1] + q[turn]))
    return made


@pytest.mark.parametrize("method", ["full_cache", "snapkv", "knorm"])
def test_with_generated_history_each_turn_answers_from_the_models_own_earlier_answers(model, method):
    """The reference runs the conversation on its own answers: transformers' generate over the whole conversation
    (the full cache), or the hand-written loop over kvpress's press; the engine's turns, all conversations' turn t
    decoded together, must give the same ids at every turn, at decode batch 32 as at 1."""
    from kvcache_bench.engine.decoders.multi_turn import generate_turns_in_order

    conversations = conversations_in_order()
    together, asked, path = generate_turns_in_order(settings(model, method, decode_batch_size=32), conversations)
    alone, _, _ = generate_turns_in_order(settings(model, method, decode_batch_size=1), conversations)
    assert [[g.token_ids for g in c] for c in alone] == [[g.token_ids for g in c] for c in together]
    assert path.effective_decode_batch_size == 3  # turn 1 of the three conversations together
    for conversation, generations, turns in zip(conversations, together, asked):
        assert len(generations) == conversation.turns
        answers: list[list[int]] = []
        appended: list[int] = []
        for turn in range(1, conversation.turns + 1):
            if turn > 1:
                appended = appended + conversation.appended_for(turn, answers)
            expected_turn = ConversationTurn(conversation.first_turn, appended)
            if method == "full_cache":
                ids = conversation.first_turn.context_ids + conversation.first_turn.question_ids + appended
                answer = plain_greedy(model, ids)
            else:
                answer = kvpress_reference_loop(model, press_for(method), expected_turn)
            assert turns[turn - 1] == expected_turn and generations[turn - 1].token_ids == answer
            answers.append(answer)


def test_a_generated_history_cell_asks_each_turn_after_the_models_own_answers(synthetic_rows, demo_model):
    """The demo model's answers are not the references, so its later turns' conversations differ from the reference
    history's by exactly what it said instead; turn 1 is the same in both."""
    from transformers import AutoTokenizer

    from kvcache_bench.study.prompt_tokens import appended_turn_ids

    tokenizer = AutoTokenizer.from_pretrained(demo_model)
    generated = run_synthetic_cell(synthetic_rows, demo_model, "multi_turn", decode_batch_size=2, history="generated")
    reference = {r["id"]: r for r in run_synthetic_cell(synthetic_rows, demo_model, "multi_turn", decode_batch_size=2)}
    assert [r["id"] for r in generated] == list(reference) and all(r["multi_turn_history"] == "generated" for r in generated)
    assert generated[0]["effective_decode_batch_size"] == 2  # turn t of two conversations at a time
    rows = {row["_id"]: row for row in synthetic_rows}
    for start in range(0, len(generated), 3):
        turns = generated[start : start + 3]
        first = turns[0]
        assert first["prediction"] == reference[first["id"]]["prediction"] and first["prompt_tokens"] == reference[first["id"]]["prompt_tokens"]
        asked = [rows[r["id"]] for r in turns]
        own = appended_turn_ids(tokenizer, "synthetic_qa", asked, [r["prediction"] for r in turns])
        golden = appended_turn_ids(tokenizer, "synthetic_qa", asked, [row["answers"][0] for row in asked])
        for turn in (2, 3):
            record = turns[turn - 1]
            grown = sum(len(ids) for ids in own[:turn]) - sum(len(ids) for ids in golden[:turn])
            assert record["prompt_tokens"] == reference[record["id"]]["prompt_tokens"] + grown
            assert record["cache_tokens_before_turn"] == record["kept_tokens"] + turns[turn - 2]["prompt_tokens"] - record["pressed_tokens"]
    assert any(r["prompt_tokens"] != reference[r["id"]]["prompt_tokens"] for r in generated), "its answers were not the references"


@pytest.mark.parametrize("method", ["kvzip", "adakv_snapkv"])
def test_a_masking_press_cell_answers_turn_1_as_question_aware_and_decodes_turns_together(synthetic_rows, demo_model, method):
    """KVzip (its own context-reconstruction pass, needing the tokenizer) and AdaKV hide slots per head: the masks go
    with every turn's row, so decode batch 6 answers as decode batch 1 and turn 1 as question_aware."""
    together = run_synthetic_cell(synthetic_rows, demo_model, "multi_turn", method=method, decode_batch_size=6)
    alone = run_synthetic_cell(synthetic_rows, demo_model, "multi_turn", method=method, decode_batch_size=1)
    assert [r["prediction"] for r in together] == [r["prediction"] for r in alone]
    aware = {r["id"]: r for r in run_synthetic_cell(synthetic_rows, demo_model, "question_aware", method=method)}
    first_turns = [r for r in together if r["turn"] == 1]
    assert [r["prediction"] for r in first_turns] == [aware[r["id"]]["prediction"] for r in first_turns]
    # every slot is held, half of them hidden (retention 0.5): a hidden context slot is not counted as kept
    assert all(r["kept_tokens"] == r["pressed_tokens"] and r["context_tokens_kept"] < 0.6 * r["pressed_tokens"] for r in together)


def test_smollm2_answers_every_turn_as_transformers_does_over_its_chat_template_of_the_whole_conversation(smollm2_model_dir, tmp_path):
    """Real weights and a real chat template, end to end through the cell: RULER multi-key haystacks made as the data
    rule makes them, 4 questions on one haystack. At every turn the full cache's answer and prompt length equal
    transformers' generate over the template's rendering of the conversation so far (reference answers as history)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from kvcache_bench.data.haystack import make_ruler_haystack_dataset
    from kvcache_bench.engine.cell_runner import run_cell
    from kvcache_bench.engine.loading import ModelSettings
    from kvcache_bench.files import read_jsonl
    from kvcache_bench.study.cell import CellRun
    from kvcache_bench.study.prompts import split_prompt

    layout = tmp_path / "ruler" / "niah_multikey_1" / "test.parquet"
    layout.parent.mkdir(parents=True)
    make_ruler_haystack_dataset("niah_multikey_1", tokenizer_dir=smollm2_model_dir, prompt_length=400, num_examples=4, seed=3,
                                ruler_layout_path=layout, rows_path=tmp_path / "rows.jsonl", params={}, questions_per_haystack=4)
    rows = {row["_id"]: row for row in read_jsonl(tmp_path / "rows.jsonl")}
    run = CellRun(task="niah_multikey_1", model_settings=ModelSettings(path=smollm2_model_dir, dtype="float32", device="cpu", max_context_tokens=4096),
                  method="full_cache", retention=1.0, question_mode="multi_turn", max_new_tokens=16, seed=0, decode_batch_size=4)
    records = list(run_cell(list(rows.values()), run, progress=False))
    assert [r["turn"] for r in records] == [1, 2, 3, 4] and records[0]["chat_template"]
    tokenizer = AutoTokenizer.from_pretrained(smollm2_model_dir)
    model = AutoModelForCausalLM.from_pretrained(smollm2_model_dir, dtype=torch.float32).eval()
    messages: list[dict] = []
    for previous, record in zip([None] + records[:-1], records):
        row = rows[record["id"]]
        context, question = split_prompt("niah_multikey_1", row["context"], row["input"])
        if previous is None:
            messages = [{"role": "user", "content": context + question}]
        else:
            asked = rows[previous["id"]]
            messages += [{"role": "assistant", "content": asked["answer_prefix"] + asked["answers"][0]}, {"role": "user", "content": question}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) + row["answer_prefix"]
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids
        with torch.inference_mode():
            output = model.generate(ids, max_new_tokens=16, do_sample=False, eos_token_id=tokenizer.eos_token_id, pad_token_id=0)
        assert record["prompt_tokens"] == ids.shape[1]
        assert record["prediction"] == tokenizer.decode(output[0, ids.shape[1] :], skip_special_tokens=True)
    assert sum(r["prediction"].strip(" .") == r["references"][0] for r in records) >= 2, "the model reads the haystack"


DECODING_BUDGET = {"compression_interval": 2, "target_size": 64, "hidden_states_buffer_size": 4}


@torch.inference_mode()
def kvpress_decoding_loop(model, press, turn: ConversationTurn) -> tuple[list[int], int]:
    """kvpress's pipeline with a DecodingPress, by hand: context + first question (but its tail) prefilled without the
    press, then inside ``with press(model)`` the tail and every appended id as one block and each greedy step."""
    from transformers import DynamicCache

    ids = turn.first_turn.context_ids + turn.first_turn.question_ids
    pressed, rest = ids[:-HELD_BACK], ids[-HELD_BACK:] + turn.appended_ids
    cache = DynamicCache()
    model(input_ids=torch.tensor([pressed]), past_key_values=cache, use_cache=True)
    position = len(pressed)
    with press(model):
        logits = model(
            input_ids=torch.tensor([rest]), past_key_values=cache, use_cache=True,
            position_ids=torch.arange(position, position + len(rest)).view(1, -1),
        ).logits[:, -1]
        position += len(rest)
        tokens = []
        for _ in range(NEW_TOKENS):
            token = int(logits.argmax(-1))
            tokens.append(token)
            if token in STOP or len(tokens) == NEW_TOKENS:  # the answer's last token never goes through the cache
                break
            logits = model(
                input_ids=torch.tensor([[token]]), past_key_values=cache, position_ids=torch.tensor([[position]]), use_cache=True
            ).logits[:, -1]
            position += 1
    return tokens, cache.get_seq_length()


def test_a_press_that_compresses_while_decoding_is_active_over_every_appended_turn_and_the_answer(model):
    from kvcache_bench.engine.decoders import press_while_decoding

    turns = conversation_turns(150, 4, seed=11)
    decoding = Decoding(model, build_press("decoding_knorm", 1.0, DECODING_BUDGET, seed=0), QuestionMode.MULTI_TURN, NEW_TOKENS, STOP)
    generations = [
        press_while_decoding.decode(replace_press(decoding), [turn.first_turn], [turn.appended_ids])[0][0] for turn in turns
    ]
    for turn, generation in zip(turns, generations):
        expected, held = kvpress_decoding_loop(model, build_press("decoding_knorm", 1.0, DECODING_BUDGET, seed=0), turn)
        assert generation.token_ids == expected and generation.kept_tokens == held == 64  # compressed to its target
        assert generation.prompt_tokens == turn.prompt_tokens


def replace_press(decoding):
    """A fresh press per turn: a decoding press keeps its step counts on itself, as a cell's press per example."""
    from dataclasses import replace

    return replace(decoding, press=build_press("decoding_knorm", 1.0, DECODING_BUDGET, seed=0))


@pytest.mark.parametrize("history", ["reference", "generated"])
def test_a_decoding_press_cell_records_its_turns_as_compressed_while_decoding(synthetic_rows, demo_model, history):
    from kvcache_bench.engine.cell_runner import run_cell
    from kvcache_bench.engine.loading import ModelSettings
    from kvcache_bench.study.cell import CellRun

    settings = ModelSettings(path=demo_model, dtype="float32", device="cpu", max_context_tokens=2048)
    common = dict(task="synthetic_qa", model_settings=settings, retention=1.0, max_new_tokens=4, seed=0)
    run = CellRun(method="decoding_knorm", question_mode="multi_turn", method_kwargs={**DECODING_BUDGET, "target_size": 32},
                  multi_turn_history=history, decode_batch_size=4, **common)
    records = list(run_cell(synthetic_rows, run, progress=False))
    assert [r["turn"] for r in records] == [1, 2, 3] * 3
    assert all(r["compressed_while_decoding"] and r["appended_turns_compressed"] for r in records)
    assert all(r["kept_tokens"] == 32 < r["pressed_tokens"] for r in records)  # the cache after decoding, at its target
    assert all(r["cache_tokens_before_turn"] is None and r["context_tokens_kept"] is None for r in records)  # not traced
    assert all(r["effective_decode_batch_size"] == 1 for r in records)
    aware = CellRun(method="decoding_knorm", question_mode="question_aware", method_kwargs={**DECODING_BUDGET, "target_size": 32}, **common)
    first_turns = {r["id"]: r["prediction"] for r in run_cell(synthetic_rows, aware, progress=False)}
    assert [r["prediction"] for r in records if r["turn"] == 1] == [first_turns[r["id"]] for r in records if r["turn"] == 1]

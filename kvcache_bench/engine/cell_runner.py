"""One study cell, the generate rule's work: load the model, build every prompt, generate, yield records."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field, replace

import torch

from kvcache_bench.engine.attention_plans import build_plans, plans_mode, prompt_calls, recording_prompt_attention
from kvcache_bench.engine.caches import kv_bytes_per_token
from kvcache_bench.engine.decoders import DECODERS, Strategy, shared_context_groups
from kvcache_bench.engine.decoders.multi_turn import ConversationInOrder, generate_turns_in_order
from kvcache_bench.engine.decoders.press_while_decoding import (
    WHILE_DECODING_FALLBACK,  # noqa: F401  (named by tests and docs)
    presses_while_decoding,
)
from kvcache_bench.engine.decoders.press_while_decoding import generate_turns_in_order as while_decoding_in_order
from kvcache_bench.engine.example_clock import prefill_waits
from kvcache_bench.engine.greedy import DecodePath, Decoding, Generation, decode_answer
from kvcache_bench.engine.layer_types import LayerTypes, layer_types_of
from kvcache_bench.engine.layered_cache import new_cache
from kvcache_bench.engine.loading import LoadedModel, loaded_with_attention
from kvcache_bench.engine.static_decode import decode_mode
from kvcache_bench.engine.warm_ups import warm_up_kind, warm_up_once
from kvcache_bench.methods.registry import (
    attention_implementation_for,
    build_press,
    cache_factory_for,
    get_method,
    press_construction,
)
from kvcache_bench.study.cell import CellRun
from kvcache_bench.study.cell_checks import check_setting
from kvcache_bench.study.context_limits import context_setting_problem, model_context
from kvcache_bench.study.press_values import decoding_budget_problem, prompt_length_problem
from kvcache_bench.study.prompt_tokens import (
    PromptTokens,
    appended_turn_ids,
    extra_stop_ids,
    prompt_within_context,
    vocabulary_problem,
)
from kvcache_bench.study.prompts import NEWLINE_STOP_TASKS, stop_rule
from kvcache_bench.study.question_modes import (
    HISTORY_GENERATED,
    MULTI_TURN_HISTORIES,
    QuestionMode,
    conversations,
    other_questions,
)
from kvcache_bench.study.sliding_layers import SLIDING

log = logging.getLogger(__name__)


SECONDS_COVER = (
    "this example's prefill and compression (a shared context's split equally among its questions) plus its decode:"
    " alone, or an equal share of its decode batch's wall time (a decode batch's prefills run with no wait for the GPU"
    " between them, each timed on the GPU's timeline from the previous example's end); excluded: model loading, the"
    " GPU warm-up (warmup_seconds: one unmeasured example, once per model for each strategy and press, so 0 in a"
    " worker's later cells, plus, on a GPU, the attention plans of prompt lengths the worker had not met) and a CUDA"
    " graph capture for a decode batch shape the model met first (graph_capture_seconds)"
)


# strategies whose decode steps run through static_decode.decode_together (static buffers, CUDA graphs on a GPU)
DECODED_TOGETHER = (
    Strategy.DECODE_MANY,
    Strategy.SHARED_CONTEXTS_TOGETHER,
    Strategy.OTHER_QUESTION,
    Strategy.MULTI_TURN,
)


def choose_strategy(
    mode: QuestionMode,
    *,
    batch_size: int,
    decode_batch_size: int,
    quantised_cache: bool,
    press_while_decoding: bool = False,
) -> Strategy:
    """The one strategy a cell runs with (``check_setting`` has refused the impossible combinations).

    ``press_while_decoding``: the press compresses while decoding (``presses_while_decoding``): batch 1 always,
    question-aware, question-agnostic or multi_turn (each turn alone). A press that hides slots through kvpress's
    per-model masks decodes together like any other: each example's (or shared context's) masks go with its snapshot
    into the decode batch."""
    if press_while_decoding:
        allowed = (QuestionMode.QUESTION_AWARE, QuestionMode.QUESTION_AGNOSTIC, QuestionMode.MULTI_TURN)
        if batch_size > 1 or mode not in allowed:
            raise ValueError(
                "a press that compresses while decoding runs one example at a time, question_aware, "
                f"question_agnostic or multi_turn; batch size {batch_size}, {mode.value} asked"
            )
        return Strategy.PRESS_WHILE_DECODING
    if mode == QuestionMode.MULTI_TURN:
        if batch_size > 1:  # check_setting refuses it: a padded batch would be turn 1 alone
            raise ValueError(f"the multi_turn mode batches by decode_batch_size; batch size {batch_size} asked")
        return Strategy.MULTI_TURN
    if batch_size > 1:
        return Strategy.PADDED_BATCH
    if mode.removes_the_question_it_showed:
        return Strategy.OTHER_QUESTION
    question_aware = mode == QuestionMode.QUESTION_AWARE
    if decode_batch_size > 1 and (question_aware or not quantised_cache):
        return Strategy.DECODE_MANY if question_aware else Strategy.SHARED_CONTEXTS_TOGETHER
    return Strategy.ONE_BY_ONE if question_aware else Strategy.SHARED_CONTEXT


def plan_chunks(
    strategy: Strategy,
    prompts: list[PromptTokens],
    *,
    batch_size: int,
    decode_batch_size: int,
    others: list[list[int]] | None = None,
    conversations_in_order: bool = False,
) -> list[list[int]]:
    """The indices of prompts generated together, chunk by chunk; every index in exactly one chunk.

    ``conversations_in_order``: multi_turn with generated history, whose turn t of every conversation in a chunk
    decodes together: a chunk holds up to ``decode_batch_size`` whole conversations."""
    per_chunk = {
        Strategy.ONE_BY_ONE: 1,
        Strategy.PRESS_WHILE_DECODING: 1,
        Strategy.PADDED_BATCH: batch_size,
        Strategy.DECODE_MANY: decode_batch_size,
    }
    if strategy in per_chunk and not conversations_in_order:
        size = per_chunk[strategy]
        return [list(range(start, min(start + size, len(prompts)))) for start in range(0, len(prompts), size)]
    # a multi_turn row's prompt is its conversation's first (one context, one conversation); ``others`` its turn's ids
    groups = shared_context_groups(prompts, others if strategy == Strategy.OTHER_QUESTION else None)
    together = (Strategy.OTHER_QUESTION, Strategy.MULTI_TURN)
    if strategy == Strategy.SHARED_CONTEXT or (strategy in together and decode_batch_size == 1):
        return groups
    chunks: list[list[int]] = []
    groups_in_chunk = 0
    for group in groups:
        if conversations_in_order:  # up to decode_batch_size conversations: turn t of each is one decode row
            fits = groups_in_chunk < decode_batch_size
        else:  # whole shared-context groups, packed until a chunk holds decode_batch_size questions
            fits = bool(chunks) and len(chunks[-1]) + len(group) <= decode_batch_size
        if chunks and fits:
            chunks[-1] = chunks[-1] + group
            groups_in_chunk += 1
        else:
            chunks.append(list(group))
            groups_in_chunk = 1
    return chunks


@dataclass(frozen=True)
class CellGenerator:
    """What every chunk of a cell is generated with: its ``Decoding`` settings and its one strategy."""

    decoding: Decoding
    strategy: Strategy

    def generate(
        self, prompts: list[PromptTokens], others: list[list[int]] | None = None
    ) -> tuple[list[Generation], DecodePath]:
        """Generations for a chunk's prompts, in their order, and the decode path that made them.

        ``others``: in the other-question mode, the tokens of each prompt's other question the press sees.
        """
        return DECODERS[self.strategy](self.decoding, prompts, others)


def bytes_held(generation: Generation, layer_types: LayerTypes, slot_bytes: float, full_slot_bytes: float) -> dict:
    """The KV bytes the cache held right after compression and what the full cache holds for the same prompt.

    On a model with sliding layers each layer type counts what its layers really hold: a window layer kept whole
    holds its last W - 1 positions whatever the press (so it saves nothing when "compressed"), and the full cache's
    windows hold as much."""
    if generation.kept_by_layer_type is None:
        return {
            "kv_bytes_held": round(generation.kept_tokens * slot_bytes),
            "kv_bytes_uncompressed": round(generation.pressed_tokens * full_slot_bytes),
        }
    layers = len(layer_types.kinds)
    by_type = {
        kind: round(kept * layer_types.kinds.count(kind) * slot_bytes / layers)
        for kind, kept in generation.kept_by_layer_type.items()
    }
    pressed = generation.pressed_tokens
    full_slots = sum(
        min(pressed, layer_types.window - 1) if layer_types.kept_as_window(layer) else pressed
        for layer in range(layers)
    )
    return {
        "kv_bytes_held": sum(by_type.values()),
        "kv_bytes_uncompressed": round(full_slots * full_slot_bytes / layers),
        "kv_bytes_held_by_layer_type": by_type,
        "kept_tokens_by_layer_type": generation.kept_by_layer_type,
    }


def prediction_record(row: dict, prompt: PromptTokens, generation: Generation, answer: str, setting: dict) -> dict:
    """One prediction record: the example, what was generated from how much cache, and the cell's setting."""
    context_slots = generation.kept_context_slots
    if (
        context_slots is None
        and setting["question_mode"] != QuestionMode.QUESTION_AWARE
        and not setting.get("compressed_while_decoding")
    ):
        context_slots = generation.kept_tokens  # the press saw the context alone (or, without a press, kept it whole)
    return {
        "id": row["_id"],
        "prediction": answer,
        "references": row["answers"],
        "all_classes": row.get("all_classes"),
        "prompt_tokens": generation.prompt_tokens,
        "pressed_tokens": generation.pressed_tokens,
        "kept_tokens": generation.kept_tokens,
        "effective_retention": generation.kept_tokens / max(1, generation.pressed_tokens),
        "kept_context_slots": context_slots,
        "generated_tokens": len(generation.token_ids),
        "truncated": prompt.truncated,
        "truncated_by": prompt.truncated_by,  # None, max_context_tokens, or model_context (study.context_limits)
        "original_prompt_tokens": prompt.original_tokens,
        "chat_template": prompt.chat_template,
        "held_back_tokens": prompt.held_back_tokens,
        "truncation": "longbench_pred_py",
        "shared_context_questions": generation.shared_context_questions,
        "seconds": generation.seconds,
        "graph_capture_seconds": generation.graph_capture_seconds,
        "seconds_cover": SECONDS_COVER,
        **setting,
    }


def rows_with_other_questions(rows: list[dict], seed: int) -> tuple[list[dict], dict[str, str | None]]:
    """(the rows the other-question mode can use, each row id's other question): a context needs two questions."""
    partner = other_questions(rows, seed)
    usable = [row for row in rows if partner[row["_id"]] is not None]
    log.info(
        "other_question: %d of %d examples usable (the rest are the only question on their context)",
        len(usable),
        len(rows),
    )
    return usable, partner


def other_question_tokens(
    prompts: list[PromptTokens], rows: list[dict], partner: dict[str, str | None]
) -> list[list[int]]:
    """Per prompt, its other question's tokens as that question's question-aware prefill presses them."""
    by_id = {row["_id"]: prompt for row, prompt in zip(rows, prompts)}
    others = []
    for row in rows:
        other = by_id[partner[row["_id"]]]
        others.append(other.question_ids[: max(0, len(other.question_ids) - max(1, other.held_back_tokens))])
    return others


@dataclass(frozen=True)
class TurnPlace:
    """Where a multi_turn row sits in its conversation: what its record says beside the example's own fields."""

    conversation_id: str  # study.question_modes.context_hash of the context its turns share
    turn: int  # 1-based position in the seeded order
    turns: int  # questions on the context
    # the conversation's tokens up to the previous turn's answer (its prompt); None for turn 1
    previous_prompt_tokens: int | None
    appended_ids: tuple[int, ...]  # every id after the first turn's prompt up to this turn's generation prompt


@dataclass(frozen=True)
class CellConversations:
    """A multi_turn cell's conversations: each row's place and first prompt, and, with the generated history, each
    conversation as the engine runs it in order (its later turns are made from the model's answers as they come)."""

    rows: list[dict]  # conversation by conversation, in turn order
    places: dict[str, TurnPlace]  # row id -> its place; with generated history, as the reference answers would make it
    first_prompts: dict[str, PromptTokens]  # row id -> its conversation's first prompt
    in_order: dict[str, ConversationInOrder] | None  # conversation id -> itself (generated history); None: reference


def generated_turn_ids(
    tokenizer, task: str, asked: list[dict], chat_template: bool, turn: int, answer_ids: list[list[int]]
) -> list[int]:
    """The ids turn ``turn`` appends with generated history: the model's answers as the records keep them
    (``decode_answer``), in the model's prompt form (``appended_turn_ids``)."""
    answers = [decode_answer(tokenizer, ids) for ids in answer_ids]
    return appended_turn_ids(tokenizer, task, asked[:turn], answers, chat_template=chat_template)[turn - 1]


def rows_in_conversations(rows: list[dict], run: CellRun, tokenizer, first_prompt) -> CellConversations:
    """The rows the multi_turn mode can use, in conversations. ``first_prompt(row)``: a row's prompt as the cell
    builds it.

    A later turn appends the previous turn's first reference answer (``multi_turn.history: reference``), or the
    model's own answer (``generated``: its places are made again as the turns are answered); a context with one
    question has no conversation (the generate job refuses a dataset with none: runtime.not_run)."""
    if run.multi_turn_history not in MULTI_TURN_HISTORIES:
        raise ValueError(f"multi_turn.history {run.multi_turn_history!r}: expected one of {MULTI_TURN_HISTORIES}")
    chat = run.model_settings.chat_template
    usable, places, prompts = [], {}, {}
    in_order: dict[str, ConversationInOrder] = {}
    for conversation in conversations(rows, run.seed):
        missing = [row["_id"] for row in conversation.rows[:-1] if not row.get("answers")]
        if missing:
            raise ValueError(f"multi_turn appends each question's reference answer, and rows {missing} have none")
        first = first_prompt(conversation.rows[0])
        answers = [row["answers"][0] for row in conversation.rows]
        appended = appended_turn_ids(tokenizer, run.task, list(conversation.rows), answers, chat_template=chat)
        so_far: list[int] = []
        previous = None
        for turn, (row, turn_ids) in enumerate(zip(conversation.rows, appended), start=1):
            so_far = so_far + turn_ids
            place = TurnPlace(conversation.conversation_id, turn, conversation.turns, previous, tuple(so_far))
            places[row["_id"]] = place
            prompts[row["_id"]] = first
            previous = first.length + len(so_far)
        usable += conversation.rows
        if run.multi_turn_history == HISTORY_GENERATED:
            appended_for = functools.partial(generated_turn_ids, tokenizer, run.task, list(conversation.rows), chat)
            in_order[conversation.conversation_id] = ConversationInOrder(first, conversation.turns, appended_for)
    log.info(
        "multi_turn: %d of %d examples in %d conversations (the rest are the only question on their context)",
        len(usable),
        len(rows),
        len({place.conversation_id for place in places.values()}),
    )
    return CellConversations(usable, places, prompts, in_order if run.multi_turn_history == HISTORY_GENERATED else None)


def multi_turn_record(
    place: TurnPlace,
    generation: Generation,
    history: str,
    layer_types: LayerTypes,
    slot_bytes: float,
    full: float,
    compressed_while_decoding: bool = False,
) -> dict:
    """A multi_turn record's own fields. The cache a turn answers from is its first turn's kept slots and every token
    appended since (the first prompt's held-back tail included), none compressed: a press that compresses at prefill
    alone never sees them. A press that compresses while decoding is active over them and the answer
    (``compressed_while_decoding``): its record keeps ``bytes_held``'s bytes of the cache after decoding, and what the
    cache held before the turn and of the context is not traced (None).

    Its bytes are counted as ``bytes_held`` counts a prompt's: a sliding layer holds at most its window's last W - 1
    positions, so the appended turns fill a sliding layer only up to that (per layer type, on the type's mean)."""
    where = {"turn": place.turn, "turns": place.turns, "conversation_id": place.conversation_id}
    if compressed_while_decoding:
        untraced = {"cache_tokens_before_turn": None, "context_tokens_kept": None}
        return {**where, "multi_turn_history": history, **untraced, "appended_turns_compressed": True}
    kept, appended = generation.kept_tokens, generation.prompt_tokens - generation.pressed_tokens
    previous = place.previous_prompt_tokens
    held_by_type = None
    if generation.kept_by_layer_type is not None:
        held_by_type = {
            kind: min(slots + appended, layer_types.window - 1) if kind == SLIDING else slots + appended
            for kind, slots in generation.kept_by_layer_type.items()
        }
    at_answer = replace(
        generation,
        kept_tokens=kept + appended,
        pressed_tokens=generation.prompt_tokens,
        kept_by_layer_type=held_by_type,
    )
    held = bytes_held(at_answer, layer_types, slot_bytes, full)
    return {
        **where,
        "multi_turn_history": history,
        "cache_tokens_before_turn": kept if previous is None else kept + previous - generation.pressed_tokens,
        "context_tokens_kept": generation.kept_context_slots,
        # what the cache holds when this turn's answer starts, and what the full cache would hold then
        **{name: value for name, value in held.items() if name.startswith("kv_bytes_")},
        "appended_turns_compressed": False,
    }


def cell_press(run: CellRun):
    """The run's press (None for the full cache), built afresh."""
    return build_press(run.method, run.retention, run.method_kwargs, seed=run.seed, custom_methods=run.custom_methods)


def cache_for_layers(layer_types: LayerTypes, make_cache):
    """Each example's empty cache: the method's, or on a model with sliding layers one that keeps each window's slot
    positions (``engine.layered_cache``)."""
    from transformers import DynamicCache

    if not layer_types.has_sliding_layers:
        return make_cache
    if make_cache is not DynamicCache:
        raise ValueError(
            "a quantised KV cache on a model with sliding-window layers is not supported: its windows would be "
            "masked by slots, not positions; run kv_quant_* on a model without sliding layers"
        )
    return functools.partial(new_cache, layer_types)


def load_cell_generator(run: CellRun, loaded: LoadedModel | None) -> tuple[object, CellGenerator]:
    """(tokenizer, generator): the model (``loaded``, or loaded now) for the run's method, its press and cache, and
    the cell's one strategy."""
    method, custom = run.method, run.custom_methods
    attention = attention_implementation_for(method, run.model_settings.attn_implementation, custom)
    loaded = loaded_with_attention(run.model_settings, loaded, attention, method)
    device, tokenizer, model = loaded.device, loaded.tokenizer, loaded.model
    press = cell_press(run)
    # Without a press no question is in view: the cache is the context's whichever question was asked before.
    mode = QuestionMode.QUESTION_AGNOSTIC if run.mode.removes_the_question_it_showed and press is None else run.mode
    strategy = choose_strategy(
        mode,
        batch_size=run.batch_size,
        decode_batch_size=run.decode_batch_size,
        quantised_cache=get_method(method, custom).kv_cache_bits is not None,
        press_while_decoding=presses_while_decoding(press) is not None,
    )
    if strategy == Strategy.PRESS_WHILE_DECODING and layer_types_of(model).has_sliding_layers:
        # the cell checks refuse it from the method's measured properties; a press they could not judge stops here
        raise ValueError(
            f"{method} compresses while decoding: on a model with sliding-window layers its hooks would evict from the "
            "windows between steps, which this engine's position masks do not follow"
        )
    log.info(
        "method=%s retention=%s batch=%s mode=%s strategy=%s device=%s attention=%s",
        method,
        run.retention,
        run.batch_size,
        run.mode,
        strategy.value,
        device,
        attention,
    )
    decoding = Decoding(
        model,
        press,
        mode,
        run.max_new_tokens,
        set(loaded.stop_ids) | extra_stop_ids(tokenizer, run.task),
        make_cache=cache_for_layers(layer_types_of(model), cache_factory_for(method, model, run.method_kwargs, custom)),
        min_new_tokens=1 if run.task in NEWLINE_STOP_TASKS else 0,
        pad_token_id=tokenizer.pad_token_id or 0,
        decode_batch_size=run.decode_batch_size,
    )
    return tokenizer, CellGenerator(decoding, strategy)


def pressed_lengths(prompts: list[PromptTokens], mode: QuestionMode, others: list[list[int]] | None) -> list[int]:
    """How many tokens the press compresses for each prompt in ``mode``
    (``others``: the other questions' pressed tokens)."""
    if mode.removes_the_question_it_showed:
        return [len(p.context_ids) + len(other) for p, other in zip(prompts, others)]
    if mode in (QuestionMode.QUESTION_AWARE, QuestionMode.MULTI_TURN):  # multi_turn: its first turn's, question_aware
        return [p.length - max(1, p.held_back_tokens) for p in prompts]
    return [len(p.context_ids) for p in prompts]


@dataclass(frozen=True)
class PreparedCell:
    """A cell ready to generate: its rows, their prompts, the other questions' tokens, the chunks and the setting."""

    rows: list[dict]
    prompts: list[PromptTokens]
    # in the other-question mode, each prompt's other question as the press sees it; in the multi_turn mode each
    # turn's ids after its conversation's first prompt (each of its prompts)
    others: list[list[int]] | None
    partner: dict[str, str | None]  # row id -> the id of the question whose slots the press saw and lost
    chunks: list[list[int]]
    # row id -> its place in its multi_turn conversation (with generated history, filled in as its turns are answered)
    turns: dict[str, TurnPlace] = field(default_factory=dict)
    in_order: dict[str, ConversationInOrder] | None = None  # multi_turn with generated history: its conversations


def prepare_cell(rows: list[dict], run: CellRun, tokenizer, generator: CellGenerator) -> PreparedCell:
    """Every prompt of the cell, checked against the model and the press before anything is generated."""
    partner: dict[str, str | None] = {}
    if run.mode == QuestionMode.OTHER_QUESTION:
        rows, partner = rows_with_other_questions(rows, run.seed)
    elif run.mode == QuestionMode.SAME_QUESTION:
        partner = {row["_id"]: row["_id"] for row in rows}
    limit = run.model_settings.max_context_tokens
    chat = run.model_settings.chat_template
    # the positions the model was trained on: a longer max_context_tokens is refused, a prompt that leaves its answer
    # no room is cut further (study.context_limits; the parse checked a local folder's config.json already)
    context = model_context(generator.decoding.model.config.to_dict())
    if context is not None and (
        problem := context_setting_problem(
            "models.<name>.max_context_tokens",
            limit,
            context,
            f"the config of the model at {run.model_settings.path!r}",
            run.max_new_tokens,
            run.task,
        )
    ):
        raise ValueError(problem)
    trained = context.tokens if context is not None else None

    def prompt_of(row: dict) -> PromptTokens:
        return prompt_within_context(
            tokenizer, run.task, row, limit, model_context=trained, answer_tokens=run.max_new_tokens, chat_template=chat
        )

    turns: dict[str, TurnPlace] = {}
    in_order = None
    if run.mode == QuestionMode.MULTI_TURN:
        found = rows_in_conversations(rows, run, tokenizer, prompt_of)
        rows, turns, in_order = found.rows, found.places, found.in_order
        prompts = [found.first_prompts[row["_id"]] for row in rows]
        # with generated history each earlier answer may take up to max_new_tokens besides its reference's tokens
        answer_room = run.max_new_tokens if in_order else 0
        places = [turns[row["_id"]] for row in rows]
        longest = max(
            (p.length + len(place.appended_ids) + (place.turn - 1) * answer_room for p, place in zip(prompts, places)),
            default=0,
        )
        if trained is not None and longest + run.max_new_tokens > trained:
            raise ValueError(
                f"a multi_turn conversation takes {longest} tokens before its last answer, and the model has {trained}"
                f" positions for it and its {run.max_new_tokens} new tokens: lower models.<name>.max_context_tokens"
                " (turn 1's context is cut to it) or use fewer questions per context"
            )
    else:
        prompts = [prompt_of(row) for row in rows]
    vocabulary = generator.decoding.model.get_input_embeddings().num_embeddings
    ids = [str(row.get("_id")) for row in rows]
    if problem := vocabulary_problem(prompts, ids, vocabulary, run.model_settings.path):
        raise ValueError(problem)
    others = other_question_tokens(prompts, rows, partner) if generator.strategy == Strategy.OTHER_QUESTION else None
    if run.mode == QuestionMode.MULTI_TURN:  # whichever strategy runs it (a press that compresses while decoding too)
        others = [list(turns[row["_id"]].appended_ids) for row in rows]
    if generator.decoding.press is not None and (
        problem := prompt_length_problem(
            run.method, run.method_kwargs or {}, pressed_lengths(prompts, generator.decoding.mode, others)
        )
    ):
        raise ValueError(problem)  # kvpress would assert it mid-forward, naming neither the kwarg nor the config
    chunks = plan_chunks(
        generator.strategy,
        prompts,
        batch_size=run.batch_size,
        decode_batch_size=run.decode_batch_size,
        others=others,
        conversations_in_order=in_order is not None,
    )
    return PreparedCell(rows, prompts, others, partner, chunks, turns, in_order)


def warm_up(run: CellRun, generator: CellGenerator, cell: PreparedCell) -> float:
    """Seconds of one unmeasured run of the cell's first example, if its model has not yet run this strategy with
    this press's classes (``engine.warm_ups``); 0.0 otherwise.

    It runs on a press of its own, built as the cell's: the cell's press object sees the cell's examples alone,
    whether or not its worker warmed up in this cell."""
    first = cell.chunks[0][0]

    def one_example():
        warming = CellGenerator(replace(generator.decoding, press=cell_press(run)), generator.strategy)
        # its prompt pass's attention calls, to build their plans for the cell's other lengths (engine.attention_plans)
        with recording_prompt_attention(prompt_calls(generator.decoding.model)):
            warming.generate([cell.prompts[first]], cell.others and [cell.others[first]])

    return warm_up_once(
        generator.decoding.model, warm_up_kind(generator.strategy.value, generator.decoding.press), one_example
    )


def model_context_record(model) -> dict:
    context = model_context(model.config.to_dict())
    return {
        "model_context_tokens": context.tokens if context else None,
        "model_context_source": context.source if context else None,
    }


def cell_setting(run: CellRun, generator: CellGenerator, construction, warmup_seconds: float) -> dict:
    """The fields every record of the cell shares: how it was generated."""
    strategy = generator.strategy
    return {
        "kv_cache_bits": get_method(run.method, run.custom_methods).kv_cache_bits,
        "max_context_tokens": run.model_settings.max_context_tokens,
        # the positions the model's config says it was trained on, and the field that says so (None: it names none)
        **model_context_record(generator.decoding.model),
        "warmup_seconds": warmup_seconds,
        "decode_steps": decode_mode(generator.decoding.model) if strategy in DECODED_TOGETHER else "eager",
        "attention_plans": plans_mode(generator.decoding.model),  # cuDNN's per-length set-up: timed or not
        # whether the GPU was waited for between a decode batch's prefills (engine.example_clock)
        "prefill_waits": prefill_waits(strategy == Strategy.DECODE_MANY and generator.decoding.decode_batch_size > 1),
        # kept_tokens is then what the cache held after decoding, pressed_tokens every token that went through it
        "compressed_while_decoding": strategy == Strategy.PRESS_WHILE_DECODING,
        "stop_rule": stop_rule(run.task),  # how an answer ends (study.prompts): EOS, or samsum's newline too
        "method": run.method,
        "retention": run.retention,
        "batch_size": run.batch_size,
        "question_mode": run.mode.value,
        "construction": construction,
        # a model with sliding layers: what the press did to them, and whether the setting was the default
        **layer_types_of(generator.decoding.model).record(),
    }


def turns_in_order(generator: CellGenerator, cell: PreparedCell, chunk: list[int]):
    """A chunk of multi_turn conversations with generated history: (generations, decode path) in the chunk's order.
    Each row's place is made again from the turn it was really asked (the model's answers before it)."""
    conversation_ids = list(dict.fromkeys(cell.turns[cell.rows[i]["_id"]].conversation_id for i in chunk))
    # a press that compresses while decoding runs each turn alone, the press active over its appended turns
    in_order = (
        while_decoding_in_order if generator.strategy == Strategy.PRESS_WHILE_DECODING else generate_turns_in_order
    )
    generations, asked, path = in_order(
        generator.decoding, [cell.in_order[conversation] for conversation in conversation_ids]
    )
    answered_at: dict[tuple[str, int], Generation] = {}
    asked_at: dict[tuple[str, int], TurnPlace] = {}
    for conversation, answered, turns in zip(conversation_ids, generations, asked):
        previous = None
        for turn, (generation, turn_asked) in enumerate(zip(answered, turns), start=1):
            answered_at[conversation, turn] = generation
            asked_at[conversation, turn] = TurnPlace(
                conversation, turn, len(turns), previous, tuple(turn_asked.appended_ids)
            )
            previous = turn_asked.prompt_tokens
    found = []
    for index in chunk:
        row_id = cell.rows[index]["_id"]
        where = (cell.turns[row_id].conversation_id, cell.turns[row_id].turn)
        cell.turns[row_id] = asked_at[where]  # the records' place: the turn as it was really asked
        found.append(answered_at[where])
    return found, path


def generations_in_row_order(generator: CellGenerator, cell: PreparedCell):
    """(index, generation, decode path) per row in row order, each chunk generated when its first row is reached."""
    done: dict[int, tuple[Generation, DecodePath]] = {}
    chunk_of = {index: chunk for chunk in cell.chunks for index in chunk}
    for index in range(len(cell.rows)):
        if index not in done and cell.in_order is not None:
            chunk = chunk_of[index]
            generations, path = turns_in_order(generator, cell, chunk)
            done.update((i, (generation, path)) for i, generation in zip(chunk, generations))
        elif index not in done:
            chunk = chunk_of[index]
            chunk_others = [cell.others[i] for i in chunk] if cell.others is not None else None
            generations, path = generator.generate([cell.prompts[i] for i in chunk], chunk_others)
            done.update((i, (generation, path)) for i, generation in zip(chunk, generations))
        yield index, *done.pop(index)


def run_cell(rows: list[dict], run: CellRun, *, loaded: LoadedModel | None = None, progress: bool = True):
    """Yield one prediction record per row, in row order (the ``generate`` rule's work): check, prepare, generate
    with the cell's one decoder (``engine.decoders``), write records.

    ``run.batch_size`` > 1 batches the prefill (left padding: full cache and kv_quant only); ``decode_batch_size``
    > 1 prefills and compresses every example alone and decodes that many compressed caches together
    (``kvcache_bench.engine.decoders.decode_many``: safe with eviction). ``loaded`` is a model a worker
    loaded already for these settings and this method's attention (``kvcache_bench.runtime.worker``).
    In the other-question mode a row that is the only question on its context has no record (the cell's
    count says how many it could use).
    """
    from tqdm import tqdm

    check_setting(run)
    torch.manual_seed(run.seed)
    tokenizer, generator = load_cell_generator(run, loaded)
    model = generator.decoding.model
    construction = press_construction(generator.decoding.press)  # before generating: a press may keep state on itself
    cell = prepare_cell(rows, run, tokenizer, generator)
    if generator.strategy == Strategy.PRESS_WHILE_DECODING and (
        problem := decoding_budget_problem(
            run.method, construction, run.max_new_tokens, [p.length for p in cell.prompts]
        )
    ):
        raise ValueError(problem)  # the check job refused what it could tell without the prompts
    warmup_seconds = warm_up(run, generator, cell) if cell.chunks else 0.0
    # cuDNN's attention plan for each prompt length the cell has that this worker has not met, built unmeasured
    warmup_seconds += build_plans(model, pressed_lengths(cell.prompts, generator.decoding.mode, cell.others))
    setting = cell_setting(run, generator, construction, warmup_seconds)
    slot_bytes, full_slot_bytes = kv_bytes_per_token(model, setting["kv_cache_bits"]), kv_bytes_per_token(model)
    layer_types = layer_types_of(model)
    bar = tqdm(
        total=len(cell.rows), desc=f"{run.method}@{run.retention:.2f}", unit="ex", disable=not progress, mininterval=1.0
    )
    for index, generation, path in generations_in_row_order(generator, cell):
        row = cell.rows[index]
        measured = {
            "other_question_id": cell.partner.get(row["_id"]),
            # Held, not attended: a masked slot or a zeroed key channel is still stored (docs/methods.md).
            **bytes_held(generation, layer_types, slot_bytes, full_slot_bytes),
        }
        if (place := cell.turns.get(row["_id"])) is not None:
            history = run.multi_turn_history
            while_decoding = setting["compressed_while_decoding"]
            fields = multi_turn_record(
                place, generation, history, layer_types, slot_bytes, full_slot_bytes, while_decoding
            )
            measured.update(fields)
        answer = decode_answer(tokenizer, generation.token_ids)
        yield prediction_record(row, cell.prompts[index], generation, answer, {**setting, **path.record(), **measured})
        bar.update(1)
    bar.close()

"""One study cell, the generate rule's work: load the model, build every prompt, generate, yield records."""

from __future__ import annotations

import logging
import time

import torch

from kvcache_bench.generation.batched_decode import (
    DecodePath,
    decode_mode,
    generate_prefill_one_decode_many,
    generate_shared_contexts_together,
)
from kvcache_bench.generation.caches import kv_bytes_per_token
from kvcache_bench.generation.loading import LoadedModel, ModelSettings, load_for_settings, synchronize
from kvcache_bench.generation.single_decode import (
    Generation,
    decode_answer,
    generate_one,
    generate_padded_batch,
    generate_shared_context,
)
from kvcache_bench.methods.registry import (
    attention_implementation_for,
    build_press,
    cache_factory_for,
    get_method,
    press_construction,
)
from kvcache_bench.study.cell_checks import Cell, check_cell
from kvcache_bench.study.press_values import prompt_length_problem
from kvcache_bench.study.prompts import NEWLINE_STOP_TASKS, PromptTokens, build_prompt_tokens, extra_stop_ids

log = logging.getLogger(__name__)


SECONDS_COVER = (
    "this example's prefill and compression (a shared context's split equally among its questions) plus its decode:"
    " alone, or an equal share of its decode batch's wall time (a CUDA graph capture included when that batch"
    " captured one); model loading and the cell's GPU warm-up (warmup_seconds) excluded"
)


def shared_context_groups(prompts: list[PromptTokens]) -> list[list[int]]:
    """Indices of prompts whose context tokens are identical, in order of first appearance."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for index, prompt in enumerate(prompts):
        groups.setdefault(tuple(prompt.context_ids), []).append(index)
    return list(groups.values())


def run_cell(
    rows: list[dict],
    *,
    task: str,
    model_settings: ModelSettings,
    method: str,
    retention: float,
    batch_size: int,
    question_mode: str,
    max_new_tokens: int,
    seed: int,
    method_kwargs: dict | None = None,
    progress: bool = True,
    decode_batch_size: int = 1,
    custom_methods: dict | None = None,
    loaded: LoadedModel | None = None,
):
    """Yield one prediction record per row, in row order (the ``generate`` rule's work).

    ``batch_size`` > 1 batches the prefill (left padding: full cache and kv_quant only); ``decode_batch_size``
    > 1 prefills and compresses every example alone and decodes that many compressed caches together
    (``kvcache_bench.generation.batched_decode``: safe with eviction). ``loaded`` is a model a worker
    loaded already for these settings and this method's attention (``kvcache_bench.generation.worker``).
    """
    from tqdm import tqdm

    check_cell(Cell("-", task, "-", method, question_mode, retention, batch_size, decode_batch_size), custom_methods)
    torch.manual_seed(seed)
    attention = attention_implementation_for(method, model_settings.attn_implementation, custom_methods)
    if loaded is None:
        loaded = load_for_settings(model_settings, attn_implementation=attention)
    elif loaded.attn_implementation != attention:
        raise ValueError(f"{method} needs attention {attention!r} but the loaded model has {loaded.attn_implementation!r}")
    device, tokenizer, model = loaded.device, loaded.tokenizer, loaded.model
    press = build_press(method, retention, method_kwargs, seed=seed, custom_methods=custom_methods)
    make_cache = cache_factory_for(method, model, method_kwargs, custom_methods)
    construction = press_construction(press)  # before generating: a press may keep state on itself
    stop_ids = set(loaded.stop_ids) | extra_stop_ids(tokenizer, task)
    min_new_tokens = 1 if task in NEWLINE_STOP_TASKS else 0
    question_aware = question_mode == "question_aware"
    log.info("method=%s retention=%s batch=%s mode=%s device=%s attention=%s", method, retention, batch_size, question_mode, device, attention)

    prompts = [
        build_prompt_tokens(tokenizer, task, row["context"], row["input"], model_settings.max_context_tokens, row.get("answer_prefix") or "")
        for row in rows
    ]
    pressed_lengths = [p.length - max(1, p.held_back_tokens) if question_aware else len(p.context_ids) for p in prompts]
    if press is not None and (problem := prompt_length_problem(method, method_kwargs or {}, pressed_lengths)):
        raise ValueError(problem)  # kvpress would assert it mid-forward, naming neither the kwarg nor the config
    kv_bits = get_method(method, custom_methods).kv_cache_bits
    slot_bytes = kv_bytes_per_token(model, kv_bits)
    batch_decoding = decode_batch_size > 1
    single_path = DecodePath(decode_batch_size, 1, None).record()
    path_of: dict[int, dict] = {}

    def generations_for(chunk: list[int]) -> list[Generation]:
        if batch_decoding and question_aware:
            generations, path = generate_prefill_one_decode_many(
                model, [prompts[i] for i in chunk], press, True, max_new_tokens, stop_ids, decode_batch_size,
                min_new_tokens=min_new_tokens, make_cache=make_cache,
            )
            path_of.update({i: path.record() for i in chunk})
            return generations
        if batch_decoding and kv_bits is None:
            groups = shared_context_groups([prompts[i] for i in chunk])
            generations, path = generate_shared_contexts_together(
                model, [[prompts[chunk[i]] for i in group] for group in groups], press, max_new_tokens, stop_ids,
                decode_batch_size, min_new_tokens=min_new_tokens,
            )
            order = [chunk[i] for group in groups for i in group]
            path_of.update({i: path.record() for i in order})
            by_index = dict(zip(order, generations))
            return [by_index[i] for i in chunk]
        if batch_decoding:  # a quantised cache cannot be stacked with others: decode this group alone
            path_of.update({i: DecodePath(decode_batch_size, 1, "quantised cache: decoded at batch 1").record() for i in chunk})
        if batch_size > 1:  # only non-evicting methods get here (check_cell)
            return generate_padded_batch(
                model, [prompts[i] for i in chunk], press, tokenizer.pad_token_id or 0, max_new_tokens, stop_ids,
                make_cache=make_cache,
            )
        if len(chunk) > 1:  # question-agnostic: the chunk shares one context
            return generate_shared_context(
                model, prompts[chunk[0]].context_ids, [prompts[i].question_ids for i in chunk], press, max_new_tokens,
                stop_ids, make_cache=make_cache, min_new_tokens=min_new_tokens,
            )
        return [
            generate_one(
                model, prompts[chunk[0]], press, question_aware, max_new_tokens, stop_ids,
                make_cache=make_cache, min_new_tokens=min_new_tokens,
            )
        ]

    if question_aware or batch_size > 1:
        per_chunk = decode_batch_size if batch_decoding else batch_size
        chunks = [list(range(s, min(s + per_chunk, len(rows)))) for s in range(0, len(rows), per_chunk)]
    elif batch_decoding and kv_bits is None:
        chunks = []  # whole shared-context groups, packed until a chunk holds decode_batch_size questions
        for group in shared_context_groups(prompts):
            if chunks and len(chunks[-1]) + len(group) <= decode_batch_size:
                chunks[-1] = chunks[-1] + group
            else:
                chunks.append(list(group))
    else:
        chunks = shared_context_groups(prompts)
    warmup_seconds = 0.0
    if device.type == "cuda" and chunks:
        # The first chunk on a fresh GPU process pays lazy kernel loading, cuBLAS set-up and the decode graph's
        # capture (seconds): run it once, unmeasured, on copies of the first prompt.
        started = time.perf_counter()
        generations_for([chunks[0][0]] * len(chunks[0]))
        synchronize(device)
        warmup_seconds = time.perf_counter() - started
        path_of.clear()
        log.info("warm-up (unmeasured): %.2fs", warmup_seconds)
    decode_steps = decode_mode(model) if batch_decoding else "eager"
    bar = tqdm(total=len(rows), desc=f"{method}@{retention:.2f}", unit="ex", disable=not progress, mininterval=1.0)
    done: dict[int, Generation] = {}
    chunk_of = {index: chunk for chunk in chunks for index in chunk}
    for index, row in enumerate(rows):
        if index not in done:
            chunk = chunk_of[index]
            done.update(zip(chunk, generations_for(chunk)))
        generation, prompt = done.pop(index), prompts[index]
        yield {
            "id": row["_id"],
            "prediction": decode_answer(tokenizer, generation.token_ids),
            "references": row["answers"],
            "all_classes": row.get("all_classes"),
            "prompt_tokens": generation.prompt_tokens,
            "pressed_tokens": generation.pressed_tokens,
            "kept_tokens": generation.kept_tokens,
            "effective_retention": generation.kept_tokens / max(1, generation.pressed_tokens),
            # Held, not attended: a masked slot or a zeroed key channel is still stored (docs/methods.md).
            "kv_bytes_held": round(generation.kept_tokens * slot_bytes),
            "kv_bytes_uncompressed": round(generation.pressed_tokens * kv_bytes_per_token(model)),
            "kv_cache_bits": kv_bits,
            "generated_tokens": len(generation.token_ids),
            "truncated": prompt.truncated,
            "original_prompt_tokens": prompt.original_tokens,
            "max_context_tokens": model_settings.max_context_tokens,
            "chat_template": prompt.chat_template,
            "held_back_tokens": prompt.held_back_tokens,
            "truncation": "longbench_pred_py",
            "shared_context_questions": generation.shared_context_questions,
            "seconds": generation.seconds,
            "seconds_cover": SECONDS_COVER,
            "warmup_seconds": warmup_seconds,
            "decode_steps": decode_steps,
            "method": method,
            "construction": construction,
            "retention": retention,
            "batch_size": batch_size,
            "question_mode": question_mode,
            **path_of.pop(index, single_path),
        }
        bar.update(1)
    bar.close()

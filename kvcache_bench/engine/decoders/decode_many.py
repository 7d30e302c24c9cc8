"""Each example prefilled and compressed alone (question-aware), their compressed caches decoded together."""

from __future__ import annotations

import torch

from kvcache_bench.engine.decoders import Decoding
from kvcache_bench.engine.example_clock import ExampleClock, Lap, waits_per_example
from kvcache_bench.engine.greedy import DecodePath, Generation, greedy_decode
from kvcache_bench.engine.loading import synchronize
from kvcache_bench.engine.prefill import prefill, prefill_example
from kvcache_bench.engine.prefilled import PrefilledPrompt, prefilled_from_cache, stacking_obstacle
from kvcache_bench.engine.static_decode import decode_memory_budget, decode_together_timed
from kvcache_bench.study.prompt_tokens import PromptTokens


@torch.inference_mode()
def generate_prefill_one_decode_many(
    settings: Decoding, prompts: list[PromptTokens]
) -> tuple[list[Generation], DecodePath]:
    """Generations for ``prompts`` in order: each prefilled alone, decoded ``settings.decode_batch_size`` at a time.

    ``settings.make_cache`` makes each example's empty cache (e.g. a QuantizedCache, which is decoded at batch 1).
    An example's ``seconds`` is its own prefill plus an equal share of its decode batch's wall time. The prefills of
    a decode batch run without a wait for the GPU between them, each timed on the GPU's timeline (``ExampleClock``).
    A batch is decoded early when its compressed caches would pass ``settings.memory_budget_bytes`` (default: see
    ``decode_memory_budget``), so long prompts decode in smaller batches instead of running out of memory.
    """
    model, decode_batch_size, memory_budget_bytes = (
        settings.model,
        settings.decode_batch_size,
        settings.memory_budget_bytes,
    )
    if decode_batch_size < 1:
        raise ValueError(f"decode_batch_size must be >= 1, got {decode_batch_size}")
    budget = decode_memory_budget(model.device) if memory_budget_bytes is None else memory_budget_bytes
    pending_bytes = 0
    generations: list[Generation | None] = [None] * len(prompts)
    pending: list[tuple[int, PrefilledPrompt, Lap]] = []
    fallbacks: set[str] = set()
    largest_batch = 0

    def flush():
        nonlocal largest_batch
        if not pending:
            return
        synchronize(model.device)  # the batch's prefills end here: its decode's wall time holds none of their work
        for _, p, lap in pending:
            p.seconds = lap.seconds()
        decoded = decode_together_timed(
            model, [p for _, p, _ in pending], settings.max_new_tokens, settings.stop_ids, settings.min_new_tokens
        )
        clock.restart()  # the decode timed itself
        share, capture = decoded.shares()
        for (index, p, _), token_ids in zip(pending, decoded.token_ids):
            generations[index] = Generation(
                token_ids,
                p.prompt_tokens,
                p.kept_tokens,
                p.seconds + share,
                p.pressed_tokens,
                graph_capture_seconds=capture,
                kept_by_layer_type=p.kept_by_layer_type,
            )
        largest_batch = max(largest_batch, len(pending))
        pending.clear()

    synchronize(model.device)  # nothing queued before the cell belongs to its first example
    clock = ExampleClock(model.device)
    wait_each = waits_per_example()  # KVCACHE_BENCH_PREFILL_WAITS=per_example: the waits back, to measure them
    for index, prompt in enumerate(prompts):
        prompt_length = len(prompt.context_ids) + len(prompt.question_ids)
        batching = decode_batch_size > 1
        done = prefill_example(
            model, prompt, settings.press, settings.mode, settings.make_cache, run_held_back=not batching
        )
        held_back = (prompt.context_ids + prompt.question_ids)[done.pressed_tokens :] if batching else []
        obstacle = stacking_obstacle(model, done.cache, masks_carried=True) if batching else None
        if not batching or obstacle is not None:  # decoded alone, from the cache it already has
            last_logits = done.last_logits
            if obstacle is not None:
                fallbacks.add(obstacle)
                if held_back:  # what prefill_example would have run
                    last_logits = prefill(model, done.cache, held_back, None, start_position=done.pressed_tokens)
            token_ids = greedy_decode(settings, done.cache, last_logits, prompt_length)
            synchronize(model.device)
            seconds = clock.lap().seconds()
            generations[index] = Generation(
                token_ids,
                prompt_length,
                done.kept_tokens,
                seconds,
                done.pressed_tokens,
                kept_by_layer_type=done.kept_by_layer_type,
            )
            largest_batch = max(largest_batch, 1)
            continue
        # a masking press's masks go with the snapshot (each example is prefilled afresh, so none is needed on the
        # model again): its rows decode together, each hiding its own slots
        prefilled = prefilled_from_cache(
            model, done, prompt_length, copy=False, held_back_ids=held_back, key_masks=True
        )
        del done
        if wait_each:
            synchronize(model.device)
        lap = clock.lap()  # no wait: the host goes on to launch the next prefill while the GPU runs this one
        row_bytes = sum(k.numel() * k.element_size() * 2 for k in prefilled.keys)
        if pending and pending_bytes + row_bytes > budget:
            fallbacks.add(
                f"decode batches cut at {len(pending)} rows to stay within {budget / 2**30:.1f} GiB of caches"
            )
            flush()
            pending_bytes = 0
        pending.append((index, prefilled, lap))
        pending_bytes += row_bytes
        if len(pending) == decode_batch_size:
            flush()
            pending_bytes = 0
    flush()
    path = DecodePath(decode_batch_size, largest_batch, "; ".join(sorted(fallbacks)) or None)
    return generations, path


def decode(settings: Decoding, prompts: list[PromptTokens], others=None) -> tuple[list[Generation], DecodePath]:
    return generate_prefill_one_decode_many(settings, prompts)

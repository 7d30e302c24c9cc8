"""Batch-1 generation with a kvpress press: prefill (compressing), then greedy decoding at true positions.

Rules that keep the numbers about the method rather than the harness:
  * after eviction, generated tokens continue at the ORIGINAL prompt length in RoPE positions, not at
    the compressed cache length (kvpress's own pipeline does the same);
  * in question-agnostic mode a context shared by several questions is compressed ONCE, and each
    question is answered from that compressed cache, rolled back to it after every answer;
  * batched prefill left-pads prompts, so it is only used for the full cache (``checks.py`` refuses
    eviction with batch size > 1); with padding, positions come from the attention mask.

Module map of generation, each importing only those above it: ``loading`` (devices, models, stop
tokens), ``caches`` (cache helpers), ``prefill`` (one example's or one context's prefill),
``single_decode`` (batch-1 decoding), ``batched_decode`` (many compressed caches decoded together),
``cell_runner`` (one study cell: the generate rule's work).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from kvcache_bench.engine.caches import clear_key_masks, default_cache, mean_cache_length
from kvcache_bench.engine.loading import synchronize
from kvcache_bench.engine.prefill import (
    prefill,
    prefill_example,
    prefill_shared_context,
    press_context,
    pressed_and_trailing,
)
from kvcache_bench.study.prompts import PromptTokens
from kvcache_bench.study.question_modes import QuestionMode


@dataclass
class Generation:
    token_ids: list[int]
    prompt_tokens: int
    kept_tokens: float  # mean over layers of positions left in the cache after compression
    seconds: float
    pressed_tokens: int = 0  # how many tokens the press saw (context, or context + question but its last token)
    shared_context_questions: int = 1  # questions answered from this one compressed context
    kept_context_slots: float | None = None  # mean over layers and KV heads of slots holding context; None: not traced


def greedy_decode(
    model, cache, last_logits, next_position: int, max_new_tokens: int, stop_ids: set[int], min_new_tokens: int = 0
) -> list[int]:
    """Greedy tokens until a stop token or the length limit; token k sits at RoPE position next_position + k.

    ``min_new_tokens`` forbids stop tokens before that many tokens (LongBench's min_length for samsum).
    """
    generated: list[int] = []
    logits = last_logits
    position = next_position
    blocked = torch.tensor(sorted(stop_ids), device=model.device, dtype=torch.long) if stop_ids else None
    while True:
        if blocked is not None and len(generated) < min_new_tokens:
            logits = logits.clone()
            logits[:, blocked] = float("-inf")
        next_token = logits.argmax(dim=-1)
        generated.append(int(next_token))
        if len(generated) >= max_new_tokens or generated[-1] in stop_ids:
            return generated
        outputs = model(
            input_ids=next_token.view(1, 1),
            past_key_values=cache,
            position_ids=torch.tensor([[position]], device=model.device),
            use_cache=True,
        )
        position += 1
        logits = outputs.logits[:, -1]


@torch.inference_mode()
def generate_one(
    model,
    prompt: PromptTokens,
    press,
    mode: QuestionMode,
    max_new_tokens: int,
    stop_ids: set[int],
    *,
    make_cache: Callable[[], object] = default_cache,
    min_new_tokens: int = 0,
) -> Generation:
    """Batch-1 greedy generation for one example, compressing the prompt with ``press`` in question ``mode``."""
    start = time.perf_counter()
    cache, last_logits, kept, pressed = prefill_example(model, prompt, press, mode, make_cache)
    generated = greedy_decode(model, cache, last_logits, prompt.length, max_new_tokens, stop_ids, min_new_tokens)
    synchronize(model.device)
    return Generation(generated, prompt.length, kept, time.perf_counter() - start, pressed)


@torch.inference_mode()
def generate_shared_context(
    model,
    context_ids: list[int],
    questions: list[list[int]],
    press,
    max_new_tokens: int,
    stop_ids: set[int],
    *,
    make_cache: Callable[[], object] = default_cache,
    min_new_tokens: int = 0,
) -> list[Generation]:
    """Question-agnostic generation: compress ``context_ids`` once, answer every question from that cache.

    After each answer the cache is rolled back to the compressed context, so every question sees
    exactly what it would see had the context been compressed for it alone. The compression's time
    is shared equally among the questions.
    """
    generations = []
    prefilled = prefill_shared_context(model, context_ids, questions, press, make_cache)
    for question_ids, (cache, last_logits, kept, prefill_seconds) in zip(questions, prefilled):
        started = time.perf_counter()
        prompt_length = len(context_ids) + len(question_ids)
        generated = greedy_decode(model, cache, last_logits, prompt_length, max_new_tokens, stop_ids, min_new_tokens)
        synchronize(model.device)
        seconds = prefill_seconds + time.perf_counter() - started
        generations.append(Generation(generated, prompt_length, kept, seconds, len(context_ids), len(questions)))
    return generations


def presses_while_decoding(press) -> tuple[bool, bool] | None:
    """(press over the prefill, press over question and decoding) as kvpress's pipeline applies ``press``, for a press
    that compresses while decoding; None for one that compresses the prompt alone.

    Read from the press's classes, as the pipeline's ``_forward`` reads them: a ``DecodingPress`` (CAMPress among
    them) prefills the context without the press; a ``PrefillDecodingPress`` and a decoding ``DMSPress`` keep it
    active for the prefill too."""
    if press is None:
        return None
    from kvpress import DecodingPress, DMSPress, PrefillDecodingPress

    if isinstance(press, DecodingPress):
        return False, True
    if isinstance(press, PrefillDecodingPress) or (isinstance(press, DMSPress) and press.decoding):
        return True, True
    return None


@torch.inference_mode()
def generate_one_pressing_while_decoding(
    model,
    prompt: PromptTokens,
    press,
    mode: QuestionMode,
    max_new_tokens: int,
    stop_ids: set[int],
    *,
    make_cache: Callable[[], object] = default_cache,
    min_new_tokens: int = 0,
) -> Generation:
    """Batch-1 greedy generation with a press that compresses while decoding, as kvpress's pipeline runs it.

    The tokens ``pressed_and_trailing`` gives the press (the context, question-agnostic; context and question but
    the held-back tail, question-aware) are prefilled, under the press only where the pipeline prefills under it
    (``presses_while_decoding``); the rest of the prompt (the pipeline's question) and every greedy step then run
    inside one ``with press(model)``, at the original positions. ``kept_tokens`` is what the cache held after the
    last step and ``pressed_tokens`` every token that went through it (the prompt and the answer but its last
    token), so their ratio is the share the press left."""
    start = time.perf_counter()
    over_prefill, _ = presses_while_decoding(press)
    clear_key_masks(model)  # an earlier example's masks (a masking base press) must not hide this one's keys
    cache = make_cache()
    pressed_ids, trailing_ids = pressed_and_trailing(prompt, mode)
    last_logits = prefill(model, cache, pressed_ids, press if over_prefill else None)
    with press(model):  # not press_context: a prefill press's masks stay, as the pipeline leaves them
        if trailing_ids:
            last_logits = prefill(model, cache, trailing_ids, None, start_position=len(pressed_ids))
        generated = greedy_decode(model, cache, last_logits, prompt.length, max_new_tokens, stop_ids, min_new_tokens)
    synchronize(model.device)
    held = prompt.length + len(generated) - 1
    return Generation(generated, prompt.length, mean_cache_length(cache), time.perf_counter() - start, held)


def left_padded_batch(rows: list[list[int]], pad_token_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask of ``rows`` left-padded to the longest, as a batching harness builds them."""
    width = max(len(ids) for ids in rows)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    for row, ids in enumerate(rows):
        input_ids[row, width - len(ids) :] = torch.tensor(ids, device=device)
        mask[row, width - len(ids) :] = 1
    return input_ids, mask


@torch.inference_mode()
def generate_padded_batch(
    model,
    prompts: list[PromptTokens],
    press,
    pad_token_id: int,
    max_new_tokens: int,
    stop_ids: set[int],
    *,
    make_cache: Callable[[], object] = default_cache,
) -> list[Generation]:
    """Left-padded batched generation the way a batching harness does it: ``model.generate`` under the press.

    Correct for the full cache. With an evicting ``press`` this reproduces the padding collapse: the
    press ranks pad positions alongside real ones, and ``generate`` keeps masking the first columns of
    the (now compressed) cache as if they were still the pads. It is kept only so tests and the canary's
    report card can show that; ``checks.py`` refuses such targets.
    """
    start = time.perf_counter()
    full = [p.context_ids + p.question_ids for p in prompts]
    input_ids, mask = left_padded_batch(full, pad_token_id, model.device)
    width = input_ids.shape[1]
    cache = make_cache()
    with press_context(press, model):
        output = model.generate(
            input_ids=input_ids,
            attention_mask=mask,
            past_key_values=cache,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=pad_token_id,
            eos_token_id=sorted(stop_ids) or None,
        )
    new_tokens = output[:, width:].tolist()
    kept = mean_cache_length(cache) - (len(new_tokens[0]) - 1)  # each token but the last went into the cache
    generations = []
    seconds = (time.perf_counter() - start) / len(full)
    for ids, tokens in zip(full, new_tokens):
        stop_at = next((i for i, token in enumerate(tokens) if token in stop_ids), len(tokens) - 1)
        generations.append(Generation(tokens[: stop_at + 1], len(ids), min(kept, len(ids)), seconds, len(ids)))
    return generations


def padded_batch_answers(
    model,
    tokenizer,
    prompts: list[PromptTokens],
    press,
    batch_size: int,
    pad_token_id: int,
    max_new_tokens: int,
    stop_ids: set[int],
) -> list[str]:
    """Decoded answers of the batching harness (``generate_padded_batch``) over consecutive batches of ``prompts``."""
    answers = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        for generation in generate_padded_batch(model, chunk, press, pad_token_id, max_new_tokens, stop_ids):
            answers.append(decode_answer(tokenizer, generation.token_ids))
    return answers


def decode_answer(tokenizer, token_ids: list[int]) -> str:
    """The generated text exactly as LongBench's pred.py keeps it: special tokens skipped, nothing stripped.

    Whitespace is part of the answer: eval.py's first-line rule (``lstrip('\\n')``, then the first line)
    and code similarity read it, so stripping here would change trec/triviaqa/samsum and lcc scores.
    """
    return tokenizer.decode(token_ids, skip_special_tokens=True)

"""Generation with a kvpress press: prefill (compressing), then greedy decoding at true positions.

Rules that keep the numbers about the method rather than the harness:
  * after eviction, generated tokens continue at the ORIGINAL prompt length in RoPE positions, not at
    the compressed cache length (kvpress's own pipeline does the same);
  * in question-agnostic mode a context shared by several questions is compressed ONCE, and each
    question is answered from that compressed cache, rolled back to it after every answer;
  * batched prefill left-pads prompts, so it is only used for the full cache (``checks.py`` refuses
    eviction with batch size > 1); with padding, positions come from the attention mask.

The building blocks (``load_model``, ``prefill``, ``greedy_decode``, ``generate_one``,
``generate_shared_context``, ``CacheCheckpoint``) are plain functions so other stages can reuse them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .prompts import PromptTokens

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

LOAD_HELP = (
    "Could not load {what} from {path!r}: {error}\n"
    "  * gated weights (meta-llama/...) need a token: export HF_TOKEN=... (read from the environment only);\n"
    "  * with no network, download the weights elsewhere and set models.<name>.path to the local directory,\n"
    "    or populate the Hugging Face cache and export HF_HUB_OFFLINE=1."
)


class ModelUnavailableError(RuntimeError):
    pass


def pick_device(requested: str = "auto") -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


def load_tokenizer(path: str, trust_remote_code: bool = False):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code, token=os.environ.get("HF_TOKEN"))
    except Exception as error:
        raise ModelUnavailableError(LOAD_HELP.format(what="the tokenizer", path=path, error=error)) from error


def load_model(path: str, dtype: str, attn_implementation: str, device: torch.device, trust_remote_code: bool = False):
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(
            path,
            dtype=DTYPES[dtype],
            attn_implementation=attn_implementation,
            trust_remote_code=trust_remote_code,
            token=os.environ.get("HF_TOKEN"),
        )
    except Exception as error:
        raise ModelUnavailableError(LOAD_HELP.format(what="the model", path=path, error=error)) from error
    return model.to(device).eval()


def stop_token_ids(model, tokenizer) -> set[int]:
    """The model's own end-of-turn tokens (Llama 3.1 lists <|eot_id|> and <|eom_id|> beside EOS)."""
    configured = model.generation_config.eos_token_id
    ids = set(configured if isinstance(configured, list) else [configured] if configured is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


@dataclass
class Generation:
    token_ids: list[int]
    prompt_tokens: int
    kept_tokens: float  # mean over layers of positions left in the cache after compression
    seconds: float
    pressed_tokens: int = 0  # how many tokens the press saw (context, or context + question but its last token)
    shared_context_questions: int = 1  # questions answered from this one compressed context


def cache_lengths(cache) -> list[int]:
    return [cache.get_seq_length(layer) for layer in range(len(cache.layers))]


def mean_cache_length(cache) -> float:
    lengths = cache_lengths(cache)
    return sum(lengths) / len(lengths)


def _press_context(press, model):
    return press(model) if press is not None else contextlib.nullcontext()


def _default_cache():
    from transformers import DynamicCache

    return DynamicCache()


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def prefill(model, cache, token_ids: list[int], press=None, start_position: int = 0):
    """Run ``token_ids`` at positions start_position.. into ``cache`` (compressing if ``press``); last logits."""
    device = model.device
    if press is None and len(token_ids) > 1 and len(set(cache_lengths(cache))) > 1:
        # Layers of unequal length (PyramidKV) break the one causal mask a block of queries needs;
        # one token at a time needs no mask and computes the same thing.
        for offset, token in enumerate(token_ids):
            logits = prefill(model, cache, [token], None, start_position + offset)
        return logits
    positions = torch.arange(start_position, start_position + len(token_ids), device=device).unsqueeze(0)
    with _press_context(press, model):
        outputs = model(
            input_ids=torch.tensor([token_ids], device=device),
            past_key_values=cache,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
        )
    return outputs.logits[:, -1]


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


class CacheCheckpoint:
    """The state of a cache after compression, to roll back to after each answer.

    A DynamicCache is cut back per layer (layers may differ in length after PyramidKV-style presses).
    A QuantizedCache cannot be cut (its tokens live in quantised blocks) nor deep-copied (quanto
    tensors refuse), but its layers only ever *replace* their tensors on update, so remembering each
    layer's attributes (references, no copies) is enough to restore it.
    """

    def __init__(self, cache):
        from transformers import DynamicCache, QuantizedCache

        if type(cache) is DynamicCache:
            self._lengths = cache_lengths(cache)
            self._attributes = None
        elif isinstance(cache, QuantizedCache):
            self._lengths = None
            self._attributes = [dict(vars(layer)) for layer in cache.layers]
        else:
            raise TypeError(f"cannot roll back a {type(cache).__name__}")

    def restore(self, cache) -> None:
        if self._attributes is None:
            for layer, length in zip(cache.layers, self._lengths):
                layer.crop(length)
            return
        for layer, attributes in zip(cache.layers, self._attributes):
            vars(layer).clear()
            vars(layer).update(attributes)


@torch.inference_mode()
def prefill_example(model, prompt: PromptTokens, press, question_aware: bool, make_cache=_default_cache):
    """One example's prefill, compressing with ``press``: (cache, last logits, kept tokens, pressed tokens).

    Question-aware, the press sees context + question but the held-back tail (the chat template's
    generation suffix and any answer prefix, at least the prompt's last token); question-agnostic, it
    sees the context. What the press did not see runs afterwards on the compressed cache, at its original
    positions, as kvpress's pipeline runs the template's suffix after compressing. Holding back matters
    twice: a press must not evict the assistant header the model answers from, and the logits of a pass
    under the press come from full attention, so a first answer token taken from them would answer from
    the uncompressed prompt.
    """
    cache = make_cache()
    if question_aware:
        prompt_ids = prompt.context_ids + prompt.question_ids
        held_back = max(1, prompt.held_back_tokens)
        pressed_ids, trailing_ids = prompt_ids[:-held_back], prompt_ids[-held_back:]
    else:
        pressed_ids, trailing_ids = prompt.context_ids, prompt.question_ids
    last_logits = prefill(model, cache, pressed_ids, press)
    kept = mean_cache_length(cache)
    if trailing_ids:
        last_logits = prefill(model, cache, trailing_ids, None, start_position=len(pressed_ids))
    return cache, last_logits, kept, len(pressed_ids)


@torch.inference_mode()
def generate_one(
    model,
    prompt: PromptTokens,
    press,
    question_aware: bool,
    max_new_tokens: int,
    stop_ids: set[int],
    *,
    make_cache: Callable[[], object] = _default_cache,
    min_new_tokens: int = 0,
) -> Generation:
    """Batch-1 greedy generation for one example, compressing the prompt with ``press``."""
    start = time.perf_counter()
    cache, last_logits, kept, pressed = prefill_example(model, prompt, press, question_aware, make_cache)
    generated = greedy_decode(model, cache, last_logits, prompt.length, max_new_tokens, stop_ids, min_new_tokens)
    _synchronize(model.device)
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
    make_cache: Callable[[], object] = _default_cache,
    min_new_tokens: int = 0,
) -> list[Generation]:
    """Question-agnostic generation: compress ``context_ids`` once, answer every question from that cache.

    After each answer the cache is rolled back to the compressed context, so every question sees
    exactly what it would see had the context been compressed for it alone. The compression's time
    is shared equally among the questions.
    """
    start = time.perf_counter()
    cache = make_cache()
    context_logits = prefill(model, cache, context_ids, press)
    kept = mean_cache_length(cache)
    checkpoint = CacheCheckpoint(cache)
    _synchronize(model.device)
    compress_seconds = (time.perf_counter() - start) / max(1, len(questions))
    generations = []
    for index, question_ids in enumerate(questions):
        started = time.perf_counter()
        if index:
            checkpoint.restore(cache)
        last_logits = prefill(model, cache, question_ids, None, start_position=len(context_ids)) if question_ids else context_logits
        prompt_length = len(context_ids) + len(question_ids)
        generated = greedy_decode(model, cache, last_logits, prompt_length, max_new_tokens, stop_ids, min_new_tokens)
        _synchronize(model.device)
        seconds = compress_seconds + time.perf_counter() - started
        generations.append(Generation(generated, prompt_length, kept, seconds, len(context_ids), len(questions)))
    return generations


@torch.inference_mode()
def generate_padded_batch(
    model,
    prompts: list[PromptTokens],
    press,
    pad_token_id: int,
    max_new_tokens: int,
    stop_ids: set[int],
    *,
    make_cache: Callable[[], object] = _default_cache,
) -> list[Generation]:
    """Left-padded batched generation the way a batching harness does it: ``model.generate`` under the press.

    Correct for the full cache. With an evicting ``press`` this reproduces the padding collapse: the
    press ranks pad positions alongside real ones, and ``generate`` keeps masking the first columns of
    the (now compressed) cache as if they were still the pads. It is kept only so tests and the canary's
    report card can show that; ``checks.py`` refuses such targets.
    """
    device = model.device
    start = time.perf_counter()
    full = [p.context_ids + p.question_ids for p in prompts]
    width = max(len(ids) for ids in full)
    input_ids = torch.full((len(full), width), pad_token_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(full), width), dtype=torch.long, device=device)
    for row, ids in enumerate(full):
        input_ids[row, width - len(ids) :] = torch.tensor(ids, device=device)
        mask[row, width - len(ids) :] = 1
    cache = make_cache()
    with _press_context(press, model):
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


def decode_answer(tokenizer, token_ids: list[int]) -> str:
    """The generated text exactly as LongBench's pred.py keeps it: special tokens skipped, nothing stripped.

    Whitespace is part of the answer: eval.py's first-line rule (``lstrip('\\n')``, then the first line)
    and code similarity read it, so stripping here would change trec/triviaqa/samsum and lcc scores.
    """
    return tokenizer.decode(token_ids, skip_special_tokens=True)


@dataclass(frozen=True)
class ModelSettings:
    path: str
    dtype: str = "bfloat16"
    attn_implementation: str = "sdpa"
    trust_remote_code: bool = False
    max_context_tokens: int = 127500
    device: str = "auto"


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
):
    """Yield one prediction record per row, in row order (the ``generate`` rule's work).

    ``batch_size`` > 1 batches the prefill (left padding: full cache and kv_quant only); ``decode_batch_size``
    > 1 prefills and compresses every example alone and decodes that many compressed caches together
    (``kvcache_bench.batched_decode``: safe with eviction).
    """
    from tqdm import tqdm

    from .batched_decode import DecodePath, generate_prefill_one_decode_many, generate_shared_contexts_together
    from .checks import Cell, check_cell
    from .methods import attention_implementation_for, build_press, cache_factory_for, get_method
    from .prompts import NEWLINE_STOP_TASKS, build_prompt_tokens, extra_stop_ids

    check_cell(Cell("-", task, "-", method, question_mode, retention, batch_size, decode_batch_size))
    torch.manual_seed(seed)
    device = pick_device(model_settings.device)
    tokenizer = load_tokenizer(model_settings.path, model_settings.trust_remote_code)
    attention = attention_implementation_for(method, model_settings.attn_implementation)
    model = load_model(model_settings.path, model_settings.dtype, attention, device, model_settings.trust_remote_code)
    press = build_press(method, retention, method_kwargs, seed=seed)
    make_cache = cache_factory_for(method, model, method_kwargs)
    stop_ids = stop_token_ids(model, tokenizer) | extra_stop_ids(tokenizer, task)
    min_new_tokens = 1 if task in NEWLINE_STOP_TASKS else 0
    question_aware = question_mode == "question_aware"
    log.info("method=%s retention=%s batch=%s mode=%s device=%s attention=%s", method, retention, batch_size, question_mode, device, attention)

    prompts = [
        build_prompt_tokens(tokenizer, task, row["context"], row["input"], model_settings.max_context_tokens, row.get("answer_prefix") or "")
        for row in rows
    ]
    kv_bits = get_method(method).kv_cache_bits
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
            "method": method,
            "retention": retention,
            "batch_size": batch_size,
            "question_mode": question_mode,
            **path_of.pop(index, single_path),
        }
        bar.update(1)
    bar.close()

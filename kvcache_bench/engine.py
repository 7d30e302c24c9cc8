"""Generation with a kvpress press: prefill (compressing), then greedy decoding at true positions.

Two rules keep the numbers about the method rather than the harness:
  * after eviction, generated tokens continue at the ORIGINAL prompt length in RoPE positions, not at
    the compressed cache length (kvpress's own pipeline does the same);
  * batched prefill left-pads prompts, so it is only used for the full cache (``checks.py`` refuses
    eviction with batch size > 1); with padding, positions come from the attention mask.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
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
    kept_tokens: float  # mean over layers of prompt positions left in the cache after compression
    seconds: float


def cache_lengths(cache) -> list[int]:
    return [cache.get_seq_length(layer) for layer in range(len(cache.layers))]


def _press_context(press, model):
    return press(model) if press is not None else contextlib.nullcontext()


@torch.inference_mode()
def generate_one(model, prompt: PromptTokens, press, question_aware: bool, max_new_tokens: int, stop_ids: set[int]) -> Generation:
    """Batch-1 greedy generation for one example, compressing the prompt with ``press``."""
    from transformers import DynamicCache

    device = model.device
    start = time.perf_counter()
    cache = DynamicCache()
    if question_aware:
        pressed_ids, trailing_ids = prompt.context_ids + prompt.question_ids, []
    else:
        pressed_ids, trailing_ids = prompt.context_ids, prompt.question_ids
    prompt_length = len(prompt.context_ids) + len(prompt.question_ids)
    pressed = torch.tensor([pressed_ids], device=device)
    with _press_context(press, model):
        outputs = model(input_ids=pressed, past_key_values=cache, use_cache=True, logits_to_keep=1)
    kept = sum(cache_lengths(cache)) / len(cache.layers)
    if trailing_ids:
        positions = torch.arange(len(pressed_ids), prompt_length, device=device).unsqueeze(0)
        outputs = model(
            input_ids=torch.tensor([trailing_ids], device=device),
            past_key_values=cache,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
        )
    generated = _greedy_continue(model, cache, outputs.logits[:, -1], prompt_length, max_new_tokens, stop_ids)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return Generation(generated, prompt_length, kept, time.perf_counter() - start)


def _greedy_continue(model, cache, last_logits, next_position: int, max_new_tokens: int, stop_ids: set[int]) -> list[int]:
    next_token = last_logits.argmax(dim=-1)
    generated = [int(next_token)]
    position = next_position
    while len(generated) < max_new_tokens and generated[-1] not in stop_ids:
        outputs = model(
            input_ids=next_token.view(1, 1),
            past_key_values=cache,
            position_ids=torch.tensor([[position]], device=model.device),
            use_cache=True,
        )
        position += 1
        next_token = outputs.logits[:, -1].argmax(dim=-1)
        generated.append(int(next_token))
    return generated


@torch.inference_mode()
def generate_padded_batch(
    model, prompts: list[PromptTokens], press, pad_token_id: int, max_new_tokens: int, stop_ids: set[int]
) -> list[Generation]:
    """Left-padded batched prefill + decode (what a batching harness does).

    Correct for the full cache. With an evicting ``press`` this reproduces the padding collapse: the
    press ranks pad positions alongside real ones and the mask no longer lines up with the cache. It is
    kept only so the regression test can show that; ``checks.py`` refuses such targets.
    """
    from transformers import DynamicCache

    device = model.device
    start = time.perf_counter()
    full = [p.context_ids + p.question_ids for p in prompts]
    width = max(len(ids) for ids in full)
    input_ids = torch.full((len(full), width), pad_token_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(full), width), dtype=torch.long, device=device)
    for row, ids in enumerate(full):
        input_ids[row, width - len(ids) :] = torch.tensor(ids, device=device)
        mask[row, width - len(ids) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    with _press_context(press, model):
        outputs = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True, logits_to_keep=1)
    kept_per_layer = cache_lengths(cache)
    if press is not None and kept_per_layer[0] != width:
        # The cache shrank under the mask: a naive harness keeps a mask of ones over what survived.
        mask = torch.ones((len(full), kept_per_layer[0]), dtype=torch.long, device=device)
    next_positions = torch.tensor([len(ids) for ids in full], device=device)
    next_token = outputs.logits[:, -1].argmax(dim=-1)
    generated = [[int(t)] for t in next_token]
    finished = torch.tensor([g[0] in stop_ids for g in generated], device=device)
    for step in range(1, max_new_tokens):
        if bool(finished.all()):
            break
        mask = torch.cat([mask, torch.ones((len(full), 1), dtype=mask.dtype, device=device)], dim=-1)
        outputs = model(
            input_ids=next_token.view(-1, 1),
            attention_mask=mask,
            position_ids=(next_positions + step - 1).view(-1, 1),
            past_key_values=cache,
            use_cache=True,
        )
        next_token = outputs.logits[:, -1].argmax(dim=-1)
        for row, token in enumerate(next_token.tolist()):
            if not bool(finished[row]):
                generated[row].append(token)
                finished[row] = token in stop_ids
    seconds = (time.perf_counter() - start) / len(full)
    kept = sum(kept_per_layer) / len(kept_per_layer)
    return [Generation(g, len(ids), min(kept, len(ids)), seconds) for g, ids in zip(generated, full)]


def decode_answer(tokenizer, token_ids: list[int], stop_ids: set[int]) -> str:
    trimmed = []
    for token in token_ids:
        if token in stop_ids:
            break
        trimmed.append(token)
    return tokenizer.decode(trimmed, skip_special_tokens=True).strip()


@dataclass(frozen=True)
class ModelSettings:
    path: str
    dtype: str = "bfloat16"
    attn_implementation: str = "sdpa"
    trust_remote_code: bool = False
    max_context_tokens: int = 127500
    device: str = "auto"


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
):
    """Yield one prediction record per row, in row order (the ``generate`` rule's work)."""
    from tqdm import tqdm

    from .checks import Cell, check_cell
    from .methods import attention_implementation_for, build_press
    from .prompts import build_prompt_tokens

    check_cell(Cell("-", task, "-", method, question_mode, retention, batch_size))
    torch.manual_seed(seed)
    device = pick_device(model_settings.device)
    tokenizer = load_tokenizer(model_settings.path, model_settings.trust_remote_code)
    attention = attention_implementation_for(method, model_settings.attn_implementation)
    model = load_model(model_settings.path, model_settings.dtype, attention, device, model_settings.trust_remote_code)
    press = build_press(method, retention, method_kwargs, seed=seed)
    stop_ids = stop_token_ids(model, tokenizer)
    question_aware = question_mode == "question_aware"
    log.info("method=%s retention=%s batch=%s mode=%s device=%s attention=%s", method, retention, batch_size, question_mode, device, attention)

    prompts = [build_prompt_tokens(tokenizer, task, row["context"], row["input"], model_settings.max_context_tokens) for row in rows]
    bar = tqdm(total=len(rows), desc=f"{method}@{retention:.2f}", unit="ex", disable=not progress, mininterval=1.0)
    for start in range(0, len(rows), batch_size):
        chunk = list(range(start, min(start + batch_size, len(rows))))
        if batch_size == 1:
            generations = [generate_one(model, prompts[chunk[0]], press, question_aware, max_new_tokens, stop_ids)]
        else:
            generations = generate_padded_batch(
                model, [prompts[i] for i in chunk], press, tokenizer.pad_token_id or 0, max_new_tokens, stop_ids
            )
        for index, generation in zip(chunk, generations):
            row, prompt = rows[index], prompts[index]
            yield {
                "id": row["_id"],
                "prediction": decode_answer(tokenizer, generation.token_ids, stop_ids),
                "references": row["answers"],
                "all_classes": row.get("all_classes"),
                "prompt_tokens": generation.prompt_tokens,
                "kept_tokens": generation.kept_tokens,
                "effective_retention": generation.kept_tokens / generation.prompt_tokens
                if question_aware
                else generation.kept_tokens / max(1, len(prompt.context_ids)),
                "generated_tokens": len(generation.token_ids),
                "truncated": prompt.truncated,
                "original_prompt_tokens": prompt.original_tokens,
                "seconds": generation.seconds,
                "method": method,
                "retention": retention,
                "batch_size": batch_size,
                "question_mode": question_mode,
            }
            bar.update(1)
    bar.close()

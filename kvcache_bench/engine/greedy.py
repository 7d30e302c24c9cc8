"""Greedy decoding at batch 1, and what every decoder returns (a ``Generation`` per example, the ``DecodePath``).

Rules that keep the numbers about the method rather than the harness:
  * after eviction, generated tokens continue at the ORIGINAL prompt length in RoPE positions, not at
    the compressed cache length (kvpress's own pipeline does the same);
  * in question-agnostic mode a context shared by several questions is compressed ONCE, and each
    question is answered from that compressed cache, rolled back to it after every answer;
  * batched prefill left-pads prompts, so it is only used for the full cache (``study.cell_checks`` refuses
    eviction with batch size > 1); with padding, positions come from the attention mask.

Module map of the engine, each importing only those above it: ``loading`` (devices, models, stop tokens),
``caches``, ``prefill`` (one example's or one context's prefill), ``greedy`` (a cell's ``Decoding`` settings,
batch-1 decoding),
``prefilled`` (a compressed cache snapshot to stack), ``static_decode`` (stacked caches decoded together),
``decoders/`` (one file per strategy), ``cell_runner`` (one study cell: the generate rule's work).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from kvcache_bench.engine.caches import default_cache
from kvcache_bench.engine.layered_cache import is_layered, run_appended
from kvcache_bench.study.question_modes import QuestionMode


@dataclass(frozen=True)
class Decoding:
    """How every example of a cell is prefilled and decoded: what each decoder (``engine.decoders``) takes.

    One object rather than the same ten arguments through every strategy, so a setting added here reaches all of
    them; ``engine.cell_runner`` builds it once per cell from its ``CellRun``."""

    model: object
    press: object  # a kvpress press, or None for the full cache
    mode: QuestionMode
    max_new_tokens: int
    stop_ids: set[int]
    make_cache: Callable[[], object] = default_cache  # each example's empty cache (e.g. a QuantizedCache)
    min_new_tokens: int = 0  # stop tokens forbidden before this many (LongBench's min_length for samsum)
    pad_token_id: int = 0  # the padded batch's pad (methods that keep every token only)
    decode_batch_size: int = 1  # rows decoded together, as the cell asked
    # a decode batch is cut early when its caches would pass this many bytes (None: ``decode_memory_budget``)
    memory_budget_bytes: float | None = None


@dataclass
class Generation:
    token_ids: list[int]
    prompt_tokens: int
    kept_tokens: float  # mean over the pressed layers of positions left in the cache after compression
    seconds: float
    pressed_tokens: int = 0  # how many tokens the press saw (context, or context + question but its last token)
    shared_context_questions: int = 1  # questions answered from this one compressed context
    kept_context_slots: float | None = None  # mean over layers and KV heads of slots holding context; None: not traced
    # its share of a CUDA graph capture its decode batch paid (a shape the model met first): left out of ``seconds``
    graph_capture_seconds: float = 0.0
    # a model with sliding layers: mean slots per layer after compression, by layer type (None: every layer global)
    kept_by_layer_type: dict[str, float] | None = None


@dataclass(frozen=True)
class DecodePath:
    """Which decode path produced a record (goes into every prediction record)."""

    decode_batch_size: int  # requested
    effective_decode_batch_size: int  # largest batch actually decoded together in this cell
    fallback: str | None  # why some examples were decoded at batch 1, if any

    def record(self) -> dict:
        return {
            "decode_batch_size": self.decode_batch_size,
            "effective_decode_batch_size": self.effective_decode_batch_size,
            "decode_fallback": self.fallback,
        }


def greedy_decode(settings: Decoding, cache, last_logits, next_position: int) -> list[int]:
    """Greedy tokens until a stop token or the length limit; token k sits at RoPE position next_position + k.

    ``settings.min_new_tokens`` forbids stop tokens before that many tokens (LongBench's min_length for samsum).
    """
    model, max_new_tokens, stop_ids, min_new_tokens = (
        settings.model,
        settings.max_new_tokens,
        settings.stop_ids,
        settings.min_new_tokens,
    )
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
        if is_layered(cache):  # sliding layers: every layer's mask from positions, not slots
            outputs = run_appended(model, cache, next_token.view(1, 1), position)
        else:
            outputs = model(
                input_ids=next_token.view(1, 1),
                past_key_values=cache,
                position_ids=torch.tensor([[position]], device=model.device),
                use_cache=True,
            )
        position += 1
        logits = outputs.logits[:, -1]


def decode_answer(tokenizer, token_ids: list[int]) -> str:
    """The generated text exactly as LongBench's pred.py keeps it: special tokens skipped, nothing stripped.

    Whitespace is part of the answer: eval.py's first-line rule (``lstrip('\\n')``, then the first line)
    and code similarity read it, so stripping here would change trec/triviaqa/samsum and lcc scores.
    """
    return tokenizer.decode(token_ids, skip_special_tokens=True)

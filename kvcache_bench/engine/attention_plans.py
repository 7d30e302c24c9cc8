"""cuDNN's attention plans for every prompt length of a cell, built before the cell is timed.

On an H100 or H200, PyTorch runs a prompt's attention on cuDNN, which builds an execution plan for each new shape
(query and key lengths, strides) and keeps it in a cache of the calling thread. On an H200 that cost about 80 ms per
new prompt length: the decode-32 cell of ``config/reference-h200.yaml`` ran at 3.7 examples/s in a fresh worker
and at 5.05 in a worker that had met the same prompts (docs/perf-reference.md). That is cuDNN's set-up, paid once
per length and thread, not the method's cost, and which cell of a sweep paid it depended on the order cells ran in.

So before a cell is timed, ``build_plans`` makes, unmeasured, the attention calls the cell's prompts will make, one
per new length: the calls the warm-up's prompt pass made (``recording_prompt_attention``: no mask, as many queries as
keys, a prompt into an empty cache), on empty tensors of the new length with the same memory layout, dtype and
arguments. Those are what the plan cache is keyed on, so the cell's own calls find their plans. The kernels, and so
the numbers the cell computes, are the ones it would run anyway; only when their set-up is paid moves. A call whose
layout an empty tensor cannot reproduce (a slice of a fused projection) is left to build its plan in the cell.

``KVCACHE_BENCH_ATTENTION_PLANS=0`` leaves every plan to be built in the timed passes, as before: what a cold cell
pays, to measure against (records say which, ``attention_plans``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass

import torch

from kvcache_bench.engine.loading import synchronize

log = logging.getLogger(__name__)

PLANNED_DEVICES = ("cuda",)  # where attention builds per-shape plans (cuDNN); elsewhere there is nothing to build


def plans_mode(model) -> str:
    """Where a cell's attention plans are built (a record field): ``ahead`` of its timed passes, ``in_cell`` (switched
    off by ``KVCACHE_BENCH_ATTENTION_PLANS=0``), or ``none`` (a device that builds none)."""
    if model.device.type not in PLANNED_DEVICES:
        return "none"
    return "in_cell" if os.environ.get("KVCACHE_BENCH_ATTENTION_PLANS", "1") == "0" else "ahead"


@dataclass(frozen=True)
class TensorLayout:
    """A tensor's shape but its sequence length (dim -2), its dimensions from outermost to innermost, its dtype."""

    heads_and_width: tuple[int, ...]  # shape with dim -2 left out
    outer_to_inner: tuple[int, ...]
    dtype: torch.dtype

    @classmethod
    def of(cls, tensor: torch.Tensor) -> TensorLayout | None:
        """The tensor's layout, or None when an empty tensor of that layout would not have its strides."""
        order = tuple(sorted(range(tensor.dim()), key=lambda d: (-tensor.stride(d), d)))
        layout = cls(tensor.shape[:-2] + tensor.shape[-1:], order, tensor.dtype)
        return layout if layout.empty(tensor.shape[-2], "meta").stride() == tensor.stride() else None

    def empty(self, length: int, device) -> torch.Tensor:
        shape = (*self.heads_and_width[:-1], length, self.heads_and_width[-1])
        return torch.empty_permuted(shape, self.outer_to_inner, dtype=self.dtype, device=device)


@dataclass(frozen=True)
class PromptAttentionCall:
    """One attention call of a prompt pass, but its length: what cuDNN keys a plan on."""

    query: TensorLayout
    key: TensorLayout
    value: TensorLayout
    arguments: tuple[tuple[str, object], ...]  # is_causal, scale, enable_gqa, dropout_p as given

    def run(self, length: int, device) -> None:
        query, key, value = (layout.empty(length, device) for layout in (self.query, self.key, self.value))
        torch.nn.functional.scaled_dot_product_attention(query, key, value, **dict(self.arguments))


@contextlib.contextmanager
def recording_prompt_attention(calls: set[PromptAttentionCall]):
    """Within: every attention call of a prompt pass (no mask, as many queries as keys) is added to ``calls``."""
    original = torch.nn.functional.scaled_dot_product_attention

    def recording(query, key, value, attn_mask=None, *args, **kwargs):
        if attn_mask is None and not args and query.shape[-2] == key.shape[-2] == value.shape[-2]:
            layouts = (TensorLayout.of(query), TensorLayout.of(key), TensorLayout.of(value))
            if None not in layouts:
                calls.add(PromptAttentionCall(*layouts, tuple(sorted(kwargs.items()))))
        return original(query, key, value, attn_mask, *args, **kwargs)

    torch.nn.functional.scaled_dot_product_attention = recording
    try:
        yield calls
    finally:
        torch.nn.functional.scaled_dot_product_attention = original


def prompt_calls(model) -> set[PromptAttentionCall]:
    """The prompt attention calls recorded on ``model`` so far (its warm-ups add to them)."""
    calls = getattr(model, "_kvbench_prompt_attention", None)
    if calls is None:
        calls = model._kvbench_prompt_attention = set()
    return calls


@torch.inference_mode()
def build_plans(model, lengths: list[int]) -> float:
    """Seconds spent making ``model``'s recorded prompt attention calls at each of ``lengths`` not yet made on this
    thread, so that cuDNN's plans for them exist before a cell is timed; 0.0 off a GPU or when switched off."""
    if plans_mode(model) != "ahead":
        return 0.0
    built = getattr(model, "_kvbench_planned", None)
    if built is None:
        built = model._kvbench_planned = set()
    todo = [
        (call, length)
        for call in prompt_calls(model)
        for length in sorted(set(lengths))
        if (threading.get_ident(), call, length) not in built
    ]
    if not todo:
        return 0.0
    started = time.perf_counter()
    for call, length in todo:
        call.run(length, model.device)
        built.add((threading.get_ident(), call, length))
    synchronize(model.device)
    seconds = time.perf_counter() - started
    log.info("attention plans (unmeasured) for %d prompt lengths: %.2fs", len({n for _, n in todo}), seconds)
    return seconds

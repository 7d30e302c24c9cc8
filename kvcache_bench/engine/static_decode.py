"""Batching that cannot see padding: prefill (and compress) each example alone, then decode many together.

Batched prefill left-pads prompts, and a press ranks the pad positions alongside real tokens (the
SnapKV 48.3 -> 15.7 F1 collapse), so it stays refused with eviction. Here no pad token ever reaches a
press: every example is prefilled and compressed on its own, exactly as the batch-1 engine does. Only
then are the compressed caches stacked into one batch cache for greedy decoding:

  * each layer is left-padded to the longest row *of that layer* (PyramidKV keeps different counts per
    layer), and every layer gets its own key mask over the real compressed slots. Transformers builds one
    mask for all layers, so decoding swaps in a registered attention function that reads the layer's own
    mask (``engine.layer_masks``);
  * each row's new tokens sit at RoPE positions continuing at that example's ORIGINAL prompt length, not
    at the padded or compressed cache length;
  * a row stops on its own stop token or length limit; a finished row stays in the batch (the step's shapes,
    and so a captured CUDA graph, stay fixed) and decodes on, ignored, until every row has stopped: its own
    tokens are not changed, but it costs its share of each step (docs/fast-decode.md).

Greedy token ids equal the batch-1 engine's (``tests/test_batched_decode.py``). Caches that cannot be
stacked (a quantised cache, a press that masks keys per head) fall back to batch-1 decoding, and the
``DecodePath`` that goes into every record says so (``decoders/decode_many.py``).
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from dataclasses import dataclass

import torch

from kvcache_bench.engine.layer_masks import LAYER_MASKS_KWARG, per_layer_masks
from kvcache_bench.engine.prefilled import PrefilledPrompt

CAPACITY_STEP = 256  # slots are allocated in these steps, so batches of similar lengths share one CUDA graph


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


@dataclass(frozen=True)
class _DecodeShape:
    """Everything a captured decode step depends on besides the data in its buffers."""

    rows: int
    capacity: int
    layers: int
    kv_heads: int
    mask_heads: int  # 1: one mask per row and layer; kv_heads: one per KV head (heads keep different counts)
    head_dim: int
    dtype: torch.dtype
    max_new_tokens: int
    blocked_ids: tuple[int, ...]  # stop ids forbidden while count < min_new_tokens (empty: no blocking)
    min_new_tokens: int
    # the layers that attend through a sliding window of ``window`` positions (a model with sliding layers; empty:
    # every layer global): their masks also hide slots whose position fell out of the window
    windowed: tuple[int, ...] = ()
    window: int | None = None

    def nbytes(self) -> int:
        """Bytes a state of this shape holds on the device: keys, values, masks, windowed layers' slot positions and
        generated ids (its graph's own pool is small beside them)."""
        slots = self.rows * self.capacity
        cache = 2 * self.layers * slots * self.kv_heads * self.head_dim * self.dtype.itemsize
        positions = len(self.windowed) * slots * self.mask_heads * 8
        return cache + self.layers * slots * self.mask_heads + positions + self.rows * self.max_new_tokens * 8


class StaticDecodeState:
    """Pre-allocated decode state: every buffer a decode step reads or writes, at fixed addresses.

    Keys/values: one [rows, kv_heads, capacity, head_dim] buffer per layer (transformers' StaticLayer),
    each row's compressed slots right-aligned to ``prompt_width`` (the widest row of any layer), generated
    token k written at slot ``prompt_width + k``. One mask per layer, True on the row's real slots and on
    the generated slots written so far. A sliding-window layer also keeps the position each slot holds, and its
    mask at a step hides the slots more than ``window`` positions behind the token fed (positions, not slots: a
    compressed window's slots are scattered positions). Nothing is allocated or read back during a step, so on a
    GPU a step is captured once as a CUDA graph and replayed.
    """

    def __init__(self, shape: _DecodeShape, device: torch.device):
        from transformers.cache_utils import Cache, StaticLayer

        self.shape = shape
        self.cache = Cache(layers=[StaticLayer(shape.capacity) for _ in range(shape.layers)])
        self.cache.early_initialization(shape.rows, shape.kv_heads, shape.head_dim, shape.dtype, device)
        self.masks = [
            torch.zeros(shape.rows, shape.mask_heads, 1, shape.capacity, dtype=torch.bool, device=device)
            for _ in range(shape.layers)
        ]
        # a windowed layer's slot positions; an empty slot's is far below any window (its mask hides it anyway)
        self.slot_positions = {
            layer: torch.full((shape.rows, shape.mask_heads, shape.capacity), -(2**40), dtype=torch.long, device=device)
            for layer in shape.windowed
        }
        self.tokens = torch.zeros(shape.rows, 1, dtype=torch.long, device=device)
        self.positions = torch.zeros(shape.rows, 1, dtype=torch.long, device=device)
        self.slot = torch.zeros(1, dtype=torch.long, device=device)
        self.count = torch.zeros(1, dtype=torch.long, device=device)  # tokens generated so far
        self.generated = torch.zeros(shape.rows, shape.max_new_tokens, dtype=torch.long, device=device)
        self.blocked = torch.tensor(shape.blocked_ids, dtype=torch.long, device=device) if shape.blocked_ids else None
        self.graph = None

    def load(self, model, prefilled: list[PrefilledPrompt], stop_ids: set[int]) -> None:
        """Copy a batch's compressed caches in, run their held-back tokens, and take the first generated token.

        Held-back tokens (up to ``block`` per row) go into the slots after ``prompt_width``, right-aligned
        like the compressed slots: a row with fewer leaves the first block slots masked (pad queries there
        read the row's own cache and their outputs are dropped).
        """
        device = self.tokens.device
        prompt_width = max(k.shape[-2] for p in prefilled for k in p.keys)
        block = max(len(p.held_back_ids) for p in prefilled)
        first_generated_slot = prompt_width + block
        slots = torch.arange(self.shape.capacity, device=device)
        held_starts = torch.tensor(
            [first_generated_slot - len(p.held_back_ids) for p in prefilled], device=device
        ).view(-1, 1)
        held = (slots >= held_starts) & (slots < first_generated_slot)
        heads = self.shape.mask_heads
        # every layer's first real slot per row and head, copied to the device at once: a copy of host data waits for
        # the work queued before it, and one per layer waited for each layer's cache copies
        lengths = [
            [p.slot_lengths(layer) * (heads // len(p.slot_lengths(layer))) for p in prefilled]
            for layer in range(len(self.masks))
        ]
        all_starts = prompt_width - torch.tensor(lengths, device=device).view(len(self.masks), len(prefilled), heads, 1)
        for layer, (cache_layer, mask, starts) in enumerate(zip(self.cache.layers, self.masks, all_starts)):
            real = (slots >= starts) & (slots < prompt_width)
            # slots a masking press hid stay unread, as kvpress's fake keys hide them at batch 1
            for row, p in enumerate(prefilled):
                if p.key_masks is not None and p.key_masks[layer] is not None:
                    hidden = p.key_masks[layer]
                    real[row, :, prompt_width - hidden.shape[-1] : prompt_width] &= ~hidden
            mask.copy_((real | held.view(len(prefilled), 1, -1)).view(mask.shape))
            for row, p in enumerate(prefilled):
                length = p.keys[layer].shape[-2]
                cache_layer.keys[row, :, prompt_width - length : prompt_width] = p.keys[layer][0]
                cache_layer.values[row, :, prompt_width - length : prompt_width] = p.values[layer][0]
            if layer in self.slot_positions:
                self._load_positions(layer, prefilled, prompt_width, first_generated_slot)
        logits = torch.cat([p.last_logits for p in prefilled], dim=0)
        if block:
            block_logits = self._run_held_back(model, prefilled, prompt_width, block)
            rows = [row for row, p in enumerate(prefilled) if p.held_back_ids]
            logits[rows] = block_logits[rows].to(logits.dtype)
        if stop_ids and self.shape.min_new_tokens > 0:
            logits = logits.clone()
            logits[:, sorted(stop_ids)] = float("-inf")
        first = logits.argmax(dim=-1)
        self.generated[:, 0] = first
        self.tokens.copy_(first.view(-1, 1))
        self.positions.copy_(torch.tensor([[p.prompt_tokens] for p in prefilled], device=device))
        self.slot.fill_(first_generated_slot)
        self.count.fill_(1)

    def _load_positions(self, layer: int, prefilled: list[PrefilledPrompt], prompt_width: int, first_generated: int):
        """A windowed layer's slot positions: each row's compressed slots (right-aligned as their keys), then its
        held-back tokens' (right-aligned before the first generated slot)."""
        positions = self.slot_positions[layer]
        for row, p in enumerate(prefilled):
            held = p.slot_positions[layer]  # [kv_heads, slots]
            positions[row, :, prompt_width - held.shape[-1] : prompt_width] = held[: positions.shape[1]]
            count = len(p.held_back_ids)
            if count:
                start = p.held_back_position
                positions[row, :, first_generated - count : first_generated] = torch.arange(
                    start, start + count, device=positions.device
                )

    def _windowed_masks(self, masks: list[torch.Tensor], query_positions: torch.Tensor) -> list[torch.Tensor]:
        """``masks`` with each windowed layer's slots out of its window hidden: a query at position p sees a slot at
        position k only when p - window < k. ``query_positions``: [rows, queries]."""
        if not self.slot_positions:
            return masks
        edge = (query_positions - self.shape.window).view(query_positions.shape[0], 1, -1, 1)
        return [
            mask & (self.slot_positions[layer].unsqueeze(2) > edge) if layer in self.slot_positions else mask
            for layer, mask in enumerate(masks)
        ]

    def _run_held_back(self, model, prefilled: list[PrefilledPrompt], prompt_width: int, block: int) -> torch.Tensor:
        """One forward of every row's held-back tokens on the loaded caches: each row's last-token logits."""
        device = self.tokens.device
        # made on the host and copied once: a copy per row would wait, each time, for everything queued before it
        ids = torch.zeros(len(prefilled), block, dtype=torch.long)
        positions = torch.zeros(len(prefilled), block, dtype=torch.long)
        for row, p in enumerate(prefilled):
            count = len(p.held_back_ids)
            if count:
                ids[row, block - count :] = torch.tensor(p.held_back_ids)
                start = p.held_back_position
                positions[row, block - count :] = torch.arange(start, start + count)
        ids, positions = ids.to(device), positions.to(device)
        block_slots = torch.arange(prompt_width, prompt_width + block, device=device)
        causal = torch.arange(self.shape.capacity, device=device).view(1, 1, 1, -1) <= block_slots.view(1, 1, -1, 1)
        outputs = model(
            input_ids=ids,
            past_key_values=self.cache,
            position_ids=positions,
            cache_position=block_slots,
            use_cache=True,
            logits_to_keep=1,
            **{LAYER_MASKS_KWARG: self._windowed_masks([mask & causal for mask in self.masks], positions)},
        )
        return outputs.logits[:, -1]

    def step(self, model) -> None:
        """One decode step for every row, on device tensors only (capturable as a CUDA graph)."""
        for mask in self.masks:
            mask.index_fill_(-1, self.slot, True)
        for positions in self.slot_positions.values():  # the slot written now holds the position fed now
            positions.index_copy_(-1, self.slot, self.positions.view(-1, 1, 1).expand(-1, positions.shape[1], 1))
        outputs = model(
            input_ids=self.tokens,
            past_key_values=self.cache,
            position_ids=self.positions,
            cache_position=self.slot,
            use_cache=True,
            **{LAYER_MASKS_KWARG: self._windowed_masks(self.masks, self.positions)},
        )
        logits = outputs.logits[:, -1]
        if self.blocked is not None:
            penalty = torch.where(self.count < self.shape.min_new_tokens, float("-inf"), 0.0).to(logits.dtype)
            logits = logits.index_add(1, self.blocked, penalty.expand(logits.shape[0], self.blocked.numel()))
        next_tokens = logits.argmax(dim=-1, keepdim=True)
        self.generated.index_copy_(1, self.count, next_tokens)
        self.tokens.copy_(next_tokens)
        self.positions.add_(1)
        self.slot.add_(1)
        self.count.add_(1)

    def capture(self, model) -> float:
        """Capture ``step`` as a CUDA graph; the buffers are left as ``load`` set them. Returns its seconds."""
        torch.cuda.synchronize(self.tokens.device)
        started = time.perf_counter()
        buffers = (self.tokens, self.positions, self.slot, self.count, self.generated, *self.masks)
        buffers += tuple(self.slot_positions.values())
        saved = [t.clone() for t in buffers]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):  # outside the graph first: allocator, cuBLAS workspaces, lazy kernel loading
                self.step(model)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.step(model)
        # The warm-up steps wrote K/V into generated slots, which the real steps overwrite before reading.
        for tensor, value in zip(buffers, saved):
            tensor.copy_(value)
        self.graph = graph
        torch.cuda.synchronize(self.tokens.device)
        return time.perf_counter() - started

    def advance(self, model) -> None:
        self.graph.replay() if self.graph is not None else self.step(model)


def _graphs_wanted(model) -> bool:
    return model.device.type == "cuda" and os.environ.get("KVCACHE_BENCH_DECODE_GRAPHS", "1") != "0"


def decode_mode(model) -> str:
    """How ``decode_together`` runs its steps on this model: ``cuda_graph`` or ``eager`` (a record field)."""
    return "cuda_graph" if _graphs_wanted(model) else "eager"


# Decode states a model keeps, each with its captured graph, so a worker that serves many cells captures a batch
# shape once (a sweep's cells share a few shapes: the full batch and each cell's last, shorter one).
DECODE_STATES_SHARE = 0.1


def decode_states_budget(device: torch.device) -> float:
    """Bytes the held decode states may take: 10% of the GPU's memory; on the CPU none beyond the newest (no graph
    to keep, and a state is quick to allocate)."""
    if device.type != "cuda":
        return 0.0
    return DECODE_STATES_SHARE * torch.cuda.get_device_properties(device).total_memory


def held_decode_states(model) -> OrderedDict:
    """The model's decode states by shape, least recently used first."""
    states = getattr(model, "_kvbench_decode_states", None)
    if states is None:
        states = OrderedDict()
        model._kvbench_decode_states = states
    return states


def release_decode_states(model) -> None:
    """Let go of every decode state (and graph) the model holds."""
    held_decode_states(model).clear()


def _state_for(model, shape: _DecodeShape) -> StaticDecodeState:
    """This model's decode state for ``shape``, reused (with its graph) whenever a batch has that shape again.

    States are kept per shape, least recently used let go first once they would pass ``decode_states_budget``; a
    shape larger than the budget alone is held by itself.
    """
    states = held_decode_states(model)
    if shape in states:
        states.move_to_end(shape)
        return states[shape]
    budget = decode_states_budget(model.device) - shape.nbytes()
    while states and sum(held_shape.nbytes() for held_shape in states) > budget:
        states.popitem(last=False)  # freed before the new one is allocated: two large batches never coexist
    states[shape] = StaticDecodeState(shape, model.device)
    return states[shape]


@dataclass(frozen=True)
class TimedDecode:
    """A decode batch's tokens per row, its wall time less any graph capture, and that capture's seconds."""

    token_ids: list[list[int]]
    seconds: float
    graph_capture_seconds: float

    def shares(self) -> tuple[float, float]:
        """(decode seconds, capture seconds) of each row: an equal share of the batch's."""
        rows = max(1, len(self.token_ids))
        return self.seconds / rows, self.graph_capture_seconds / rows


def decode_together(model, prefilled: list[PrefilledPrompt], *settings, **named) -> list[list[int]]:
    """Greedy-decode stacked compressed caches; row r's token k (k >= 1) is fed at position prompt_tokens_r + k - 1.

    Every step runs on pre-allocated buffers (``StaticDecodeState``); on a GPU the step is a CUDA graph,
    captured once per batch shape and kept with the model (``_state_for``), so later batches and cells of that
    shape replay it. Tokens stay on the device and are read back every ``sync_every`` steps, only to stop early
    once every row has stopped; a row that stopped decodes on until then, and what it generated after its stop
    is discarded. Takes ``decode_together_timed``'s arguments (max_new_tokens, stop_ids, min_new_tokens, sync_every).
    """
    return decode_together_timed(model, prefilled, *settings, **named).token_ids


@torch.inference_mode()
def decode_together_timed(
    model,
    prefilled: list[PrefilledPrompt],
    max_new_tokens: int,
    stop_ids: set[int],
    min_new_tokens: int = 0,
    sync_every: int = 16,
) -> TimedDecode:
    """``decode_together`` timed on the device: a graph capture (a shape this model meets for the first time) is
    timed apart, as a one-time cost like a warm-up, not as this batch's work."""
    started = time.perf_counter()
    capture_seconds = 0.0
    widest = max(k.shape[-2] for p in prefilled for k in p.keys) + max(len(p.held_back_ids) for p in prefilled)
    first = prefilled[0].keys[0]
    blocked = tuple(sorted(stop_ids)) if stop_ids and min_new_tokens > 1 else ()
    windowed = tuple(
        layer for layer, positions in enumerate(prefilled[0].slot_positions or []) if positions is not None
    )
    # a compressed window's heads may hold different positions: one mask (and position row) per KV head then
    per_head = any(p.head_lengths is not None or p.key_masks is not None for p in prefilled) or (
        bool(windowed) and first.shape[1] > 1
    )
    mask_heads = first.shape[1] if per_head else 1
    shape = _DecodeShape(
        len(prefilled),
        _round_up(widest + max_new_tokens, CAPACITY_STEP),
        len(prefilled[0].keys),
        first.shape[1],
        mask_heads,
        first.shape[-1],
        first.dtype,
        max_new_tokens,
        blocked,
        min_new_tokens,
        windowed,
        prefilled[0].window if windowed else None,
    )
    with per_layer_masks(model):
        state = _state_for(model, shape)
        state.load(model, prefilled, stop_ids)
        if _graphs_wanted(model) and state.graph is None:
            capture_seconds = state.capture(model)
        done = 1
        while done < max_new_tokens:
            steps = min(sync_every, max_new_tokens - done)
            for _ in range(steps):
                state.advance(model)
            done += steps
            if done < max_new_tokens and stop_ids and _all_stopped(state.generated[:, :done], stop_ids):
                break
        block = state.generated[:, :done].tolist()
    generated = []
    for tokens in block:
        out = []
        for token in tokens:
            out.append(token)
            if token in stop_ids:
                break
        generated.append(out)
    if model.device.type == "cuda":
        torch.cuda.synchronize(model.device)
    return TimedDecode(generated, time.perf_counter() - started - capture_seconds, capture_seconds)


def _all_stopped(tokens: torch.Tensor, stop_ids: set[int]) -> bool:
    stops = torch.tensor(sorted(stop_ids), device=tokens.device)
    return bool(torch.isin(tokens, stops).any(dim=1).all())


DECODE_MEMORY_SHARE = 0.3


def decode_memory_budget(device: torch.device) -> float:
    """Bytes of compressed caches one decode batch may hold: a share of the GPU memory free now (none on CPU).

    A batch's caches live twice while it decodes (the prefilled copies and the decode buffers) and the
    next example's full-length prefill needs room beside the held decode buffers: 30% of what is free after
    loading the model leaves that room even for a 128k-token prefill of an 8B model on an 80 GB GPU.
    """
    if device.type != "cuda":
        return float("inf")
    free, _ = torch.cuda.mem_get_info(device)
    cached_by_torch = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return DECODE_MEMORY_SHARE * (free + cached_by_torch)

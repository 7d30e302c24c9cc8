"""SnapKV's scores without a host sync per layer, for the engine's passes under a press.

kvpress's ``SnapKVPress.score`` gives the observation window a score above every other slot, so it is always kept:
``F.pad(scores, (0, window), value=scores.max().item() + 1)``. On a GPU that ``.item()`` waits for every kernel
queued so far, once per attention layer, and the GPU then idles while the host launches the next ones: about 27 ms
of an 8B prefill's ~185 ms on an H200 (docs/perf-reference.md). ``snapkv_scores`` computes the same tensor with the
maximum left on the device: the same float64 sum (a bf16 or fp32 maximum plus one is exact in float64, as it is in
the Python float kvpress makes) rounded to the scores' dtype, as ``fill_`` rounds kvpress's value. The scores are
kvpress's bit for bit (``tests/test_sync_free_scores.py``, on kvpress's own ``score``).

Its window attention (``window_attention``) also leaves out kvpress's mask the size of the window's attention (32
heads x 64 queries x every key: ``ones_like``, ``* -inf``, ``triu``, ``+=``, four passes over ~20 MB per layer of a
5k-token 8B prompt): only the window's own keys are ever masked, so the same ``-inf`` is written there alone, and
every other weight, which kvpress adds 0 to, is left as it is (x + 0 is x). Same weights, same scores.

``sync_free_scores(press)`` puts it on every SnapKV in a press (an AdaKV or ChunkKV around one, a PyramidKV) for
the engine's pass only: kvpress's pipeline, a cell on ``engine: kvpress_pipeline``, runs kvpress's code untouched.
A subclass with a ``score`` of its own keeps it.
"""

from __future__ import annotations

import contextlib
import math
import types

import torch
from torch.nn import functional as F

from kvcache_bench.engine.press_tree import presses_in


def _snapkv_own(press, name: str) -> bool:
    """Whether ``press`` runs ``SnapKVPress``'s own method ``name``: not a subclass's, nor one set on the object."""
    from kvpress import SnapKVPress

    return name not in vars(press) and getattr(type(press), name) is getattr(SnapKVPress, name)


def window_attention(module, hidden_states, keys, window_size, position_embeddings) -> torch.Tensor:
    """``SnapKVPress.compute_window_attention`` (kvpress 0.5.5), the causal mask applied to the window's keys alone."""
    from kvpress.utils import get_prerope_query_states
    from transformers.models.llama.modeling_llama import repeat_kv, rotate_half

    groups = module.config.num_attention_heads // module.config.num_key_value_heads
    query_states = get_prerope_query_states(module, hidden_states[:, -window_size:])
    cos, sin = position_embeddings
    cos, sin = cos[:, -window_size:], sin[:, -window_size:]
    query_states = (query_states * cos.unsqueeze(1)) + (rotate_half(query_states) * sin.unsqueeze(1))
    weights = torch.matmul(query_states, repeat_kv(keys, groups).transpose(2, 3)) / math.sqrt(module.head_dim)
    # kvpress's triu(diagonal=k_len - window + 1): window query i never sees window key j > i; nothing else is masked
    later = torch.ones(window_size, window_size, dtype=torch.bool, device=weights.device).triu(1)
    weights[..., -window_size:].masked_fill_(later, float("-inf"))
    weights = torch.nn.functional.softmax(weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
    return weights[..., :-window_size]


def snapkv_scores(press, module, hidden_states, keys, values, attentions, kwargs) -> torch.Tensor:
    """``SnapKVPress.score`` (kvpress 0.5.5), the observation window's score kept on the device."""
    batch, kv_heads, k_len, _ = keys.shape
    groups = module.config.num_attention_heads // kv_heads
    window = press.window_size
    if hidden_states.shape[1] <= window:
        raise AssertionError(f"Query length {hidden_states.shape[1]} should be greater than the window size {window}")
    if attentions is not None:
        weights = attentions[..., -window:, :-window]
    else:  # kvpress's window attention, without its full-size mask (a subclass's own is its own)
        compute = window_attention if _snapkv_own(press, "compute_window_attention") else press.compute_window_attention
        weights = compute(module, hidden_states, keys, window, kwargs["position_embeddings"])
    scores = F.avg_pool1d(weights.mean(dim=-2), kernel_size=press.kernel_size, padding=press.kernel_size // 2, stride=1)
    scores = scores.view(batch, kv_heads, groups, k_len - window).mean(2)
    # float64 as kvpress's Python float. MPS has no float64; float32 gives the same value there: kvpress's float64 sum
    # of a maximum in [0, 1] and 1 is exact, so its rounding to the dtype (through float32, as fill_ does) is float32's
    wide = torch.float32 if scores.device.type == "mps" else torch.float64
    above_all = (scores.max().to(wide) + 1).to(scores.dtype)
    return torch.cat([scores, above_all.expand(batch, kv_heads, window)], dim=-1)


@contextlib.contextmanager
def sync_free_scores(press):
    """Within: every SnapKV in ``press`` that scores with kvpress's ``SnapKVPress.score`` scores with
    ``snapkv_scores``; the presses are as they were after."""
    if press is None:
        yield
        return
    from kvpress import SnapKVPress

    replaced = [inner for inner in presses_in(press) if isinstance(inner, SnapKVPress) and _snapkv_own(inner, "score")]
    for inner in replaced:
        inner.score = types.MethodType(snapkv_scores, inner)
    try:
        yield
    finally:
        for inner in replaced:
            del inner.score

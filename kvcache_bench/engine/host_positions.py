"""Cache positions whose last value the host already knows, so that a press's hook need not read it off the GPU.

kvpress decides in every attention layer's hook whether a forward pass is the prefill
(``kvpress.presses.base_press.is_prefilling``: ``(cache_position[-1] + 1 == q_len).item()``). On a GPU that
``.item()`` waits for every kernel queued so far: 32 host syncs per prefill of an 8B Llama, each leaving the GPU
idle while the host launches the next kernels (the profile in docs/perf-reference.md). The engine makes the
positions of every pass it runs under a press, so it knows that last value on the host: ``cache_positions``
builds the tensor transformers would build and remembers its last value, and ``is_prefilling`` (put in the place
of kvpress's own by ``install``) answers from it. The answer is the same by construction; a tensor the engine did
not make (a press that runs passes of its own, kvpress's pipeline) is asked the original way.
"""

from __future__ import annotations

import importlib
import weakref

import torch

# id(tensor) -> (a weak reference to it, its last value): a weak reference, so that an id reused by a later tensor
# is never mistaken for a known one
_LAST_POSITION: dict[int, tuple[weakref.ref, int]] = {}
# the kvpress modules that call is_prefilling by a name of their own (each imported it from base_press)
KVPRESS_MODULES = (
    "kvpress.presses.base_press",
    "kvpress.presses.cam_press",
    "kvpress.presses.decoding_press",
    "kvpress.presses.dms_press",
    "kvpress.presses.fastkvzip_press",
    "kvpress.presses.prefill_decoding_press",
)
_ORIGINAL = {}


def cache_positions(past_seen_tokens: int, length: int, device) -> torch.Tensor:
    """``past_seen_tokens .. past_seen_tokens + length - 1`` on ``device``, as transformers' Llama, Qwen, Mistral,
    Phi-3 and Gemma 3 build ``cache_position`` from the cache's length, its last value known to ``is_prefilling``."""
    positions = torch.arange(past_seen_tokens, past_seen_tokens + length, device=device)
    for key in [key for key, (ref, _) in _LAST_POSITION.items() if ref() is None]:
        del _LAST_POSITION[key]
    _LAST_POSITION[id(positions)] = (weakref.ref(positions), past_seen_tokens + length - 1)
    return positions


def known_last_position(cache_position) -> int | None:
    """The last value of a tensor ``cache_positions`` made (None for any other)."""
    entry = _LAST_POSITION.get(id(cache_position))
    if entry is None or entry[0]() is not cache_position:
        return None
    return entry[1]


def is_prefilling(cache_position, q_len: int) -> bool:
    """kvpress's ``is_prefilling``, without a host sync for positions the engine made."""
    last = known_last_position(cache_position)
    if last is None:
        return _ORIGINAL["is_prefilling"](cache_position, q_len)
    return last + 1 == q_len


def forward_replaced(model) -> bool:
    """Whether a press replaced the model's forward for its context (KVCompose runs the prompt a second time
    inside it, passing the caller's arguments on): cache positions given to the first pass would reach the second,
    which transformers would place after the first. Such a pass keeps transformers' own positions."""
    for module in (model, getattr(model, "model", None)):
        own = vars(module).get("forward") if module is not None else None
        # KVCompose puts back the original bound method on exit: that one is the class's own forward again
        if own is not None and getattr(own, "__func__", None) is not type(module).forward:
            return True
    return False


def install() -> None:
    """Put ``is_prefilling`` in the place of kvpress's own in every kvpress module that calls it (idempotent)."""
    for name in KVPRESS_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:  # a kvpress without this press
            continue
        current = getattr(module, "is_prefilling", None)
        if current is None or current is is_prefilling:
            continue
        _ORIGINAL.setdefault("is_prefilling", current)
        module.is_prefilling = is_prefilling

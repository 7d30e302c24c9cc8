"""GPU warm-ups: one unmeasured run per model and kind of work, not one per cell.

The first pass of a kind of work on a fresh GPU process pays lazy kernel loading, cuBLAS set-up and allocator
growth (seconds): measured, it would land on a cell's first examples. A model worker serves many cells, and once
a strategy has run with a press of some classes those costs are paid: a sweep's per-cell warm-ups were 104 s of
an 880 s needle grid. So a model warms up once per ``warm_up_kind`` (the strategy and the press's classes, nested
ones included); a decode batch shape's CUDA graph is captured once per model too, and timed apart
(``static_decode.decode_together_timed``).

The warm-up draws from torch's random generators as the measured work would (Compactor sketches from the global
one): they are put back as they were, so a cell's numbers do not depend on whether its worker warmed up in it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import torch

from kvcache_bench.engine.loading import synchronize
from kvcache_bench.engine.press_tree import presses_in

log = logging.getLogger(__name__)

WARM_UP_DEVICES = ("cuda",)  # where a first pass pays lazy set-up (the CPU has none worth a pass)


def press_classes(press) -> tuple[str, ...]:
    """The press's class and those of the presses it wraps (AdaKV's scorer, a composed press's parts), in order."""
    if press is None:
        return ()
    return tuple(f"{type(part).__module__}.{type(part).__qualname__}" for part in presses_in(press))


def warm_up_kind(work: str, press) -> tuple[str, ...]:
    """What a warm-up covers: the kind of work (a strategy, kvpress's pipeline) and the press's classes."""
    return (work, *press_classes(press))


def warm_up_once(model, kind: tuple[str, ...], run: Callable[[], object]) -> float:
    """Seconds of ``run()``, unmeasured, the first time ``model`` does ``kind`` on a GPU; 0.0 after that and on the
    CPU (nothing lazy to pay). Torch's random generators are left as they were before it."""
    if model.device.type not in WARM_UP_DEVICES:
        return 0.0
    warmed = getattr(model, "_kvbench_warmed_up", None)
    if warmed is None:
        warmed = model._kvbench_warmed_up = set()
    if kind in warmed:
        return 0.0
    cuda = model.device.type == "cuda"
    index = model.device.index if model.device.index is not None else (torch.cuda.current_device() if cuda else 0)
    with torch.random.fork_rng(devices=[index] if cuda else [], device_type=model.device.type):
        started = time.perf_counter()
        run()
        synchronize(model.device)
        seconds = time.perf_counter() - started
    warmed.add(kind)
    log.info("warm-up (unmeasured, once per model for %s): %.2fs", " + ".join(kind), seconds)
    return seconds

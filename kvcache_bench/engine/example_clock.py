"""Each example's seconds in a decode-batch cell, measured without stopping the GPU between examples.

Timing an example by waiting for the GPU at its end (``torch.cuda.synchronize``) empties the GPU's queue: the next
example's first kernels then wait for the host to launch them, and wherever the host launches more slowly than the GPU
runs (SnapKV's scoring, Liger's Triton kernels) the GPU idles, with no lead built up to cover it. On one H200 the 8B
shape's prefills under SnapKV left the GPU idle 4.5 ms per example on transformers' kernels (3 ms of it at each
example's start) and, on Liger's, 43 ms under the profiler, about 20 ms without it (tools/gpu/prefill_gaps_h200.py,
docs/perf-reference.md). So between the prefills of a decode batch nothing waits: each example's end is a CUDA event on
the GPU's own timeline, and its seconds are the time from the previous mark to it. The marks partition the GPU's
timeline, so a cell's seconds still add up to its wall time, idle included; what goes is the idle the waits caused.

On other devices (CPU) work runs as it is called, and the marks are the host's clock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Lap:
    """One example's span on the clock: from the previous mark to this example's end."""

    start: object  # a torch.cuda.Event, or perf_counter seconds
    end: object

    def seconds(self) -> float:
        """The span's seconds; on a GPU this waits for the span's end event (not for later work)."""
        if isinstance(self.end, float):
            return self.end - self.start
        self.end.synchronize()
        return self.start.elapsed_time(self.end) / 1e3


class ExampleClock:
    """Marks on the device's timeline: ``lap()`` at each example's end, ``restart()`` after work timed otherwise (a
    decode batch times itself), so that work belongs to no example's lap."""

    def __init__(self, device: torch.device):
        self.events = device.type == "cuda"
        self.restart()

    def _mark(self):
        if not self.events:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def restart(self) -> None:
        self._last = self._mark()

    def lap(self) -> Lap:
        mark = self._mark()
        lap = Lap(self._last, mark)
        self._last = mark
        return lap

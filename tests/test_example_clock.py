"""A decode-batch cell's prefills run without a wait for the GPU between them, and their seconds still add up.

Waiting for the GPU after each example left it idle while the host launched the next one (on the 8B shape on an
H200, 3 ms per example at each start on transformers' kernels; Liger's path, slower to launch, idled about 20 ms per
example; docs/perf-reference.md). The examples are now timed by marks on the GPU's own timeline (``ExampleClock``);
these tests check, on the CPU, that the marks partition the cell's time (nothing counted twice, nothing dropped) and
that the strategy no longer waits per example.
"""

from __future__ import annotations

import time
from unittest import mock

import pytest
import torch

from kvcache_bench.engine import prefill as prefill_module
from kvcache_bench.engine.decoders import decode_many
from kvcache_bench.engine.decoders.decode_many import generate_prefill_one_decode_many
from kvcache_bench.engine.example_clock import ExampleClock
from kvcache_bench.engine.greedy import Decoding
from kvcache_bench.study.question_modes import QuestionMode
from tests.test_batched_decode import NEW_TOKENS, STOP, demo_shaped_llama, press_for, random_prompts

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class FakeEvent:
    """torch.cuda.Event's timing API on the host clock: what the GPU's timeline would say if every kernel ran at once."""

    waited: list[FakeEvent] = []

    def __init__(self, enable_timing: bool = False):
        assert enable_timing, "an event made without timing cannot give elapsed_time"
        self.at = None

    def record(self):
        self.at = time.perf_counter()

    def synchronize(self):
        FakeEvent.waited.append(self)

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.at - self.at) * 1e3


def test_laps_on_the_gpu_timeline_partition_the_time_between_marks_and_wait_only_for_their_own_end():
    FakeEvent.waited = []
    with mock.patch.object(torch.cuda, "Event", FakeEvent):
        clock = ExampleClock(torch.device("cuda"))
        first = clock.lap()
        time.sleep(0.01)
        second = clock.lap()
        time.sleep(0.02)
        clock.restart()  # work timed otherwise (a decode batch) is no example's
        third = clock.lap()
    assert first.end is second.start, "each lap starts where the last one ended: no time between examples is lost"
    assert second.seconds() == pytest.approx(0.01, abs=0.008)
    assert third.seconds() < 0.01, "the 20 ms before restart() belongs to no example"
    assert FakeEvent.waited == [second.end, third.end], "a lap waits for its own end event only"


def test_a_decode_batch_cell_waits_for_the_gpu_once_per_decode_batch_not_once_per_example():
    model = demo_shaped_llama("sdpa")
    prompts = random_prompts() * 2  # 8 examples, decoded 4 at a time
    waits = []
    settings = Decoding(model, press_for("snapkv"), QuestionMode.QUESTION_AWARE, NEW_TOKENS, STOP, decode_batch_size=4)
    started = time.perf_counter()
    with mock.patch.object(decode_many, "synchronize", side_effect=lambda device: waits.append(device)):
        generations, path = generate_prefill_one_decode_many(settings, prompts)
    wall = time.perf_counter() - started
    assert path.effective_decode_batch_size == 4
    assert len(waits) == 1 + 2, "one wait before the cell, one before each decode batch: none between prefills"
    total = sum(g.seconds for g in generations)
    # the examples' seconds cover the cell: prefills by consecutive marks, decode batches by their own wall time
    assert 0.9 * wall <= total <= wall


def test_token_ids_reach_a_gpu_through_pinned_memory_without_a_wait():
    copies = []
    real_to = torch.Tensor.to

    def pin_memory(self):
        copies.append("pinned")
        return self

    def to(self, device, non_blocking=False):
        copies.append((str(device), non_blocking))
        return real_to(self, "cpu")

    with mock.patch.object(torch.Tensor, "pin_memory", pin_memory), mock.patch.object(torch.Tensor, "to", to):
        ids = prefill_module._on_device([[5, 6, 7]], torch.device("cuda"))
    assert copies == ["pinned", ("cuda", True)]
    assert ids.tolist() == [[5, 6, 7]]
    assert prefill_module._on_device([[5]], torch.device("cpu")).tolist() == [[5]]


def test_the_waits_can_be_put_back_to_measure_them_and_records_say_which_ran(monkeypatch):
    """``KVCACHE_BENCH_PREFILL_WAITS=per_example`` restores a wait after every prefill, so one checkout times both on one
    machine (leases differ by up to 17%); ``prefill_waits`` in each record tells the two runs apart."""
    from kvcache_bench.engine.example_clock import prefill_waits

    model = demo_shaped_llama("sdpa")
    settings = Decoding(model, press_for("snapkv"), QuestionMode.QUESTION_AWARE, NEW_TOKENS, STOP, decode_batch_size=4)
    results = {}
    for setting in ("per_decode_batch", "per_example"):
        monkeypatch.setenv("KVCACHE_BENCH_PREFILL_WAITS", setting)
        with mock.patch.object(decode_many, "synchronize") as waits:
            generations, _ = generate_prefill_one_decode_many(settings, random_prompts())
        results[setting] = ([g.token_ids for g in generations], waits.call_count, prefill_waits(True))
    assert results["per_decode_batch"][1:] == (1 + 1, "per_decode_batch")
    assert results["per_example"][1:] == (1 + 4 + 1, "per_example")
    assert results["per_example"][0] == results["per_decode_batch"][0], "the waits change no answer"
    assert prefill_waits(False) == "per_example", "a cell decoding one example at a time waits after each"
    monkeypatch.setenv("KVCACHE_BENCH_PREFILL_WAITS", "sometimes")
    with pytest.raises(ValueError, match="per_decode_batch, per_example"):
        prefill_waits(True)

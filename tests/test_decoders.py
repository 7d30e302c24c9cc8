"""One decoding strategy per file (engine/decoders/), as kvpress has one file per press: the registry covers every
strategy the cell runner can choose, each from the file named after it."""

from __future__ import annotations

from pathlib import Path

from kvcache_bench.engine.decoders import DECODERS, Strategy, in_prompt_order, shared_context_groups
from kvcache_bench.study.prompt_tokens import PromptTokens

DECODERS_DIR = Path(__file__).resolve().parents[1] / "kvcache_bench" / "engine" / "decoders"


def test_every_strategy_has_a_decoder_in_its_own_file():
    assert set(DECODERS) == set(Strategy)
    for strategy, decoder in DECODERS.items():
        assert decoder.__module__ == f"kvcache_bench.engine.decoders.{strategy.value}", strategy
    assert {p.stem for p in DECODERS_DIR.glob("*.py")} - {"__init__"} == {s.value for s in Strategy}


def test_groups_compress_each_shared_context_once_and_answers_come_back_in_prompt_order():
    prompts = [PromptTokens([1, 2], [7]), PromptTokens([3], [8]), PromptTokens([1, 2], [9])]
    groups = shared_context_groups(prompts)
    assert groups == [[0, 2], [1]]
    # with another question each, the same context seen with different questions is two press inputs
    assert shared_context_groups(prompts, others=[[5], [5], [6]]) == [[0], [1], [2]]
    assert in_prompt_order(groups, ["a0", "a2", "b1"]) == ["a0", "b1", "a2"]

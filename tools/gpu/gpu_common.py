"""What the GPU profilers in tools/gpu share: the checkout's package, random prompt ids, the device.

These scripts measure what is not a workflow output (where time goes, the multi-GPU plumbing); the
numbers the README reports come from rules (config/reference-h200.yaml, docs/reference-runs.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from kvcache_bench.study.prompt_tokens import PromptTokens  # noqa: E402

QUESTION_TOKENS = 32


def random_prompts(count: int, mean_tokens: int, vocab_size: int, seed: int) -> list[PromptTokens]:
    """Seeded random ids, lengths spread +-10% around ``mean_tokens`` (the last 32 are the question)."""
    generator = torch.Generator().manual_seed(seed)
    prompts = []
    for _ in range(count):
        length = int(mean_tokens * (0.9 + 0.2 * torch.rand((), generator=generator).item()))
        ids = torch.randint(3, vocab_size, (length,), generator=generator).tolist()
        prompts.append(PromptTokens(ids[:-QUESTION_TOKENS], ids[-QUESTION_TOKENS:]))
    return prompts


def device_name(device: torch.device | str) -> str:
    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def run_header(device: torch.device | str, dtype: torch.dtype | None = None) -> dict:
    """What every tool's JSON opens with: the device and torch it ran on, and its dtype."""
    header = {"device": device_name(device), "torch": torch.__version__}
    if dtype is not None:
        header["dtype"] = str(dtype)
    return header

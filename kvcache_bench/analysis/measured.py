"""Asked vs measured: the KV cache a cell really kept and the context its prompts really had.

A cell is labelled with the retention it asked for, but a press keeps whole tokens (``retentions: [1e-6]``
keeps 1 of 333, 3000 times what was asked) and ``max_context_tokens`` can cut a prompt to a sliver of its
document. Both are measured per example by the generate job (effective_retention; prompt_tokens against
original_prompt_tokens); here they become columns of the summary, and a cell far from what it asked for
is flagged in summary.md, under the figures and in the aggregate job's log.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

# A press keeps whole tokens: a few tokens' rounding is not a different experiment, a factor is.
RETENTION_TOLERANCE = 0.25  # |measured - asked| / asked above this flags the cell
MAX_CONTEXT_LOST = 0.5  # prompts that lost more than this share of their tokens to truncation, on average
MEASURED_COLUMNS = ["effective_retention", "truncated_share", "context_lost", "retention_off", "context_cut"]
# what a model with sliding-window layers ran them as (a column only in a study with such a model)
LAYER_COLUMNS = ["sliding_layers"]


def _mean(values) -> float:
    values = [float(v) for v in values if v is not None]
    return sum(values) / len(values) if values else math.nan


def measure_cell(
    records: list[dict],
    retention: float,
    tolerance: float = RETENTION_TOLERANCE,
    max_context_lost: float = MAX_CONTEXT_LOST,
) -> dict:
    """The cell's measured retention and truncation, and whether either is too far from what it asked."""
    effective = _mean(r.get("effective_retention") for r in records)
    truncated = [bool(r["truncated"]) for r in records if r.get("truncated") is not None]
    lost = _mean(
        1 - r["prompt_tokens"] / r["original_prompt_tokens"]
        for r in records
        if r.get("prompt_tokens") is not None and r.get("original_prompt_tokens")
    )
    asked = float(retention)
    # A press that compresses while decoding asks a budget in tokens (target_size), not a retention: its cells ask
    # 1.0 and keep what the budget leaves of prompt and answer, which is no departure from what they asked.
    asked_a_retention = not any(r.get("compressed_while_decoding") for r in records)
    # a model with sliding-window layers: what its press did to them, and whether the setting was the default
    sliding = sorted(
        {f"{r['sliding_layers']}{' (default)' if r.get('sliding_layers_default') else ''}" for r in records
         if r.get("sliding_layers")}
    )
    return {
        "effective_retention": round(effective, 6) if not math.isnan(effective) else math.nan,
        "truncated_share": round(sum(truncated) / len(truncated), 4) if truncated else math.nan,
        "context_lost": round(max(0.0, lost), 4) if not math.isnan(lost) else math.nan,
        "retention_off": bool(
            asked_a_retention and not math.isnan(effective) and abs(effective - asked) > tolerance * asked
        ),
        "context_cut": bool(not math.isnan(lost) and lost > max_context_lost),
        "sliding_layers": ", ".join(sliding),
    }


def _percent(value: float) -> str:
    return f"{round(100 * float(value), 4):g}%"


def cell_warnings(row) -> list[str]:
    """The flags of one summary row, as the user reads them."""
    warnings = []
    if bool(getattr(row, "retention_off", False)):
        warnings.append(f"KV kept {_percent(row.effective_retention)}, asked {_percent(row.retention)}")
    if bool(getattr(row, "context_cut", False)):
        warnings.append(
            f"context cut: prompts lost {_percent(row.context_lost)} of their tokens to truncation "
            f"({_percent(row.truncated_share)} of prompts truncated)"
        )
    return warnings


def flagged_cells(summary: pd.DataFrame) -> list[str]:
    """One line per cell measured other than it asked: '<method> <retention> <mode> batch b: <flags>'."""
    if not set(MEASURED_COLUMNS) <= set(summary.columns):
        return []
    lines = []
    for row in summary.itertuples():
        if warnings := cell_warnings(row):
            lines.append(
                f"{row.model} {row.dataset}/{row.task} {row.method} at {_percent(row.retention)} "
                f"({row.question_mode}, batch {row.batch_size}, decode {row.decode_batch_size}): {'; '.join(warnings)}"
            )
    return lines


def flagged_caption(summary: pd.DataFrame, limit: int = 6) -> str | None:
    """The text under a figure naming its cells measured other than asked (None when there are none)."""
    lines = flagged_cells(summary)
    if not lines:
        return None
    shown = lines[:limit] + (
        [f"... and {len(lines) - limit} more (results/tables/summary.md)"] if len(lines) > limit else []
    )
    return "Measured other than asked:\n" + "\n".join(shown)

"""The methods ranked at each retention: one table per (dataset, task, model, question mode) and KV cache kept.

A figure of forty methods shows their shape; this says their order. Methods are ranked by mean score (ties
share a rank), each with its 95% bootstrap interval and its paired gap to the full cache on the same examples,
and what that gap's interval says: a loss, a gain, or no detectable difference. Two methods whose intervals
overlap are not shown apart by this study, whatever their ranks. Only what the figures draw is ranked: batch 1,
the smallest decode batch, complete cells; methods that keep the whole cache or set their own budget
(retention 1.0) are ranked in a section of their own.
"""

from __future__ import annotations

import pandas as pd

from kvcache_bench.analysis.aggregate import (
    BASELINE_BATCH_SIZE,
    BASELINE_METHOD,
    CONFIDENCE,
    NO_EXAMPLE_REASON,
    SMALL_N,
    retention_percent,
)
from kvcache_bench.analysis.measured import cell_warnings
from kvcache_bench.analysis.versus import labeller, modes_in_order
from kvcache_bench.escaping import markdown_text
from kvcache_bench.methods.catalogue import CUSTOM
from kvcache_bench.methods.registry import FULL_RETENTION, METHODS

GROUP = ["dataset", "task", "model", "question_mode"]


def family_of(method: str) -> str:
    return METHODS[method].family if method in METHODS else CUSTOM


def verdict(row) -> str:
    """What the paired interval of the gap to the full cache says."""
    if pd.isna(row.diff_vs_full):
        return ""
    if row.diff_ci_high < 0:
        return "loss"
    if row.diff_ci_low > 0:
        return "gain"
    return "no detectable difference"


def ranked(cells: pd.DataFrame) -> pd.DataFrame:
    """``cells`` best first by mean score, with a competition rank (1, 2, 2, 4) and the catalogue's order among ties."""
    order = {name: index for index, name in enumerate(METHODS)}
    frame = cells.assign(_order=cells["method"].map(lambda m: order.get(m, len(order))))
    frame = frame.sort_values(["score", "_order", "method"], ascending=[False, True, True]).drop(columns="_order")
    return frame.assign(rank=frame["score"].rank(method="min", ascending=False).astype(int))


def _interval(low, high) -> str:
    return "" if pd.isna(low) else f"[{low:.2f}, {high:.2f}]"


def _table(rows: pd.DataFrame, full: pd.Series | None, label) -> list[str]:
    lines = [
        "| rank | method | family | n | score | 95% CI | Δ vs full cache | 95% CI (paired) | "
        "vs full cache | KV kept (measured) | flags |",
        "|---:|---|---|---:|---:|---|---:|---|---|---:|---|",
    ]
    if full is not None:
        lines.append(
            f"| ref | {label(BASELINE_METHOD)} | {family_of(BASELINE_METHOD)} | {full.n} | {full.score:.2f} | "
            f"{_interval(full.ci_low, full.ci_high)} |  |  |  |  |  |"
        )
    for row in rows.itertuples():
        diff = "" if pd.isna(row.diff_vs_full) else f"{row.diff_vs_full:+.2f}"
        kept = (
            ""
            if pd.isna(getattr(row, "effective_retention", float("nan")))
            else retention_percent(round(row.effective_retention, 4))
        )
        if bool(getattr(row, "retention_off", False)):
            kept += f" (asked {retention_percent(row.retention)})"
        flags = [w for w in cell_warnings(row) if not w.startswith("KV kept")]  # the column says it
        if not pd.isna(row.diff_vs_full) and row.n_paired < row.n:
            flags.append(f"paired on {row.n_paired}")
        lines.append(
            f"| {row.rank} | {label(row.method)} | {family_of(row.method)} | {row.n} | {row.score:.2f} | "
            f"{_interval(row.ci_low, row.ci_high)} | {diff} | {_interval(row.diff_ci_low, row.diff_ci_high)} | "
            f"{verdict(row)} | {kept} | {', '.join(flags)} |"
        )
    return lines


def ranking_markdown(summary: pd.DataFrame, small_n: int = SMALL_N) -> str:
    """The ranking tables people read, from the aggregate summary (``results/tables/summary.csv``), each method
    under its label (a custom press's ``label`` is a column of the summary)."""
    raw = labeller(summary)

    def label(method: str) -> str:  # the user's text, literal in a table's cell (docs/hostile-cases.md)
        return markdown_text(raw(method))

    lines = ["# Methods ranked at each retention", ""]
    lines.append(
        f"Ranked by mean score (the task's metric x100, {CONFIDENCE:.0%} bootstrap interval); ties share a rank. "
        "Δ vs full cache is the mean per-example difference to full cache (batch 1) on the same examples, with a "
        "paired-bootstrap interval: 'loss' or 'gain' when that interval excludes 0. Methods whose intervals "
        "overlap are not told apart by this study, whatever their ranks. Batch 1, the smallest decode batch, "
        "complete cells only (as the figures)."
    )
    lines.append("")
    frame = summary[summary["batch_size"] == BASELINE_BATCH_SIZE]
    if not frame.empty:
        frame = frame[frame["decode_batch_size"] == frame["decode_batch_size"].min()]
    # a cell with no example to score (other_question on contexts that each have one question): nothing to rank
    empty = frame[frame["n"] == 0]
    frame = frame[frame["n"] > 0]
    if not empty.empty:
        lines += [
            f"> **{len(empty)} cells have no example to score and are not ranked:** "
            + "; ".join(
                f"{label(r.method)} {retention_percent(r.retention)} {r.question_mode}" for r in empty.itertuples()
            )
            + f" ({NO_EXAMPLE_REASON}).",
            "",
        ]
    incomplete = frame[frame["incomplete"].astype(bool)]
    frame = frame[~frame["incomplete"].astype(bool)]
    if not incomplete.empty:
        lines += [
            f"> **{len(incomplete)} incomplete cells are not ranked:** "
            + "; ".join(
                f"{label(r.method)} {retention_percent(r.retention)} {r.question_mode} ({r.n} of {r.expected_n})"
                for r in incomplete.itertuples()
            )
            + ".",
            "",
        ]
    small = frame[frame["small_n"].astype(bool)]
    if not small.empty:
        lines += [
            f"> **Warning: {len(small)} of {len(frame)} cells have fewer than {small_n} examples "
            f"(n = {', '.join(str(n) for n in sorted(set(small['n'])))}).** Their intervals are wide and themselves "
            "unreliable: read these ranks as the harness working, not as an order of the methods.",
            "",
        ]
    if frame.empty:
        return "\n".join(lines + ["No complete batch-1 cells to rank.", ""])
    # question modes in the order a reader compares them (aware, agnostic, other, same), not alphabetical
    groups = sorted(
        frame.groupby(GROUP, sort=True),
        key=lambda item: (item[0][:3], modes_in_order(frame["question_mode"]).index(item[0][3])),
    )
    for (dataset, task, model, mode), group in groups:
        metric = group["metric"].iloc[0]
        full_rows = group[group["method"] == BASELINE_METHOD]
        full = full_rows.iloc[0] if not full_rows.empty else None
        others = group[group["method"] != BASELINE_METHOD]
        lines += [f"## {dataset} / {task} / {model} · {mode.replace('_', '-')} ({metric} x100)", ""]
        retentions = sorted(set(others["retention"]) - {FULL_RETENTION}, reverse=True)
        for retention in retentions:
            at = others[others["retention"] == retention]
            lines += [f"### {retention_percent(retention)} of the KV cache kept ({len(at)} methods)", ""]
            lines += _table(ranked(at), full, label) + [""]
        whole = others[others["retention"] == FULL_RETENTION]
        if not whole.empty:
            lines += [f"### Whole cache or their own budget (retention 1.0; {len(whole)} methods)", ""]
            lines += _table(ranked(whole), full, label) + [""]
    return "\n".join(lines)

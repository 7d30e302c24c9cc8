"""The padding probe's table and figure: what left padding does to each press, from the probe reports.

Per method, on the same prompts at batch 1 and on left-padded batches: how many answers changed, the
score change (padded - alone) x100 with its paired-bootstrap interval, and how many pad positions the
press kept in the padded rows' caches, per row and per layer (mean over KV heads; its mean and max over
padded rows and layers). The full cache is the control: padding alone must change nothing, and it keeps
every pad.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from kvcache_bench.analysis.aggregate import _interval, _round, bootstrap_mean_ci, retention_percent, rng_for
from kvcache_bench.analysis.versus import labeller
from kvcache_bench.escaping import markdown_text

PADDING_COLUMNS = [
    "task",
    "method",
    "retention",
    "batch_size",
    "examples",
    "changed_answers",
    "score_batch_1",
    "score_padded_batch",
    "diff",
    "diff_ci_low",
    "diff_ci_high",
    "padded_rows",
    "mean_pads_per_padded_row",
    "mean_pads_kept",
    "max_pads_kept",
    "share_of_pads_kept",
]


def probe_row(report: dict, seed: int, n_resamples: int) -> dict:
    """One method's line of the table from its probe report."""
    answers = report["answers"]
    differences = np.array([a["score_padded_batch"] - a["score_batch_1"] for a in answers], dtype=float)
    cell = {"task": report["task"], "method": report["method"], "retention": report["retention"]}
    low, high = bootstrap_mean_ci(differences, rng_for_probe(seed, cell), n_resamples)
    padded = [
        (pads, kept) for pads, kept in zip(report["pad_tokens_per_row"], report["pads_kept_per_row_and_layer"]) if pads
    ]
    kept_values = [k for _, per_layer in padded for k in per_layer]
    pads_total = sum(pads * len(per_layer) for pads, per_layer in padded)
    return {
        **cell,
        "batch_size": report["batch_size"],
        "examples": report["examples"],
        "changed_answers": report["changed_answers"],
        "score_batch_1": _round(100 * float(np.mean([a["score_batch_1"] for a in answers]))),
        "score_padded_batch": _round(100 * float(np.mean([a["score_padded_batch"] for a in answers]))),
        "diff": _round(100 * float(differences.mean())),
        "diff_ci_low": _round(100 * low),
        "diff_ci_high": _round(100 * high),
        "padded_rows": len(padded),
        "mean_pads_per_padded_row": _round(float(np.mean([p for p, _ in padded]))) if padded else 0.0,
        "mean_pads_kept": _round(float(np.mean(kept_values))) if kept_values else 0.0,
        "max_pads_kept": _round(float(np.max(kept_values))) if kept_values else 0.0,
        "share_of_pads_kept": _round(sum(kept_values) / pads_total) if pads_total else 0.0,
    }


def rng_for_probe(seed: int, cell: dict):
    """The probe's resampling seed: the study's seed and the probe's own cell, as aggregate's cells do."""
    full = {
        "dataset": "padding",
        "model": "",
        "question_mode": "question_aware",
        "batch_size": 0,
        "decode_batch_size": 1,
        **cell,
    }
    return rng_for(seed, full, "padding")


def padding_table(report_paths: list[str], seed: int = 0, n_resamples: int = 10_000) -> pd.DataFrame:
    rows = [probe_row(json.loads(Path(path).read_text()), seed, n_resamples) for path in report_paths]
    return pd.DataFrame(rows, columns=PADDING_COLUMNS).sort_values(["task", "method"], ignore_index=True)


def padding_markdown(table: pd.DataFrame, labels: dict[str, str] | None = None) -> str:
    """The table for reading; ``labels`` names the config's custom presses (built-ins name themselves)."""
    raw = labeller(labels=labels)

    def label(method: str) -> str:  # a custom press's label is the user's text: literal in its cell
        return markdown_text(raw(method))

    lines = [
        "# Left padding: each press at batch 1 vs on left-padded batches",
        "",
        "The same prompts through the batching harness (`model.generate` under the press, question-aware), alone "
        "and in left-padded batches (1k and 2k prompts alternated). Δ is padded - alone x100 on the same examples "
        "with a paired-bootstrap 95% interval. Pads kept: pad positions left in a padded row's cache, per layer "
        "(mean over KV heads); mean and max over padded rows and layers; share: pads kept / pads present.",
        "",
        "| method | kept | examples | changed answers | alone | padded | Δ [95% CI] | pads per padded row | "
        "pads kept mean | max | share kept |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table.itertuples():
        lines.append(
            f"| {label(r.method)} | {retention_percent(r.retention)} | {r.examples} | {r.changed_answers} | "
            f"{r.score_batch_1:.1f} | {r.score_padded_batch:.1f} | {r.diff:+.1f} "
            f"{_interval(r.diff_ci_low, r.diff_ci_high)} | {r.mean_pads_per_padded_row:.0f} | {r.mean_pads_kept:.1f} | "
            f"{r.max_pads_kept:.0f} | {r.share_of_pads_kept:.0%} |"
        )
    return "\n".join(lines) + "\n"


def padding_figure(table: pd.DataFrame, title: str | None = None, labels: dict[str, str] | None = None):
    """Left: score change with its interval per method; right: share of the pads each press kept."""
    import matplotlib.pyplot as plt

    from kvcache_bench.analysis.figures.palette import method_style
    from kvcache_bench.analysis.figures.style import STYLE

    label = labeller(labels=labels)
    table = table.sort_values("diff", ignore_index=True)
    colours = [method_style(m)["color"] for m in table["method"]]
    positions = np.arange(len(table))
    with plt.rc_context(STYLE):  # the figures' font sizes: nothing under the layout rules' 8 pt
        figure, (left, right) = plt.subplots(
            1, 2, figsize=(11, 0.45 * len(table) + 1.6), sharey=True, layout="constrained"
        )
        errors = np.array([table["diff"] - table["diff_ci_low"], table["diff_ci_high"] - table["diff"]])
        left.barh(positions, table["diff"], xerr=errors, color=colours, capsize=3)
        left.axvline(0, color="black", linewidth=0.8)
        left.set_yticks(positions, [label(m) for m in table["method"]])
        left.set_xlabel("score change, padded batch - batch 1 (x100, 95% CI)")
        right.barh(positions, 100 * table["share_of_pads_kept"], color=colours)
        right.set_xlim(0, 100)
        right.set_xlabel("pads kept in padded rows' caches (% of the pads present)")
        for y, (mean, peak) in enumerate(zip(table["mean_pads_kept"], table["max_pads_kept"])):
            right.text(1, y, f"{mean:.0f} per layer (max {peak:.0f})", va="center", fontsize=8)
        if title:
            figure.suptitle(title)
    return figure

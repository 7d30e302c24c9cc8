"""The README's findings, written from a committed run's tables so that no number in them is typed by hand.

``python tools/docs.py findings`` writes them into README.md and docs/findings.md between generated markers;
``tests/test_docs.py`` fails when a committed table and the text disagree. The tables are the study's
``summary.csv`` (paired differences to the full cache with their bootstrap intervals) and the padding probe's
table, which ``snakemake reference_figures`` rebuilds from the committed probe reports.
"""

from __future__ import annotations

import pandas as pd

from kvcache_bench.analysis.aggregate import BASELINE_METHOD, retention_percent
from kvcache_bench.escaping import markdown_text
from kvcache_bench.methods.registry import method_label as catalogue_label


def method_label(name: str) -> str:
    """The catalogue's label, or a name it does not know as the table wrote it: literal text in README's Markdown."""
    return markdown_text(catalogue_label(name))


def _signed(value: float) -> str:
    return f"{value:+.0f}".replace("-", "−")


def _interval(low: float, high: float) -> str:
    return f"[{_signed(low)}, {_signed(high)}]"


def _pressed(summary: pd.DataFrame) -> pd.DataFrame:
    return summary[(summary["method"] != BASELINE_METHOD) & ~summary["incomplete"].astype(bool)]


def needle_sentences(summary: pd.DataFrame) -> list[str]:
    """Per retention, from most kept to least: the presses whose paired interval reaches the full cache (they keep
    the needle as often as it does, as far as n can tell), else the best one, and the share of presses below."""
    baseline = summary[summary["method"] == BASELINE_METHOD].iloc[0]
    n = int(baseline["n"])
    lines = [
        f"The full cache finds {baseline['score']:.0f}% of the needles (n = {n} per cell, 95% interval "
        f"[{baseline['ci_low']:.0f}, {baseline['ci_high']:.0f}]). Each press below: % found, then its paired "
        "difference to the full cache on the same questions [95% interval]; a press *reaches* the full cache when that "
        "interval reaches 0."
    ]
    pressed = _pressed(summary)
    for retention, group in sorted(pressed.groupby("retention"), key=lambda item: -item[0]):
        group = group.sort_values(["diff_vs_full", "score"], ascending=False)
        holding = group[group["diff_ci_high"] >= 0]

        def named(rows):
            return ", ".join(
                f"{method_label(r.method)} {r.score:.0f} ({_signed(r.diff_vs_full)} "
                f"{_interval(r.diff_ci_low, r.diff_ci_high)})"
                for r in rows.itertuples()
            )

        kept = retention_percent(retention)
        if len(holding):
            lines.append(
                f"- **{kept} kept**: {len(holding)} of {len(group)} presses "
                f"{'reaches' if len(holding) == 1 else 'reach'} the full cache: {named(holding)}."
            )
        else:
            lines.append(
                f"- **{kept} kept**: none of {len(group)} reaches the full cache; the best: {named(group.head(2))}."
            )
        worst = group.tail(2).iloc[::-1]
        lines[-1] += f" Lowest: {named(worst)}."
    return lines


def padding_sentences(table: pd.DataFrame, name: str = "snapkv") -> list[str]:
    """How many pads each press kept on left-padded batches, the named press first, and what the padding cost."""
    table = table.sort_values("share_of_pads_kept", ascending=False)
    control = table[table["method"] == BASELINE_METHOD].iloc[0]
    pressed = table[table["method"] != BASELINE_METHOD]
    focus = pressed[pressed["method"] == name].iloc[0]
    batch, examples = int(focus["batch_size"]), int(focus["examples"])
    lines = [
        f"On left-padded batches of {batch} ({examples} prompts, {int(focus['padded_rows'])} of them padded, "
        f"{focus['mean_pads_per_padded_row']:.0f} pads per padded row on average), "
        f"{method_label(name)} keeping {retention_percent(focus['retention'])} kept "
        f"**{focus['share_of_pads_kept']:.0%} of the pads** ({focus['mean_pads_kept']:.0f} per layer and padded row on "
        f"average, up to {focus['max_pads_kept']:.0f}) and found {focus['score_batch_1']:.0f}% of the needles alone, "
        f"{focus['score_padded_batch']:.0f}% padded ({_signed(focus['diff'])} "
        f"{_interval(focus['diff_ci_low'], focus['diff_ci_high'])}, {int(focus['changed_answers'])} of {examples} "
        "answers changed).",
        "Share of pads kept, and the padded − alone change: "
        + "; ".join(
            f"{method_label(r.method)} {r.share_of_pads_kept:.0%} ({_signed(r.diff)} "
            f"{_interval(r.diff_ci_low, r.diff_ci_high)})"
            for r in pressed.itertuples()
        )
        + f". Full cache (the control, which keeps every pad): {_signed(control['diff'])} "
        f"{_interval(control['diff_ci_low'], control['diff_ci_high'])}, "
        f"{int(control['changed_answers'])} answers changed.",
    ]
    return lines


def question_change_sentences(summary: pd.DataFrame, per_example: pd.DataFrame, seed: int) -> list[str]:
    """Per other question mode, the presses whose score fell detectably from question-aware (paired interval above 0),
    most first, and how many did not move detectably: what a press's choice owed to the question it was shown."""
    from kvcache_bench.analysis.aggregate import question_change_cost

    full = summary[summary["method"] == BASELINE_METHOD]
    baseline = full[full["question_mode"] == "question_aware"].iloc[0]
    # the full cache compresses nothing, so its score cannot depend on the mode; say so only when it measured so
    where = "in every mode" if full["score"].nunique() == 1 else "question-aware"
    pressed = _pressed(summary)
    kept = ", ".join(sorted({retention_percent(r) for r in pressed["retention"]}))
    lines = [
        f"With {kept} kept and n = {int(baseline['n'])} per cell, the full cache finds {baseline['score']:.0f}% "
        f"[{baseline['ci_low']:.0f}, {baseline['ci_high']:.0f}] {where}. Each press: its score question-aware → in the "
        "other mode, then the paired drop aware − other [95% interval]."
    ]
    wording = {
        "other_question": "**another question chose the cache**",
        "question_agnostic": "**no question was seen**",
    }
    for against, said in wording.items():
        costs = question_change_cost(per_example, seed, against=against)
        if costs.empty:
            continue
        costs = costs.sort_values(["diff", "aware_score"], ascending=False)
        fell = costs[costs["diff_ci_low"] > 0]
        unmoved = costs[costs["diff_ci_low"] <= 0]
        named = ", ".join(
            f"{method_label(r.method)} {r.aware_score:.0f} → {r.other_score:.0f} ({_signed(r.diff)} "
            f"{_interval(r.diff_ci_low, r.diff_ci_high)})"
            for r in fell.itertuples()
        )
        identical = [
            method_label(r.method) for r in unmoved.itertuples() if r.diff == 0 and r.diff_ci_low == r.diff_ci_high == 0
        ]
        line = f"- When {said}, {len(fell)} of {len(costs)} presses fell detectably: {named or 'none'}."
        line += f" {len(unmoved)} did not detectably move"
        line += f" ({', '.join(identical)} scored the same on every question)." if identical else "."
        lines.append(line)
    return lines


def _task_name(row) -> str:
    return f"{row.task} {row.dataset.rsplit('-', 1)[-1]}" if row.dataset.startswith("ruler") else row.task


def ruler_sentences(summary: pd.DataFrame) -> list[str]:
    """What each press costs on NVIDIA's own RULER, beside the haystacks this project makes: the full cache per task
    and length, then per retention each press's mean over the RULER task-lengths in both question modes and in how
    many of them its paired interval reaches the full cache (question-aware); then the Paul Graham needle test.

    ``summary`` may join several slices' tables (one per retention): the full cache's cells, shared, count once."""
    complete = summary[~summary["incomplete"].astype(bool)].drop_duplicates(
        ["dataset", "task", "method", "question_mode", "retention"]
    )
    aware = complete[complete["question_mode"] == "question_aware"].sort_values(["task", "dataset"])
    full = aware[aware["method"] == BASELINE_METHOD]
    lines = [
        "Full cache, question-aware score ×100 [95% interval] (n): "
        + "; ".join(
            f"{_task_name(r)} {r.score:.0f} [{r.ci_low:.0f}, {r.ci_high:.0f}] ({int(r.n)})" for r in full.itertuples()
        )
        + "."
    ]
    is_ruler = complete["dataset"].str.startswith("ruler")
    ruler, needle = _pressed(complete[is_ruler]), _pressed(complete[~is_ruler])
    lengths = ruler[["dataset", "task"]].drop_duplicates().shape[0]
    if lengths:  # one paragraph with the full cache's line: the README counts its lines
        modes = complete[is_ruler & (complete["method"] == BASELINE_METHOD)].groupby("question_mode")["score"].mean()
        lines[0] += (
            f" Each press: its mean over the {lengths} RULER task-lengths, question-aware / question-agnostic (the "
            f"full cache: {modes['question_aware']:.0f} / {modes['question_agnostic']:.0f}), then in how many its "
            "paired interval (question-aware) reaches the full cache."
        )
    for retention, group in sorted(ruler.groupby("retention"), key=lambda item: -item[0]):
        means = group.pivot_table(index="method", columns="question_mode", values="score", aggfunc="mean")
        reached = (
            group[group["question_mode"] == "question_aware"]
            .groupby("method")["diff_ci_high"]
            .apply(lambda highs: int((highs >= 0).sum()))
        )
        means = means.sort_values("question_aware", ascending=False)
        lines.append(
            f"- **{retention_percent(retention)} kept**: "
            + ", ".join(
                f"{method_label(method)} {row.question_aware:.0f} / {row.question_agnostic:.0f} ({reached[method]} of "
                f"{lengths})"
                for method, row in means.iterrows()
            )
            + "."
        )
    parts = []
    for retention, group in sorted(needle.groupby("retention"), key=lambda item: -item[0]):
        rows = group[group["question_mode"] == "question_aware"].sort_values("score", ascending=False)
        gains = rows[rows["diff_ci_low"] > 0]
        above = ", ".join(
            f"{method_label(r.method)} {r.score:.0f} ({_signed(r.diff_vs_full)} "
            f"{_interval(r.diff_ci_low, r.diff_ci_high)})"
            for r in gains.itertuples()
        )
        parts.append(
            f"{retention_percent(retention)} kept, {above or 'none'} above it and "
            f"{int((rows['diff_ci_high'] < 0).sum())} of {len(rows)} below"
        )
    if parts:
        lines.append(
            f"- **Needle test** (question-aware, n = {int(needle['n'].min())} per cell), detectably against the full "
            "cache: " + "; ".join(parts) + "."
        )
    return lines


def one_mode_ruler_sentences(summary: pd.DataFrame) -> list[str]:
    """RULER in one question mode (the leaderboard's, question-agnostic): the full cache per task, then per retention
    each press's mean over the tasks run and in how many its paired interval reaches the full cache, best first. A
    masking press (AdaKV) or a press whose measured retention is off says so, as its cells are flagged.

    `summary` may join several runs' tables (one per retention, say), each with the same full-cache cells: those
    count once. A retention run on fewer tasks than the full cache names its tasks and counts only them, with the
    other retentions' presses on those same tasks beside it, so no mean is read against one over other tasks."""
    complete = summary[~summary["incomplete"].astype(bool)].sort_values(["task", "dataset"])
    full = complete[complete["method"] == BASELINE_METHOD].drop_duplicates(["dataset", "task"])
    tasks = len(full)
    lines = [
        "Full cache, score ×100 [95% interval] (n): "
        + "; ".join(f"{r.task} {r.score:.0f} [{r.ci_low:.0f}, {r.ci_high:.0f}] ({int(r.n)})" for r in full.itertuples())
        + f" (mean {full['score'].mean():.0f}). Each press: its mean over the tasks run, then in how many its "
        "paired interval reaches the full cache."
    ]
    by_retention = sorted(_pressed(complete).groupby("retention"), key=lambda item: -item[0])
    for retention, group in by_retention:
        run_tasks = sorted(group["task"].unique())
        if len(run_tasks) == tasks:
            lines.append(_ruler_retention_line(retention, group, tasks))
            continue
        full_on_them = full[full["task"].isin(run_tasks)]["score"].mean()
        where = (
            f"; on {len(run_tasks)} of the {tasks} tasks ({', '.join(run_tasks)}; the full cache's mean there "
            f"{full_on_them:.0f})"
        )
        lines.append(_ruler_retention_line(retention, group, len(run_tasks), after=where))
        lines += [
            _ruler_retention_line(other, others[others["task"].isin(run_tasks)], len(run_tasks), "  - the same tasks ")
            for other, others in by_retention
            if other != retention
        ]
    return lines


def _ruler_retention_line(
    retention: float, group: pd.DataFrame, tasks: int, before: str = "- ", after: str = ""
) -> str:
    """One retention's presses, best first: mean score over `tasks` tasks, how many reach the full cache; the line
    starts with ``before`` and ``after`` comes before its full stop."""
    means = group.groupby("method").agg(
        score=("score", "mean"),
        reached=("diff_ci_high", lambda highs: int((highs >= 0).sum())),
        kept=("effective_retention", "mean"),
    )
    means = means.sort_values("score", ascending=False)

    def measured(row) -> str:
        if abs(row.kept - retention) <= 0.05:
            return ""
        return f", KV kept {retention_percent(round(row.kept, 2))}"

    return (
        f"{before}**{retention_percent(retention)} kept**: "
        + ", ".join(
            f"{method_label(method)} {row.score:.0f} ({int(row.reached)} of {tasks}{measured(row)})"
            for method, row in means.iterrows()
        )
        + f"{after}."
    )

"""The multi-turn mode's tables and figures (issue 52): score by turn beside the full cache's, the paired drop after
turn 1, a one-question dataset named under "Not run" instead of an n = 0 row, and score against turn drawn."""

import json

import pandas as pd
import pytest

from kvcache_bench.analysis.aggregate import build_summary, per_example_frame
from kvcache_bench.analysis.metrics import score_records
from kvcache_bench.analysis.multi_turn import (
    NO_CONVERSATION_REASON,
    multi_turn_tables,
    score_by_turn,
    set_aside_multi_turn_without_examples,
    turn_one_drop,
)
from kvcache_bench.analysis.summary_markdown import summary_markdown
from kvcache_bench.escaping import markdown_text

CONVERSATIONS = 20
TURNS = 3


def cell(method, retention=0.5, mode="multi_turn", decode=1):
    return dict(dataset="ruler", task="niah_multikey_1", model="smollm2", method=method, question_mode=mode,
                retention=retention, batch_size=1, decode_batch_size=decode)


def turn_records(score_at):
    """A multi-turn cell's score records: CONVERSATIONS conversations of TURNS turns, ``score_at(conversation, turn)``
    each; example ids name the conversation and the question, as the same question is the same example in every cell."""
    return [
        {"id": f"c{c}-q{t}", "metric": "string_match", "score": score_at(c, t), "turn": t, "turns": TURNS,
         "conversation_id": f"c{c}", "multi_turn_history": "reference"}
        for c in range(CONVERSATIONS) for t in range(1, TURNS + 1)
    ]


def write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def full_cache_score(c, t):
    return 0.0 if t == 3 and c % 2 == 0 else 1.0  # 100 at turns 1 and 2, 50 at turn 3


def forgetting_press_score(c, t):
    """Right at turn 1, wrong later, but for turn 2 of odd conversations: per conversation, turn 1 minus the later
    turns' mean is 1 (even) or 0.5 (odd), 0.75 over all."""
    return 1.0 if t == 1 or (t == 2 and c % 2 == 1) else 0.0


@pytest.fixture
def study(tmp_path):
    cells = [cell("full_cache", 1.0), cell("snapkv"), cell("snapkv", mode="question_aware")]
    records = [turn_records(full_cache_score), turn_records(forgetting_press_score),
               [{"id": "q0", "metric": "string_match", "score": 1.0}]]
    files = [write(tmp_path / f"cell{k}.jsonl", r) for k, r in enumerate(records)]
    per_example = per_example_frame(files, cells)
    summary = build_summary(files, cells, seed=1, n_resamples=2000)
    return files, cells, per_example, summary


def test_per_example_keeps_each_turn_and_its_conversation_and_leaves_them_empty_for_other_modes(study, tmp_path):
    _, _, per_example, _ = study
    written = tmp_path / "per_example.csv"
    per_example.to_csv(written, index=False)
    text = written.read_text().splitlines()
    assert text[0].endswith(",turn,turns,conversation_id")
    assert any(line.endswith(",2,3,c0") for line in text)  # whole numbers, not 2.0
    assert text[-1].endswith(",,,")  # the question-aware example has no turn
    assert per_example[per_example["method"] == "snapkv"]["turn"].value_counts().to_dict() == {1: 20, 2: 20, 3: 20}


def test_the_score_job_passes_each_prediction_turn_on_and_leaves_other_records_as_they_were():
    prediction = {"id": "a", "prediction": "x", "references": ["x"]}
    turned = score_records("qasper", [{**prediction, "turn": 2, "turns": 4, "conversation_id": "c7",
                                       "multi_turn_history": "generated"}])[0]
    assert (turned["turn"], turned["turns"], turned["conversation_id"], turned["multi_turn_history"]) == (
        2, 4, "c7", "generated")
    assert "turn" not in score_records("qasper", [prediction])[0]


def test_score_by_turn_gives_each_turn_its_n_score_and_the_full_cache_at_that_turn(study):
    _, _, per_example, summary = study
    by_turn = score_by_turn(per_example, seed=1, n_resamples=2000)
    assert set(by_turn["question_mode"]) == {"multi_turn"}  # the question-aware cell has no turns
    press = by_turn[by_turn["method"] == "snapkv"].set_index("turn")
    assert list(press["score"]) == [100.0, 50.0, 0.0]
    assert list(press["full_cache_score"]) == [100.0, 100.0, 50.0]  # the full cache at that turn, not overall
    assert list(press["diff_vs_full"]) == [0.0, -50.0, -50.0]
    assert press.loc[1, ["diff_ci_low", "diff_ci_high"]].tolist() == [0.0, 0.0]
    assert press.loc[2, "diff_ci_high"] < 0  # half the conversations lose the answer at turn 2: a real loss
    summary_n = summary[(summary["method"] == "snapkv") & (summary["question_mode"] == "multi_turn")]["n"].iloc[0]
    assert press["n"].sum() == summary_n == CONVERSATIONS * TURNS
    assert (press["n_paired"] == CONVERSATIONS).all()
    full = by_turn[by_turn["method"] == "full_cache"].set_index("turn")
    assert list(full["score"]) == [100.0, 100.0, 50.0] and full["diff_vs_full"].isna().all()
    assert (by_turn["ci_low"] <= by_turn["score"]).all() and (by_turn["score"] <= by_turn["ci_high"]).all()


def test_a_turn_pairs_only_the_examples_both_cells_scored_at_it(study, tmp_path):
    files, cells, _, _ = study
    missing = [r for r in turn_records(forgetting_press_score) if r["id"] != "c0-q3"]
    per_example = per_example_frame([files[0], write(tmp_path / "partial.jsonl", missing)], cells[:2])
    at_three = score_by_turn(per_example, n_resamples=500).query("method == 'snapkv' and turn == 3").iloc[0]
    assert (at_three["n"], at_three["n_paired"]) == (19, 19)
    assert at_three["full_cache_score"] == pytest.approx(100 * 10 / 19, abs=0.01)  # c0 (a 0 at turn 3) left out: 10 of 19


def test_the_drop_after_turn_1_is_paired_within_conversations_and_its_interval_excludes_0_when_a_press_forgets(study):
    _, _, per_example, _ = study
    drop = turn_one_drop(per_example, seed=1, n_resamples=2000).set_index("method")
    press = drop.loc["snapkv"]
    assert (press["n_conversations"], press["turn_one_score"], press["later_turns_score"], press["drop"]) == (
        20, 100.0, 25.0, 75.0)
    assert 50.0 <= press["drop_ci_low"] and press["drop_ci_low"] > 0 and press["drop_ci_high"] <= 100.0
    full = drop.loc["full_cache"]
    assert (full["turn_one_score"], full["later_turns_score"], full["drop"]) == (100.0, 75.0, 25.0)
    assert full["drop_ci_low"] <= 25.0 <= full["drop_ci_high"]


def test_a_press_that_holds_every_turn_shows_no_drop(tmp_path):
    steady = per_example_frame([write(tmp_path / "s.jsonl", turn_records(lambda c, t: float(c % 2)))], [cell("knorm")])
    row = turn_one_drop(steady, n_resamples=500).iloc[0]
    assert (row["drop"], row["drop_ci_low"], row["drop_ci_high"]) == (0.0, 0.0, 0.0)


def test_a_conversation_without_a_later_turn_has_no_drop(tmp_path):
    records = [r for r in turn_records(forgetting_press_score) if r["turn"] == 1 or r["conversation_id"] != "c0"]
    per_example = per_example_frame([write(tmp_path / "p.jsonl", records)], [cell("snapkv")])
    assert turn_one_drop(per_example, n_resamples=200).iloc[0]["n_conversations"] == CONVERSATIONS - 1


def test_summary_md_gives_the_turns_and_the_drop_in_their_own_sections_labels_as_literal_text(study, tmp_path):
    files, cells, _, _ = study
    labels = {"snapkv": "Snap|KV <b>"}
    per_example = per_example_frame(files, cells, labels)
    summary = build_summary(files, cells, [60, 80, 1], seed=1, n_resamples=500, labels=labels)  # SnapKV: 60 of 80
    markdown = summary_markdown(summary, multi_turn=multi_turn_tables(per_example, seed=1, n_resamples=500))
    by_turn = markdown.split("## Multi-turn: score by turn", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in by_turn.splitlines() if line.startswith("| Snap")]
    assert [cells_of(line)[4:7] for line in rows] == [["1", "20", "100.00"], ["2", "20", "50.00"], ["3", "20", "0.00"]]
    assert [cells_of(line)[8:10] for line in rows] == [["100.00", "+0.00"], ["100.00", "-50.00"], ["50.00", "-50.00"]]
    assert rows[0].startswith(f"| {markdown_text(labels['snapkv'])} | 50% |") and "<b>" not in markdown  # literal text
    drop = markdown.split("## Multi-turn: drop from turn 1 to the later turns", 1)[1].split("\n## ", 1)[0]
    press = next(cells_of(line) for line in drop.splitlines() if line.startswith("| Snap"))
    assert press[4:8] == ["20", "100.00", "25.00", "+75.00"]
    # flagged as the cells' tables are: 20 examples a turn (and 20 conversations) is under 30, SnapKV is incomplete
    assert [cells_of(line)[-1] for line in rows] == ["INCOMPLETE cell, small n (< 30)"] * 3
    assert press[-1] == "INCOMPLETE cell, small n (< 30 conversations)"
    full = next(cells_of(line) for line in by_turn.splitlines() if line.startswith("| Full cache"))
    assert full[-1] == "small n (< 30)"
    assert "Multi-turn" not in summary_markdown(summary)  # nothing asked, nothing written


def cells_of(line: str) -> list[str]:
    """A Markdown table row's cells ('\\|' is a literal bar inside a cell)."""
    return [c.strip() for c in line.replace("\\|", "\x00").strip("|").split("|")]


def test_a_multi_turn_cell_with_no_example_is_not_run_with_its_reason_never_an_n_0_row(study, tmp_path):
    files, cells, _, _ = study
    empty = write(tmp_path / "empty.jsonl", [])
    asked = [*files, empty, empty]
    every_cell = [*cells, cell("knorm"), cell("knorm", mode="other_question")]
    kept = set_aside_multi_turn_without_examples(asked, every_cell, [60] * 5, [3, 3, 1, 0, 0])
    assert kept.cells == [*cells, cell("knorm", mode="other_question")]  # other_question keeps its flagged row
    assert kept.score_files == [*files, empty] and kept.expected_n == [60] * 4
    assert kept.not_run == [{"target": "ruler/niah_multikey_1/smollm2/knorm/multi_turn/retention-0.50_batch-1_decode-1",
                             "problems": [NO_CONVERSATION_REASON]}]
    summary = build_summary(kept.score_files, kept.cells, kept.expected_n, n_resamples=200)
    assert not ((summary["question_mode"] == "multi_turn") & (summary["n"] == 0)).any()
    markdown = summary_markdown(summary, not_run=kept.not_run)
    not_run = markdown.split("## Not run: 1 cell(s)", 1)[1]
    assert "`ruler/niah_multikey_1/smollm2/knorm/multi_turn/retention-0.50_batch-1_decode-1`" in not_run
    assert "needs contexts with two or more questions" in not_run
    assert "| Knorm | multi-turn |" not in markdown


def test_a_multi_turn_example_without_its_turn_is_refused_rather_than_dropped(tmp_path):
    records = turn_records(forgetting_press_score)
    del records[4]["turn"]
    per_example = per_example_frame([write(tmp_path / "p.jsonl", records)], [cell("snapkv")])
    with pytest.raises(ValueError, match="1 multi_turn example"):
        score_by_turn(per_example)


def test_tables_of_a_study_without_multi_turn_are_empty(tmp_path):
    per_example = per_example_frame([write(tmp_path / "q.jsonl", [{"id": "q", "metric": "m", "score": 1.0}])],
                                    [cell("snapkv", mode="question_aware")])
    tables = multi_turn_tables(per_example)
    assert tables.empty and tables.drop.empty
    assert isinstance(tables.by_turn, pd.DataFrame)


# ----------------------------------------------------------------------------- the figures


def drawn_lines(figure):
    """{label: y values} of every labelled line of every panel, and the panels' titles."""
    from matplotlib.axes import Axes

    axes = [ax for ax in figure.findobj(Axes) if ax.get_visible()]
    lines = {}
    for ax in axes:
        for line in ax.get_lines():
            if not line.get_label().startswith("_"):
                lines.setdefault(line.get_label(), []).append(list(line.get_ydata()))
    return lines, [ax.get_title() for ax in axes]


@pytest.fixture
def drawn_study(study, tmp_path):
    """The study with a second retention: SnapKV at 25% forgets everything after turn 1."""
    files, cells, _, _ = study
    files = [*files, write(tmp_path / "quarter.jsonl", turn_records(lambda c, t: float(t == 1)))]
    cells = [*cells, cell("snapkv", 0.25)]
    per_example = per_example_frame(files, cells)
    summary = build_summary(files, cells, [60, 60, 1, 60], seed=1, n_resamples=500)
    return score_by_turn(per_example, seed=1, n_resamples=500), summary


def test_the_figure_draws_each_press_over_the_turns_against_the_full_cache_at_each_turn(drawn_study):
    import matplotlib.pyplot as plt

    from kvcache_bench.analysis.figures.multi_turn import score_by_turn as score_by_turn_figure
    from kvcache_bench.analysis.layout import layout_report

    by_turn, summary = drawn_study
    figure = score_by_turn_figure(by_turn, summary, title="t")
    lines, titles = drawn_lines(figure)
    # one panel per retention, most kept first; the full cache's reference in each, at its score at each turn
    assert titles == ["50% of the KV cache kept · n = 20 per turn", "25% of the KV cache kept · n = 20 per turn"]
    assert lines["Full cache (100% kept, batch 1) at each turn"] == [[100.0, 100.0, 50.0]] * 2
    assert lines["SnapKV"] == [[100.0, 50.0, 0.0], [100.0, 0.0, 0.0]]
    assert layout_report(figure)["problems"] == []
    plt.close("all")


def test_the_figure_leaves_out_a_cell_the_summary_flags_incomplete(drawn_study):
    import matplotlib.pyplot as plt

    from kvcache_bench.analysis.figures.multi_turn import score_by_turn as score_by_turn_figure

    by_turn, summary = drawn_study
    summary.loc[(summary["method"] == "snapkv") & (summary["retention"] == 0.25), "incomplete"] = True
    lines, titles = drawn_lines(score_by_turn_figure(by_turn, summary))
    assert titles == ["50% of the KV cache kept · n = 20 per turn"] and lines["SnapKV"] == [[100.0, 50.0, 0.0]]
    plt.close("all")


def test_a_study_with_no_multi_turn_cell_to_draw_gets_a_sentence(drawn_study):
    import matplotlib.pyplot as plt

    from kvcache_bench.analysis.figures.multi_turn import NO_MULTI_TURN_CELLS
    from kvcache_bench.analysis.figures.multi_turn import score_by_turn as score_by_turn_figure

    by_turn, summary = drawn_study
    figure = score_by_turn_figure(by_turn.iloc[0:0], summary)
    assert NO_MULTI_TURN_CELLS in "\n".join(t.get_text() for t in figure.findobj(lambda a: type(a).__name__ == "Text"))
    plt.close("all")


def test_the_question_change_figure_gains_the_multi_turn_mode(drawn_study):
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgb

    from kvcache_bench.analysis.figures.palette import QUESTION_MODE_STYLES
    from kvcache_bench.analysis.figures.question_change import question_change
    from kvcache_bench.analysis.versus import modes_in_order

    assert modes_in_order(["multi_turn", "other_question", "question_aware"]) == [
        "question_aware", "other_question", "multi_turn"]
    _, summary = drawn_study
    rows = [
        dict(cell("snapkv", mode=mode), id=f"c{c}-q{t}", metric="string_match", score=score, label="SnapKV")
        for mode, score_at in (("question_aware", lambda c, t: 1.0), ("multi_turn", forgetting_press_score))
        for c in range(CONVERSATIONS) for t in range(1, TURNS + 1) for score in [score_at(c, t)]
    ]
    aware = summary[summary["question_mode"] == "multi_turn"].assign(question_mode="question_aware")
    figure = question_change(pd.concat([summary, aware]), pd.DataFrame(rows), n_resamples=300)
    multi = to_rgb(QUESTION_MODE_STYLES["multi_turn"]["color"])
    differences = [
        container.lines[0].get_xdata()
        for ax in figure.axes + [a for sub in figure.subfigs for a in sub.get_axes()]
        for container in ax.containers
        if hasattr(container, "lines") and to_rgb(container.lines[0].get_color()) == multi
    ]
    # question-aware minus multi-turn on the same examples: 1 - 1/2 of the turns right, per example
    assert any(list(x) == pytest.approx([50.0]) for x in differences)
    assert "multi-turn (every turn of a conversation on one cache)" in [
        t.get_text() for t in figure.findobj(lambda a: type(a).__name__ == "Text")]
    plt.close("all")


# ----------------------------------------------------------------------------- the jobs, end to end


def run_script(name, job):
    import runpy
    from pathlib import Path

    runpy.run_path(str(Path(__file__).resolve().parents[1] / "scripts" / name), init_globals={"snakemake": job})


def run_aggregate(study, tables):
    """scripts/aggregate.py on the study's score files and a multi-turn cell with no example, its tables in
    ``tables``: {output name: path}."""
    from kvcache_bench.manifest import write_manifest
    from kvcache_bench.workflow import ScriptJob

    files, cells, _, _ = study
    tables.mkdir(parents=True)
    empty = write(tables.parent / "one_question.jsonl", [])  # multi_turn on contexts of one question each
    files, cells = [*files, empty], [*cells, cell("knorm")]
    for path, asked in zip(files, cells):
        write_manifest(path, asked)
    output = {name: str(tables / file) for name, file in (
        ("summary", "summary.csv"), ("per_example", "per_example.csv"), ("markdown", "summary.md"),
        ("multi_turn_by_turn", "multi_turn_by_turn.csv"), ("multi_turn_drop", "multi_turn_drop.csv"))}
    params = dict(cells=cells, expected_n=[60, 60, 1, 60], not_run=[], predictions_only=[], seed=1, small_n=30,
                  n_resamples=300, labels={})
    run_script("aggregate.py", ScriptJob({"scores": files}, output, params, []))
    return output


def test_the_aggregate_job_writes_the_multi_turn_tables_with_manifests_and_the_figure_job_reads_them_verified(
    study, tmp_path
):
    import kvcache_bench.analysis.figures  # noqa: F401 (matplotlib's Agg backend, as the figure job has it)
    from kvcache_bench.manifest import ManifestMismatchError, verify_against_manifest
    from kvcache_bench.workflow import ScriptJob

    tables = tmp_path / "tables"
    output = run_aggregate(study, tables)
    by_turn = pd.read_csv(output["multi_turn_by_turn"])
    assert by_turn.query("method == 'snapkv'")["score"].tolist() == [100.0, 50.0, 0.0]
    assert pd.read_csv(output["multi_turn_drop"]).query("method == 'snapkv'")["drop"].iloc[0] == 75.0
    for path in output.values():
        verify_against_manifest(path)  # each table beside its manifest, which records its bytes
    markdown = (tables / "summary.md").read_text()
    assert "## Multi-turn: score by turn" in markdown and NO_CONVERSATION_REASON in markdown
    assert "knorm" not in pd.read_csv(output["summary"])["method"].tolist()  # not run, not an n = 0 row

    figure = dict(png=str(tmp_path / "multi_turn.png"), svg=str(tmp_path / "multi_turn.svg"))
    figure_params = dict(title="t", band_alpha=0.15, highlight={}, strongest=3)
    inputs = {"summary": output["summary"], "by_turn": output["multi_turn_by_turn"]}
    run_script("figure_multi_turn.py", ScriptJob(inputs, figure, figure_params, []))
    assert (tmp_path / "multi_turn.png").stat().st_size > 0 and (tmp_path / "multi_turn.png.manifest.json").exists()

    edited = output["multi_turn_by_turn"]
    with open(edited, "a") as handle:
        handle.write(by_turn.iloc[-1:].to_csv(index=False, header=False))
    with pytest.raises(ManifestMismatchError, match="multi_turn_by_turn.csv"):
        run_script("figure_multi_turn.py", ScriptJob(inputs, figure, figure_params, []))


def test_a_study_that_asks_multi_turn_plans_its_tables_and_figure_and_one_that_does_not_plans_neither(workflow_copy):
    from conftest import planned_jobs, run_snakemake, write_config

    # The engine's branch lets the config ask the mode (schemas/config.schema.yaml); until then this copy does, and
    # its cells are refused at parse as an unknown mode: the tables and the figure are planned from the config alone.
    schema = workflow_copy / "schemas/config.schema.yaml"
    modes = "enum: [question_aware, question_agnostic, other_question, same_question]"
    schema.write_text(schema.read_text().replace(modes, modes[:-1] + ", multi_turn]"))
    write_config(workflow_copy, "config/demo.yaml", "multi-turn.yaml", question_modes=["question_aware", "multi_turn"])
    asked = run_snakemake(workflow_copy, "-n", "--configfile", "config/multi-turn.yaml")
    assert asked.returncode == 0, asked.stderr[-3000:]
    assert planned_jobs(asked.stdout)["figure_multi_turn"] == 1
    aggregate = asked.stdout.split("rule aggregate:", 1)[1].split("\n[", 1)[0]
    assert "results/tables/multi_turn_by_turn.csv (update)" in aggregate
    assert "results/tables/multi_turn_drop.csv.manifest.json (update)" in aggregate
    plain = run_snakemake(workflow_copy, "-n", "--configfile", "config/demo.yaml")
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert "figure_multi_turn" not in planned_jobs(plain.stdout) and "multi_turn_by_turn" not in plain.stdout


def test_reference_figures_draw_the_multi_turn_figure_of_a_committed_run_with_its_tables(study, tmp_path):
    import shutil

    from conftest import copy_workflow, planned_jobs, run_snakemake

    output = run_aggregate(study, tmp_path / "made" / "tables")
    workflow = copy_workflow(tmp_path / "workflow")
    committed = workflow / "reference/multi-turn-run/tables"
    committed.mkdir(parents=True)
    for name in ("summary", "multi_turn_by_turn"):
        for path in (output[name], output[name] + ".manifest.json"):
            shutil.copy2(path, committed)
    planned = planned_jobs(run_snakemake(workflow, "reference_figures", "-n", check=True).stdout)
    assert planned.get("reference_figure_multi_turn") == 1
    run_snakemake(workflow, "reference_figures", "--cores", "1", check=True)
    png = workflow / "results/reference/multi-turn-run/figures/multi_turn.png"
    assert json.loads(png.with_name(png.name + ".manifest.json").read_text())["layout"]["problems"] == []


def test_an_edited_drop_outside_its_interval_is_named_by_the_readers_check(study):
    from kvcache_bench.analysis.verified import interval_problems

    _, _, per_example, _ = study
    drop = turn_one_drop(per_example, seed=1, n_resamples=500)
    assert interval_problems(drop) == []  # as the aggregate job writes it
    drop.loc[drop["method"] == "snapkv", "drop"] = -75.0
    (problem,) = interval_problems(drop)
    assert "method snapkv" in problem and "drop -75 is outside its interval" in problem

"""One row per cell of the study: how many examples were scored and their mean score x100."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from .io import read_jsonl

CELL_COLUMNS = ["dataset", "task", "model", "method", "question_mode", "retention", "batch_size"]


def summarize_cell(score_path: str | Path, cell: dict, expected_n: int | None = None) -> dict:
    scores = [record["score"] for record in read_jsonl(score_path)]
    n = len(scores)
    row = {**cell, "n": n, "expected_n": expected_n if expected_n is not None else n}
    row["score"] = round(100.0 * sum(scores) / n, 2) if n else float("nan")
    row["incomplete"] = bool(expected_n is not None and n < expected_n)
    row["metric"] = read_jsonl(score_path)[0]["metric"] if n else ""
    return row


def build_summary(score_files: list[str], cells: list[dict], expected_ns: list[int | None] | None = None) -> pd.DataFrame:
    expected_ns = expected_ns or [None] * len(score_files)
    rows = [summarize_cell(path, cell, expected) for path, cell, expected in zip(score_files, cells, expected_ns)]
    frame = pd.DataFrame(rows, columns=CELL_COLUMNS + ["metric", "n", "expected_n", "incomplete", "score"])
    return frame.sort_values(CELL_COLUMNS, ascending=[True, True, True, True, True, False, True]).reset_index(drop=True)


def cells_from_json(text: str) -> list[dict]:
    return json.loads(text)

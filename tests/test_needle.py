"""source: needle_in_haystack — kvpress's needle test on Paul Graham's essays, its score and its heat map."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from kvcache_bench.analysis.metrics import score_example
from kvcache_bench.analysis.needle_heatmap import heatmap_figure, save, score_grid
from kvcache_bench.analysis.scorers.ruler_needle import needle_rouge_l
from kvcache_bench.data.needle import CONTEXT_WRAPPER, make_needle_dataset, needle_rows, packaged_essays
from kvcache_bench.files import read_jsonl

NEEDLE = "The best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day."


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    from conftest import SMOLLM2_GGUF, SMOLLM2_PACKAGE

    from kvcache_bench.data.packaged_models import byte_level_tokenizer_from_gguf, locate_packaged_file

    directory = tmp_path_factory.mktemp("smollm2-tokenizer")
    byte_level_tokenizer_from_gguf(locate_packaged_file(SMOLLM2_PACKAGE, SMOLLM2_GGUF).path).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def tokenizer(tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tokenizer_dir))


@pytest.fixture(scope="module")
def essays():
    text, source = packaged_essays()
    return text[:60_000], source  # enough for 4k tokens


def test_the_needle_sits_once_at_each_depth_of_a_haystack_that_fits_each_length(tokenizer, essays):
    rows = needle_rows(tokenizer, essays[0], lengths=[1024, 2048], depths=[0, 50, 100], needle=NEEDLE, question=" Q?", answer_prefix="A:")
    assert [(r["max_context_length"], r["needle_depth"]) for r in rows] == [(1024, 0), (1024, 50), (1024, 100), (2048, 0), (2048, 50), (2048, 100)]
    head, tail = CONTEXT_WRAPPER.split("{context}")
    for row in rows:
        context = row["context"]
        assert context.count(NEEDLE) == 1 and context.startswith(head) and context.endswith(tail)
        prompt = len(tokenizer.encode(context + row["input"] + row["answer_prefix"], add_special_tokens=False))
        # kvpress keeps 150 tokens of the length for the prompt around the haystack: the prompt stays within it
        assert row["max_context_length"] - 160 <= prompt <= row["max_context_length"]
        position = context.index(NEEDLE) / (len(context) - len(NEEDLE))
        assert position == pytest.approx(row["needle_depth"] / 100, abs=0.02)
        assert row["answers"] == [NEEDLE]
    assert rows[0]["context"].startswith(head + NEEDLE)  # depth 0: first
    assert rows[2]["context"].endswith(NEEDLE + tail) or rows[2]["context"][: -len(tail)].rstrip().endswith(NEEDLE)


def test_a_length_the_needle_and_prompt_overhead_fill_is_refused(tokenizer, essays):
    from kvcache_bench.data.needle import NeedleError

    with pytest.raises(NeedleError, match="leaves no haystack"):
        needle_rows(tokenizer, essays[0], lengths=[160], depths=[50], needle=NEEDLE, question="Q", answer_prefix="")


def test_score_is_kvpress_rouge_call_with_the_needle_as_hypothesis():
    from rouge import Rouge

    predictions = [
        NEEDLE, "eat a sandwich and sit in Dolores Park", "Dolores Park. On a sunny day. Eat a sandwich.",
        "The best thing is to go to the beach.", "  " + NEEDLE.upper() + "\n",
    ]
    for prediction in predictions:
        expected = Rouge().get_scores(NEEDLE.strip(), prediction.strip())[0]["rouge-l"]["f"]
        assert needle_rouge_l(prediction, NEEDLE) == expected
        assert score_example("needle_in_haystack", prediction, [NEEDLE]) == expected
    assert needle_rouge_l(NEEDLE, NEEDLE) == pytest.approx(1.0)
    assert 0 < needle_rouge_l(predictions[1], NEEDLE) < 1
    assert needle_rouge_l("", NEEDLE) == 0.0  # kvpress's call raises here


def test_dataset_from_the_ruler_wheels_essays_records_where_they_came_from(tokenizer_dir, tmp_path):
    facts = make_needle_dataset(
        tokenizer_dir=tokenizer_dir, lengths=[512], depths=[10, 90], needle=NEEDLE, question=" What is it?", answer_prefix="Answer:",
        local_path=None, rows_path=tmp_path / "needle_in_haystack.jsonl", params={}, seed=None,
    )
    assert facts["rows"] == 2
    rows = read_jsonl(tmp_path / "needle_in_haystack.jsonl")
    assert [r["_id"] for r in rows] == ["needle-512-10", "needle-512-90"] and rows[0]["answer_prefix"] == "Answer:"
    manifest = json.loads((tmp_path / "needle_in_haystack.jsonl.manifest.json").read_text())["generated"]
    assert manifest["haystack"]["file"].endswith("PaulGrahamEssays.json") and len(manifest["haystack"]["sha256"]) == 64
    assert manifest["needle"] == NEEDLE and manifest["prompt_lengths"]["max"] <= 512


def test_a_copy_of_kvpress_hub_dataset_gives_haystack_needle_and_question(tokenizer_dir, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    haystack = " ".join(f"Sentence number {i} of a haystack about gardening." for i in range(400))
    pd.DataFrame([{
        "context": haystack, "needle": "The secret code is 4711.", "question": " What is the secret code?",
        "answer_prefix": "The code is", "max_new_tokens": 16,
    }]).to_parquet(copy / "needle_in_haystack.parquet")
    make_needle_dataset(
        tokenizer_dir=tokenizer_dir, lengths=[512], depths=[50], needle=NEEDLE, question="unused", answer_prefix="unused",
        local_path=str(copy), rows_path=tmp_path / "out.jsonl", params={}, seed=None,
    )
    (row,) = read_jsonl(tmp_path / "out.jsonl")
    assert "The secret code is 4711." in row["context"] and "gardening" in row["context"]
    assert row["input"] == " What is the secret code?" and row["answer_prefix"] == "The code is" and row["answers"] == ["The secret code is 4711."]


def test_heat_map_puts_each_score_at_its_depth_and_length(tmp_path):
    rows = [{"_id": f"needle-{length}-{depth}", "needle_depth": depth, "max_context_length": length} for length in (1024, 4096) for depth in (0, 50, 100)]
    scores = [{"id": "needle-4096-50", "score": 0.25}, {"id": "needle-1024-0", "score": 1.0}]
    lengths, depths, grid = score_grid(rows, scores)
    assert lengths == [1024, 4096] and depths == [0, 50, 100]
    assert grid[1, 1] == 0.25 and grid[0, 0] == 1.0 and int(np.isnan(grid).sum()) == 4
    with pytest.raises(ValueError, match="needle-2048-0"):
        score_grid(rows, [{"id": "needle-2048-0", "score": 1.0}])
    full = score_grid(rows, [{"id": r["_id"], "score": 1.0} for r in rows])
    save(heatmap_figure([("Full cache", *full), ("SnapKV, 25% kept", lengths, depths, grid)], "needle"), tmp_path / "f.png", tmp_path / "f.svg")
    assert (tmp_path / "f.png").stat().st_size > 5000 and b"Full cache" in (tmp_path / "f.svg").read_bytes()

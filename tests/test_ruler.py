"""source: ruler — NVIDIA's RULER generator from PyPI's nvidia-long-context-eval, called, not re-implemented.

Parity: for seed 42 (the seed the package's own prepare.py always uses) and SmolLM2's tokenizer, the rows equal
what prepare.py writes, and the project's scores equal the package's eval/evaluate.py on seeded random
predictions. Offline: the generator runs with every socket connection refused.
"""

from __future__ import annotations

import csv
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from kvcache_bench.analysis.metrics import score_example, task_score
from kvcache_bench.data import ruler
from kvcache_bench.files import read_jsonl

# Any connection attempt (hub, NLTK's downloader, tiktoken's encodings) fails loudly in every process that loads this.
NO_NETWORK = """
import socket
def _refuse(*args, **kwargs):
    raise OSError("network access attempted during an offline test")
socket.socket.connect = _refuse
socket.create_connection = _refuse
socket.getaddrinfo = _refuse
"""


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    from conftest import SMOLLM2_GGUF, SMOLLM2_PACKAGE

    from kvcache_bench.data.packaged_models import byte_level_tokenizer_from_gguf, locate_packaged_file

    directory = tmp_path_factory.mktemp("smollm2-tokenizer")
    byte_level_tokenizer_from_gguf(locate_packaged_file(SMOLLM2_PACKAGE, SMOLLM2_GGUF).path).save_pretrained(directory)
    return directory


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """Child processes (the generator scripts) start with sockets refused."""
    shim = tmp_path / "no-network"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(NO_NETWORK)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(shim), os.environ.get("PYTHONPATH")])))
    return shim


def prepare_py_rows(task: str, tokenizer_dir: Path, max_seq_length: int, num_samples: int, save_dir: Path) -> list[dict]:
    """The package's own prepare.py, run as kvpress's generate.sh runs it (hf tokenizer, base template)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env["NLTK_DATA"] = str(ruler.punkt_data_dir())
    result = subprocess.run(
        [sys.executable, str(ruler.package_dir() / "data" / "prepare.py"), "--save_dir", str(save_dir), "--benchmark", "synthetic",
         "--task", task, "--tokenizer_path", str(tokenizer_dir), "--tokenizer_type", "hf", "--max_seq_length", str(max_seq_length),
         "--model_template_type", "base", "--num_samples", str(num_samples)],
        env=env, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    written = save_dir / task / "validation.jsonl"
    assert written.is_file(), result.stdout[-3000:]  # prepare.py exits 0 even when its script failed
    return read_jsonl(written)


def test_qa_1_made_offline_with_smollm2s_tokenizer_equals_prepare_py_and_reads_as_kvpress_stores_it(tokenizer_dir, tmp_path, offline):
    from transformers import AutoTokenizer

    out = tmp_path / "out"
    facts = ruler.make_ruler_dataset(
        "qa_1", tokenizer_dir=tokenizer_dir, max_seq_length=2048, num_examples=3, seed=42,
        ruler_layout_path=out / "ruler" / "qa_1" / "test.parquet", rows_path=out / "qa_1.jsonl", params={"dataset": "r"},
    )
    assert facts["rows"] == 3
    rows = read_jsonl(out / "qa_1.jsonl")
    reference = prepare_py_rows("qa_1", tokenizer_dir, 2048, 3, tmp_path / "prepare")
    for row, package_row in zip(rows, reference, strict=True):
        assert row["context"] + row["input"] + row["answer_prefix"] == package_row["input"]
        assert row["answers"] == package_row["outputs"]
        # kvpress's layout: RULER's second instruction and the question, then "Answer:" opening the answer
        assert row["input"].startswith("Answer the question based on the given documents.") and "\n\nQuestion: " in row["input"]
        assert row["answer_prefix"] == "Answer:" and row["context"].count("Document ") >= 2
    assert [row["_id"] for row in rows] == [f"ruler-2048-qa_1-{i}" for i in range(3)]
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    prompt_tokens = [len(tokenizer.tokenize(r["context"] + r["input"] + r["answer_prefix"])) for r in rows]
    assert max(prompt_tokens) + 32 <= 2048 and min(prompt_tokens) > 1024  # filled towards the length, as RULER fills
    manifest = json.loads((out / "qa_1.jsonl.manifest.json").read_text())
    generated = manifest["generated"]
    assert generated["package"] == "nvidia-long-context-eval==26.3" and generated["script"].endswith("synthetic/qa.py")
    assert set(generated["data_files"]) == {"squad.json"} and generated["seed"] == 42


@pytest.mark.parametrize(("task", "max_seq_length"), [("niah_single_2", 1024), ("vt", 1024), ("cwe", 1024), ("fwe", 1024)])
def test_each_task_family_equals_what_prepare_py_writes(task, max_seq_length, tokenizer_dir, tmp_path, offline):
    generated, facts = ruler.generate_ruler_task(task, tokenizer_dir=str(tokenizer_dir), max_seq_length=max_seq_length, num_examples=2, seed=42)
    assert generated == prepare_py_rows(task, tokenizer_dir, max_seq_length, 2, tmp_path / "prepare")
    layout = ruler.kvpress_rows(ruler.ruler_task(task), generated)
    for row, package_row in zip(layout, generated):
        assert row["context"] + row["question"] + row["answer_prefix"] == package_row["input"]
        assert row["question"].endswith(" ") and not row["answer_prefix"].startswith(" ")  # the space stays with the question
    if task == "niah_single_2":  # Paul Graham's essays, split into sentences by NLTK's punkt_tab
        assert "punkt" in facts and set(facts["data_files"]) == {"PaulGrahamEssays.json"}
        assert "What is the special magic number for" in layout[0]["question"]


def test_another_seed_makes_other_rows(tokenizer_dir):
    first, _ = ruler.generate_ruler_task("niah_single_1", tokenizer_dir=str(tokenizer_dir), max_seq_length=512, num_examples=2, seed=42)
    other, _ = ruler.generate_ruler_task("niah_single_1", tokenizer_dir=str(tokenizer_dir), max_seq_length=512, num_examples=2, seed=7)
    assert [r["outputs"] for r in first] != [r["outputs"] for r in other]


def test_a_length_where_qa_py_would_loop_forever_is_refused_naming_it(tokenizer_dir):
    with pytest.raises(ruler.RulerError, match=r"qa_1 cannot be made at max_seq_length=1024.*not even 10 documents fit"):
        ruler.generate_ruler_task("qa_1", tokenizer_dir=str(tokenizer_dir), max_seq_length=1024, num_examples=1, seed=42, timeout_s=300)


def test_a_script_that_retries_silently_forever_is_stopped_naming_the_length(tokenizer_dir):
    # variable_tracking.py at 512 tokens: its few-shot example leaves no room, and its loop retries forever
    with pytest.raises(ruler.RulerError, match=r"(printed nothing|repeated .*) for 20 s making vt at max_seq_length=512"):
        ruler.generate_ruler_task("vt", tokenizer_dir=str(tokenizer_dir), max_seq_length=512, num_examples=1, seed=42, stall_s=20)


def test_essay_haystacks_without_punkt_name_the_env_var_to_set(tmp_path, monkeypatch, tokenizer_dir):
    monkeypatch.setenv("NLTK_DATA", str(tmp_path / "empty"))
    with pytest.raises(ruler.RulerError, match=r"(?s)punkt_tab.*NLTK_DATA.*pip install --no-deps llama-index-core==0\.14\.25"):
        ruler.generate_ruler_task("niah_single_2", tokenizer_dir=str(tokenizer_dir), max_seq_length=1024, num_examples=1, seed=42)
    # a haystack that is not made of essays needs no sentence model
    rows, facts = ruler.generate_ruler_task("niah_multikey_2", tokenizer_dir=str(tokenizer_dir), max_seq_length=512, num_examples=1, seed=42)
    assert len(rows) == 1 and "punkt" not in facts


def _hidden_predictions(rows: list[dict], rng: random.Random) -> list[str]:
    """Predictions a model might give: every answer, some answers, another case, control characters, nothing."""
    predictions = []
    for row in rows:
        answers = row["outputs"]
        kind = rng.randrange(6)
        if kind == 0:
            text = " ".join(answers)
        elif kind == 1:
            text = "I think " + ", ".join(rng.sample(answers, rng.randint(1, len(answers)))).upper()
        elif kind == 2:
            text = answers[0][: max(1, len(answers[0]) // 2)] + "\x00" + answers[0][len(answers[0]) // 2 :]
        elif kind == 3:
            text = "\t\n " + answers[-1] + "\x1b\n"
        elif kind == 4:
            text = ""
        else:
            text = "no idea"
        predictions.append(text)
    return predictions


@pytest.mark.parametrize("task", ["niah_multivalue", "qa_2"])
def test_scores_equal_the_packages_evaluate_py_on_hidden_predictions(task, tokenizer_dir, tmp_path):
    max_seq_length = 2048 if task == "qa_2" else 1024
    rows, _ = ruler.generate_ruler_task(task, tokenizer_dir=str(tokenizer_dir), max_seq_length=max_seq_length, num_examples=6, seed=3)
    rows = rows * 5  # 30 cases
    predictions = _hidden_predictions(rows, random.Random(f"{task}-hidden"))
    predictions_dir = tmp_path / "predictions"
    predictions_dir.mkdir()
    with open(predictions_dir / f"{task}.jsonl", "w") as handle:
        for index, (row, prediction) in enumerate(zip(rows, predictions)):
            handle.write(json.dumps({"index": index, "input": row["input"], "outputs": row["outputs"], "pred": prediction, "others": {}}) + "\n")
    # evaluate.py downloads punkt when NLTK cannot find it, and never uses it: a folder of that name keeps it offline
    nltk_data = tmp_path / "nltk_data"
    (nltk_data / "tokenizers" / "punkt").mkdir(parents=True)
    result = subprocess.run(
        [sys.executable, str(ruler.package_dir() / "eval" / "evaluate.py"), "--data_dir", str(predictions_dir), "--benchmark", "synthetic"],
        env={**os.environ, "NLTK_DATA": str(nltk_data)}, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    with open(predictions_dir / f"summary-{task}.csv") as handle:
        table = list(csv.reader(handle))
    package_score = float(table[2][1])
    package_per_example = json.loads((predictions_dir / "per_sample_scores.json").read_text())[task]
    ours = [score_example(task, prediction, row["outputs"]) for row, prediction in zip(rows, predictions)]
    assert [100 * s for s in ours] == pytest.approx(package_per_example)
    assert task_score(ours) == pytest.approx(package_score)
    assert 0 < package_score < 100  # the hidden cases hit and miss

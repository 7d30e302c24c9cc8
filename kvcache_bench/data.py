"""Datasets in LongBench's schema: loaded from the hub, from a local copy, or generated for the demo.

LongBench rows carry: input (the question), context, answers (list), length, dataset, language,
all_classes, _id. Everything downstream reads only this schema.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import logging
import os
import random
from pathlib import Path

from .io import JsonlError, numbered_jsonl, sha256_of

LONGBENCH_COLUMNS = ("input", "context", "answers", "length", "dataset", "language", "all_classes", "_id")

OFFLINE_HELP = (
    "The Hugging Face hub could not be reached or refused the request. Either\n"
    "  * download the data where there is network and point the config at it:\n"
    "      datasets: {{{dataset}: {{local_path: /path/to/{task}.parquet}}}}   (a .parquet/.jsonl file, or a\n"
    "      directory holding {task}.parquet, {task}.jsonl or {task}/*.parquet), or\n"
    "  * populate the Hugging Face cache and set HF_HUB_OFFLINE=1, or\n"
    "  * for gated data, export HF_TOKEN (it is read from the environment only, never written to outputs)."
)


# Where a row came from ("file, line 3"), carried by loaded rows so a bad row is reported where it is.
ROW_SOURCE = "_source"
MAX_REPORTED_PROBLEMS = 20

log = logging.getLogger(__name__)


class DatasetUnavailableError(RuntimeError):
    pass


class DataRowError(ValueError):
    """Rows that would be generated and scored as something other than what the data means."""


def _local_data_files(local_path: str, task: str) -> tuple[str, list[str]]:
    path = Path(local_path)
    if path.is_file():
        candidates = [path]
    elif path.is_dir():
        candidates = [p for p in (path / f"{task}.parquet", path / f"{task}.jsonl") if p.exists()]
        if not candidates:
            candidates = sorted((path / task).glob("*.parquet")) + sorted((path / task).glob("*.jsonl"))
    else:
        raise DatasetUnavailableError(f"local_path {local_path!r} does not exist")
    if not candidates:
        raise DatasetUnavailableError(
            f"no data for task {task!r} under {local_path!r}: expected {task}.parquet, {task}.jsonl or {task}/*.parquet"
        )
    suffixes = {p.suffix for p in candidates}
    if len(suffixes) != 1:
        raise DatasetUnavailableError(f"mixed file types for task {task!r}: {sorted(map(str, candidates))}")
    builder = {".parquet": "parquet", ".jsonl": "json", ".json": "json"}.get(suffixes.pop())
    if builder is None:
        raise DatasetUnavailableError(f"unsupported file type for {candidates[0]} (use .parquet or .jsonl)")
    return builder, [str(p) for p in candidates]


def load_longbench_rows(
    task: str,
    *,
    dataset_name: str = "longbench",
    hub_id: str | None = None,
    local_path: str | None = None,
    split: str = "test",
    data_dir: str | None = None,
) -> list[dict]:
    """Rows of one task in LongBench's schema, from the hub or a local file.

    RULER's subtasks (kvpress's parquet layout) are read by ``load_ruler_rows`` and converted.
    """
    from .prompts import RULER_TASKS

    if task in RULER_TASKS:
        return load_ruler_rows(task, dataset_name=dataset_name, hub_id=hub_id, local_path=local_path, split=split, data_dir=data_dir)
    import datasets

    if local_path:
        builder, files = _local_data_files(local_path, task)
        if builder == "json":
            rows = [row for file in files for row in read_local_jsonl_rows(file)]
        else:
            rows = []
            for file in files:
                loaded = datasets.load_dataset(builder, data_files={split: [file]}, split=split)
                rows += [{**row, ROW_SOURCE: f"{file}, row {index}"} for index, row in enumerate(loaded, start=1)]
        if not rows:
            raise DataRowError(f"{', '.join(files)}: empty, no rows of task {task!r}")
    else:
        loaded = _load_from_hub(hub_id, dict(name=task), split, dataset_name, task)
        rows = [{**row, ROW_SOURCE: f"{hub_id} ({task}, split {split}), row {index}"} for index, row in enumerate(loaded, start=1)]
        if not rows:
            raise DataRowError(f"{hub_id} ({task}, split {split}) is empty")
    return rows


def read_local_jsonl_rows(path: str | Path) -> list[dict]:
    """A local JSONL file's rows, each carrying its file and 1-based line; a broken line names both."""
    rows = []
    try:
        for number, row in numbered_jsonl(path):
            if not isinstance(row, dict):
                raise DataRowError(f"{path}, line {number}: a row must be a JSON object, got {type(row).__name__}")
            rows.append({**row, ROW_SOURCE: f"{path}, line {number}"})
    except JsonlError as error:
        raise DataRowError(str(error)) from None
    return rows


def _load_from_hub(hub_id: str | None, selector: dict, split: str, dataset_name: str, task: str):
    import datasets

    if not hub_id:
        raise DatasetUnavailableError(f"dataset {dataset_name!r} has neither hub_id nor local_path")
    try:
        return datasets.load_dataset(hub_id, split=split, token=os.environ.get("HF_TOKEN"), **selector)
    except Exception as error:  # the hub's errors are many; all of them mean "not from here"
        raise DatasetUnavailableError(
            f"could not load {hub_id!r} {selector} split {split!r}: {type(error).__name__}: {error}\n"
            + OFFLINE_HELP.format(dataset=dataset_name, task=task)
        ) from error


RULER_COLUMNS = ("context", "question", "answer_prefix", "answer", "task", "max_new_tokens")


def load_ruler_rows(
    task: str,
    *,
    dataset_name: str = "ruler",
    hub_id: str | None = "simonjegou/ruler",
    local_path: str | None = None,
    split: str = "test",
    data_dir: str | None = "4096",
) -> list[dict]:
    """One RULER subtask in LongBench's schema, from kvpress's parquet layout (``simonjegou/ruler``).

    That layout has one folder per context length (``data_dir``: 4096, 8192, 16384, 32768) of parquet
    files with columns context, question, answer_prefix, answer (list), task, max_new_tokens; all
    subtasks share the files and the ``task`` column tells them apart. ``local_path`` is a copy of
    the dataset repository (the folder holding ``<data_dir>/``), a folder of parquet files, or a file.
    """
    import datasets

    if local_path:
        root = Path(local_path)
        folder = root / data_dir if data_dir and (root / data_dir).is_dir() else root
        if folder.is_file():
            files = [folder]
        elif folder.is_dir():
            files = sorted(folder.glob("*.parquet"))
        else:
            raise DatasetUnavailableError(f"local_path {local_path!r} does not exist")
        if not files:
            raise DatasetUnavailableError(f"no parquet files for RULER data_dir {data_dir!r} under {local_path!r}")
        loaded = datasets.load_dataset("parquet", data_files={split: [str(f) for f in files]}, split=split)
    elif not data_dir:
        raise DatasetUnavailableError(
            f"dataset {dataset_name!r}: RULER on the hub needs data_dir, the context length (4096, 8192, 16384, 32768)"
        )
    else:
        loaded = _load_from_hub(hub_id, dict(data_dir=data_dir), split, dataset_name, task)
    missing = [c for c in RULER_COLUMNS if c not in loaded.column_names]
    if missing:
        raise DatasetUnavailableError(f"RULER data lacks columns {missing} (has {loaded.column_names})")
    rows = []
    for index, row in enumerate(loaded):
        if row["task"] != task:
            continue
        answers = row["answer"]
        rows.append(
            {
                "input": row["question"],
                "context": row["context"],
                "answers": [answers] if isinstance(answers, str) else list(answers),
                "answer_prefix": row["answer_prefix"] or "",
                "length": int(data_dir) if data_dir and str(data_dir).isdigit() else len(row["context"].split()),
                "dataset": task,
                "language": "en",
                "all_classes": None,
                "_id": f"ruler-{data_dir or 'local'}-{task}-{index}",
                ROW_SOURCE: f"{local_path or hub_id} (data_dir {data_dir}), row {index + 1}",
            }
        )
    if not rows:
        tasks = sorted(set(loaded["task"]))
        raise DatasetUnavailableError(f"no rows of RULER task {task!r} (data_dir {data_dir!r}); tasks present: {tasks}")
    return rows


def _is_text(value) -> bool:
    return isinstance(value, str) and bool(value.strip())


def row_problems(row: dict, task: str) -> list[str]:
    """What is wrong with one row for ``task``: each problem names the field."""
    from .prompts import PROMPTS

    problems = []
    asks_question = "{input}" in PROMPTS[task]
    if asks_question and not _is_text(row.get("input")):
        state = "missing" if "input" not in row else f"empty or not text ({row['input']!r})"
        problems.append(f"field 'input' (the question) is {state}; task {task!r} asks it in every prompt")
    elif not asks_question and row.get("input") is not None and not isinstance(row["input"], str):
        problems.append(f"field 'input' must be text, got {type(row['input']).__name__}")
    if not _is_text(row.get("context")):
        state = "missing" if "context" not in row else "empty or not text"
        problems.append(f"field 'context' is {state}")
    answers = row.get("answers")
    if "answers" not in row:
        problems.append("field 'answers' (the references the prediction is scored against) is missing")
    elif not (_is_text(answers) or (isinstance(answers, list) and all(isinstance(a, str) for a in answers) and any(map(_is_text, answers)))):
        problems.append(f"field 'answers' must be a non-empty reference text or list of texts, got {answers!r:.80}")
    length = row.get("length")
    if length is not None and (isinstance(length, bool) or not (isinstance(length, int) or (isinstance(length, float) and length.is_integer()))):
        problems.append(f"field 'length' must be an integer, got {length!r:.40}")
    classes = row.get("all_classes")
    if classes is not None and not (isinstance(classes, list) and all(isinstance(c, str) for c in classes)):
        problems.append(f"field 'all_classes' must be a list of texts or null, got {classes!r:.80}")
    if row.get("_id") is not None and not isinstance(row["_id"], (str, int)):
        problems.append(f"field '_id' must be text, got {type(row['_id']).__name__}")
    if row.get("answer_prefix") is not None and not isinstance(row["answer_prefix"], str):
        problems.append(f"field 'answer_prefix' must be text, got {type(row['answer_prefix']).__name__}")
    return problems


def validate_rows(rows: list[dict], task: str) -> None:
    """Refuse, naming each row's file and line and the field, any row that would be measured wrongly."""
    problems, first_seen = [], {}
    for index, row in enumerate(rows, start=1):
        where = row.get(ROW_SOURCE) or f"row {index}"
        problems += [f"{where}: {problem}" for problem in row_problems(row, task)]
        if row.get("_id") is not None:
            key = str(row["_id"])
            if key in first_seen:
                problems.append(f"{where}: field '_id' {key!r} repeats {first_seen[key]}; ids must be unique")
            first_seen.setdefault(key, where)
    if problems:
        shown = problems[:MAX_REPORTED_PROBLEMS]
        more = f"\n  ... and {len(problems) - len(shown)} more" if len(problems) > len(shown) else ""
        raise DataRowError(
            f"{len(problems)} problem(s) in the rows of task {task!r}; nothing was written:\n"
            + "\n".join(f"  - {p}" for p in shown) + more
        )


def normalise_rows(rows: list[dict], task: str, num_examples: int | None) -> list[dict]:
    """Keep the first ``num_examples`` rows in file order, checked, each with every LongBench column present.

    RULER rows also keep ``answer_prefix`` (the start of the answer the prompt ends with).
    """
    if not rows:
        raise DataRowError(f"task {task!r}: the data is empty, no rows")
    selected = rows if not num_examples else rows[:num_examples]
    if num_examples and len(selected) < num_examples:
        log.warning(
            "num_examples is %d but task %r has only %d rows: its cells will be flagged incomplete",
            num_examples, task, len(selected),
        )
    validate_rows(selected, task)
    normalised = []
    for index, row in enumerate(selected):
        answers = row.get("answers")
        if isinstance(answers, str):
            answers = [answers]
        out = {
            "input": row.get("input") or "",
            "context": row["context"],
            "answers": list(answers or []),
            "length": int(row.get("length") or len(row["context"].split())),
            "dataset": row.get("dataset") or task,
            "language": row.get("language") or "en",
            "all_classes": row.get("all_classes"),
            "_id": str(row["_id"]) if row.get("_id") is not None else hashlib.sha1(f"{task}:{index}:{row['context'][:200]}".encode()).hexdigest(),
        }
        if row.get("answer_prefix"):
            out["answer_prefix"] = row["answer_prefix"]
        normalised.append(out)
    return normalised


# ---------------------------------------------------------------------------------------------------
# The offline demo's data: seeded synthetic documents whose answers are words in the text.
#
# A document is filler sentences with a few facts "the <attribute> of <entity> is <value> ." spread among
# them; a question asks for one fact's value (1-3 invented names). Every word is its own token in the
# demo's word-level tokenizer, so a document of n words is n tokens. The canary model is trained on this
# very generator (kvcache_bench.train), which is why it is one function of a seeded ``random.Random``.

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z")
_NUCLEI = ("a", "e", "i", "o", "u")
_CODAS = ("n", "r", "l", "s")
_ENDINGS = ("a", "o", "en", "is")
FILLER_WORDS = (
    "the a of and to in is was it that for on with as by at from this which be are were has had have "
    "not but or an its their they there been more also most some other into than then these those "
    "over such only new time first year years people after many before through between during under "
    "city river valley market road bridge village harbour season winter summer festival council archive "
    "report museum garden forest coast island mountain tower school library station field farm mill "
    "north south east west old small large long quiet busy early late local famous ancient modern "
    "built opened closed moved grew changed visited described recorded noted known called named held"
).split()
ATTRIBUTES = ("capital", "colour", "founder", "river", "animal", "instrument", "festival", "mountain", "motto", "emblem")
FACT_TEMPLATE = "the {attribute} of {entity} is {value} ."
QUESTION_TEMPLATE = "what is the {attribute} of {entity} ?"
MAX_ANSWER_WORDS = 3
PUNCTUATION = (".", ",", "?", ":")
SPECIAL_TOKENS = ("<unk>", "<pad>", "<s>", "</s>")
PROMPT_WORDS = "read the document and answer the question . document : question : answer :".split()


@functools.lru_cache(maxsize=1)
def synthetic_names() -> tuple[str, ...]:
    """The invented names that entities and answers are made of (none is a filler word)."""
    names = {o + n + c + e for o in _ONSETS for n in _NUCLEI for c in _CODAS for e in _ENDINGS}
    return tuple(sorted(names - set(FILLER_WORDS) - set(ATTRIBUTES)))


def synthetic_vocabulary() -> list[str]:
    """Every word the synthetic generator and the task prompt can emit (the demo tokenizer covers them)."""
    words = set(FILLER_WORDS) | set(PUNCTUATION) | set(synthetic_names()) | set(ATTRIBUTES) | set(PROMPT_WORDS)
    for template in (FACT_TEMPLATE, QUESTION_TEMPLATE):
        words |= {w for w in template.split() if not w.startswith("{")}
    return sorted(words)


def synthetic_question(fact: dict) -> str:
    return QUESTION_TEMPLATE.format(attribute=fact["attribute"], entity=fact["entity"])


def _filler_sentence(rng: random.Random, n_words: int) -> list[str]:
    return rng.choices(FILLER_WORDS, k=n_words) + ["."]


def make_synthetic_document(
    rng: random.Random, n_words: int, n_facts: int, max_answer_words: int = MAX_ANSWER_WORDS
) -> tuple[str, list[dict]]:
    """A document of ``n_words`` words (or one fewer) holding ``n_facts`` facts at random sentence breaks.

    Entities and answer words are distinct within a document, so every question has one answer.
    """
    chosen = rng.sample(synthetic_names(), n_facts * (1 + max_answer_words))
    facts, fact_sentences = [], []
    for index in range(n_facts):
        entity = chosen[index * (1 + max_answer_words)]
        n_value_words = rng.randint(1, max_answer_words)
        value_words = chosen[index * (1 + max_answer_words) + 1 : index * (1 + max_answer_words) + 1 + n_value_words]
        fact = {"entity": entity, "attribute": rng.choice(ATTRIBUTES), "value": " ".join(value_words)}
        facts.append(fact)
        fact_sentences.append(FACT_TEMPLATE.format(**fact).split())
    filler_budget = n_words - sum(len(s) for s in fact_sentences)
    if filler_budget < 2:
        raise ValueError(f"{n_facts} facts do not fit in a document of {n_words} words")
    sentences = []
    while filler_budget >= 2:
        length = rng.randint(6, 14)
        if filler_budget - (length + 1) < 7:  # the last sentence takes what is left
            length = filler_budget - 1
        sentences.append(_filler_sentence(rng, length))
        filler_budget -= length + 1
    for words in fact_sentences:
        sentences.insert(rng.randint(0, len(sentences)), words)
    return " ".join(word for sentence in sentences for word in sentence), facts


def make_synthetic_rows(
    n_documents: int,
    *,
    seed: int,
    min_words: int = 200,
    max_words: int = 500,
    facts_per_document: int = 4,
    questions_per_document: int = 2,
    task: str = "synthetic_qa",
) -> list[dict]:
    """Seeded long-document QA in LongBench's schema; several questions share each document."""
    if not 0 < min_words <= max_words:
        raise ValueError(f"need 0 < min_words <= max_words, got {min_words}, {max_words}")
    rng = random.Random(seed)
    rows = []
    for doc_index in range(n_documents):
        context, facts = make_synthetic_document(rng, rng.randint(min_words, max_words), facts_per_document)
        for q_index, fact in enumerate(rng.sample(facts, min(questions_per_document, len(facts)))):
            rows.append(
                {
                    "input": synthetic_question(fact),
                    "context": context,
                    "answers": [fact["value"]],
                    "length": len(context.split()),
                    "dataset": task,
                    "language": "en",
                    "all_classes": None,
                    "_id": f"{task}-{seed}-{doc_index:04d}-{q_index}",
                }
            )
    return rows


def synthetic_row_count(generator: dict) -> int:
    """How many rows ``make_synthetic_rows(**generator)`` writes: asking for more is flagged, not capped."""
    settings = {
        name: parameter.default
        for name, parameter in inspect.signature(make_synthetic_rows).parameters.items()
        if parameter.default is not inspect.Parameter.empty
    }
    settings.update(generator)
    return settings.get("n_documents", 0) * min(settings["questions_per_document"], settings["facts_per_document"])


def write_dataset(rows: list[dict], out_path: str | Path, params: dict, seed: int | None, extra: dict | None = None) -> dict:
    """Write rows as JSONL (atomically) and the manifest with row count and sha256 (and ``extra``) beside it."""
    from .io import write_jsonl_atomic
    from .manifest import write_manifest

    count = write_jsonl_atomic(out_path, rows)
    facts = {"rows": count, "sha256": sha256_of(out_path), "columns": list(LONGBENCH_COLUMNS)}
    write_manifest(out_path, params, seed, extra={"dataset": facts, **(extra or {})})
    return facts

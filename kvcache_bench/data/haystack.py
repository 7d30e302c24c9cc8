"""RULER-style needle-in-a-haystack tasks, generated here on natural English filler, in kvpress's RULER layout.

RULER (NVIDIA/RULER, ``scripts/data/synthetic``) hides "needle" sentences in a long "haystack" of essays
and asks for one of them. The tasks below mirror its templates word for word for one queried needle
(RULER turns "Some ... are" into "A ... is" when one value is asked for):

* ``niah_single_2``: one needle in natural text (RULER's essay haystack).
* ``niah_multikey_1``: four needles with different keys in natural text; the question names one, the
  other three are distractors of the same form.

Two deliberate differences from RULER:

* **Needles are single English words**, not 7-digit numbers: "One of the special magic words for Lisbon
  is: lantern." SmolLM2's tokenizer splits every digit into its own token, so a press can keep part of a
  number ("915" of 915117) and a partial answer would need its own scoring rule; a word is all or nothing.
* **The filler is the Python documentation's prose** (``pydoc_data/topics.py``, shipped with every
  CPython, conda's included), not Paul Graham's essays, which are not installed anywhere. Only paragraphs of
  plain prose are kept (no code, grammar or headings), and of those only the sentences without quoted names,
markup or code fragments (381 sentences, 5,846 words in Python 3.11.7). Its sha256 and the Python version are recorded:
  the same seed on the same file gives the same bytes.

Rows have RULER's layout as kvpress stores it (``simonjegou/ruler``): context (the instruction and the
haystack), question, answer_prefix, answer (list), task, max_new_tokens. Each prompt (context + question +
answer prefix, without the chat template) is filled with whole filler sentences to at most
``prompt_length`` tokens of the model's own tokenizer, as RULER sizes its haystacks; the actual counts
are returned for the manifest.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import platform
import random
import re
from dataclasses import dataclass
from pathlib import Path

FILLER_MODULE = "pydoc_data.topics"

# RULER's niah template and answer prefix, in the singular form it uses when one value is asked for.
NIAH_INSTRUCTION = (
    "A special magic {needle_type} is hidden within the following text. "
    "Make sure to memorize it. I will quiz you about the {needle_type} afterwards.\n"
)
NIAH_QUESTION = "What is the special magic {needle_type} for {key} mentioned in the provided text?"
NIAH_ANSWER_PREFIX = " The special magic {needle_type} for {key} mentioned in the provided text is"
NEEDLE = "One of the special magic {needle_type}s for {key} is: {value}."
NEEDLE_TYPE = "word"
# RULER's needle depths: 40 evenly spaced percentages of the haystack's sentences.
DEPTHS = tuple(round(i * 100 / 39) for i in range(40))
RULER_NIAH_MAX_NEW_TOKENS = 128

GENERATED_TASKS = {"niah_single_2": 1, "niah_multikey_1": 4}  # task -> needles in the haystack

KEYS = (
    "Lisbon Oslo Nairobi Lima Hanoi Dublin Quito Accra Riga Tunis Kyoto Denver Perth Porto Bergen Dakar "
    "Havana Manila Krakow Seville Geneva Munich Cairo Tallinn Vilnius Ottawa Boston Chicago Madrid Vienna "
    "Prague Warsaw Athens Helsinki Sydney Toronto Santiago Bogota Montreal Glasgow Naples Milan Zurich "
    "Brussels Lyon Marseille Istanbul Mumbai Delhi Seoul Jakarta Bangkok Caracas Edinburgh Belfast Cardiff"
).split()
VALUES = (
    "lantern violin pebble harbor meadow falcon saddle candle orchard compass blanket kettle anchor "
    "thimble walnut feather ladder marble velvet trumpet beacon cactus dolphin glacier hammock jasmine "
    "kayak lobster mitten nutmeg oyster parrot quilt raccoon sapphire tulip umbrella walrus yarn zebra "
    "acorn barrel canyon daisy emerald fiddle gondola hazel igloo jigsaw koala lemon magnet nectar "
    "otter pepper quartz ribbon spruce tiger vulture willow basket cobra dragon eagle ferret garlic "
    "hornet ivory jaguar lilac mango nickel olive panda rabbit salmon turnip"
).split()


class HaystackError(ValueError):
    pass


@dataclass(frozen=True)
class Filler:
    sentences: tuple[str, ...]
    source: str
    sha256: str

    @property
    def words(self) -> frozenset[str]:
        return frozenset(w.lower() for s in self.sentences for w in re.findall(r"[A-Za-z]+", s))


_HEADING_UNDERLINE = re.compile(r"[*=\-^~]+")
_SENTENCE_END = re.compile(r"(?<=[a-z0-9)\"'][.!?])\s+(?=[A-Z])")
_NOT_PROSE = (">>>", "::=", "Changed in version", "New in version", "Deprecated since", "See also")
# Quoted names, markup and code fragments: a quoted identifier reads like the "magic word" to a small model
# (measured: SmolLM2 answered with words such as "finally" copied from such sentences).
_CODE_LIKE = re.compile(r"[\"*_()\[\]{}:=<>`\\/|@#]|\w'\w*'|'\w")


def prose_paragraphs(text: str) -> list[str]:
    """Paragraphs of plain prose: no indented (code or grammar) lines, no headings, whole sentences."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        lines = block.split("\n")
        if any(line[:1].isspace() for line in lines) or _HEADING_UNDERLINE.fullmatch(lines[-1].strip()):
            continue
        paragraph = " ".join(line.strip() for line in lines)
        if len(paragraph.split()) < 12 or not paragraph.endswith(".") or any(m in paragraph for m in _NOT_PROSE):
            continue
        paragraphs.append(paragraph)
    return paragraphs


@functools.lru_cache(maxsize=1)
def python_docs_filler() -> Filler:
    """The prose sentences of the Python documentation's topics, in a fixed order (topics sorted by name)."""
    spec = importlib.util.find_spec(FILLER_MODULE)
    if spec is None or not spec.origin:
        raise HaystackError(f"{FILLER_MODULE} is missing from this Python; the filler text comes from it")
    path = Path(spec.origin)
    from pydoc_data.topics import topics

    sentences = [
        sentence
        for name in sorted(topics)
        for paragraph in prose_paragraphs(topics[name])
        for sentence in _SENTENCE_END.split(paragraph)
        if not _CODE_LIKE.search(sentence) and sentence[:1].isupper() and len(sentence.split()) >= 4
    ]
    return Filler(
        tuple(sentences), f"{FILLER_MODULE} ({path.name} of this Python)", hashlib.sha256(path.read_bytes()).hexdigest()
    )


@dataclass(frozen=True)
class _Draw:
    """Everything random about one example, drawn once so that only the haystack's length varies."""

    start: int
    needles: list[str]
    depths: list[int]
    key: str
    value: str
    keys: tuple[str, ...] = ()  # every needle's key and value, in drawing order (the needles are shuffled)
    values: tuple[str, ...] = ()

    def asked(self, questions: int) -> list[tuple[str, str]]:
        """(key, value) of the needles the haystack's questions ask: the drawn one, then the next keys in order."""
        first = self.keys.index(self.key)
        return [
            (self.keys[(first + i) % len(self.keys)], self.values[(first + i) % len(self.keys)])
            for i in range(questions)
        ]


def _draw(rng: random.Random, filler: Filler, n_needles: int, values: list[str]) -> _Draw:
    keys = rng.sample(KEYS, n_needles)
    chosen = rng.sample(values, n_needles)
    needles = [NEEDLE.format(needle_type=NEEDLE_TYPE, key=k, value=v) for k, v in zip(keys, chosen)]
    rng.shuffle(needles)
    asked = rng.randrange(n_needles)
    return _Draw(
        start=rng.randrange(len(filler.sentences)),
        needles=needles,
        depths=sorted(rng.sample(DEPTHS, n_needles)),
        key=keys[asked],
        value=chosen[asked],
        keys=tuple(keys),
        values=tuple(chosen),
    )


def _haystack(filler: Filler, draw: _Draw, n_sentences: int) -> str:
    """``n_sentences`` consecutive filler sentences (wrapping around) with the needles at their depths."""
    total = len(filler.sentences)
    sentences = [filler.sentences[(draw.start + i) % total] for i in range(n_sentences)]
    for offset, (depth, needle) in enumerate(zip(draw.depths, draw.needles)):
        sentences.insert(int(n_sentences * depth / 100) + offset, needle)
    return " ".join(sentences)


def _row(task: str, haystack: str, key: str, value: str) -> dict:
    return {
        "context": NIAH_INSTRUCTION.format(needle_type=NEEDLE_TYPE) + haystack + "\n",
        "question": NIAH_QUESTION.format(needle_type=NEEDLE_TYPE, key=key),
        "answer_prefix": NIAH_ANSWER_PREFIX.format(needle_type=NEEDLE_TYPE, key=key),
        "answer": [value],
        "task": task,
        "max_new_tokens": RULER_NIAH_MAX_NEW_TOKENS,
    }


def prompt_token_count(tokenizer, row: dict) -> int:
    """Tokens of the raw prompt (context, question, answer prefix; no chat template), as RULER counts them."""
    return len(tokenizer.encode(row["context"] + row["question"] + row["answer_prefix"], add_special_tokens=False))


def _longest_prompt(
    task: str, filler: Filler, draw: _Draw, asked: list[tuple[str, str]], n_sentences: int, tokenizer
) -> int:
    haystack = _haystack(filler, draw, n_sentences)
    return max(prompt_token_count(tokenizer, _row(task, haystack, key, value)) for key, value in asked)


def make_haystack_rows(
    task: str,
    *,
    num_examples: int,
    prompt_length: int,
    tokenizer,
    seed: int,
    filler: Filler | None = None,
    questions_per_haystack: int = 1,
) -> tuple[list[dict], list[int]]:
    """``num_examples`` rows of ``task`` and each prompt's token count (each ≤ ``prompt_length``, as full as
    whole filler sentences allow). The same seed, task and filler give the same rows.

    ``questions_per_haystack`` > 1 (the other-question mode's layout): consecutive rows share one haystack,
    each asking for a different needle, and the needles sit at different depths, so a cache kept for one
    needle's region can lose another's. One question per haystack gives the very rows it always gave.
    """
    if task not in GENERATED_TASKS:
        raise HaystackError(f"task {task!r} is not generated here; choose one of {sorted(GENERATED_TASKS)}")
    if not 1 <= questions_per_haystack <= GENERATED_TASKS[task]:
        raise HaystackError(
            f"{task} hides {GENERATED_TASKS[task]} needles: questions_per_haystack must be 1-{GENERATED_TASKS[task]}, "
            f"got {questions_per_haystack}"
        )
    filler = filler or python_docs_filler()
    # A value that occurs in the filler could be "found" without reading the needle.
    values = [v for v in VALUES if v not in filler.words]
    rng = random.Random(f"{seed}:{task}:{prompt_length}")
    rows, counts = [], []
    while len(rows) < num_examples:
        draw = _draw(rng, filler, GENERATED_TASKS[task], values)
        asked = draw.asked(min(questions_per_haystack, num_examples - len(rows)))

        low, high = 0, len(filler.sentences)
        # The largest haystack that fits every question's prompt: token counts grow with every sentence added.
        while low < high:
            middle = (low + high + 1) // 2
            if _longest_prompt(task, filler, draw, asked, middle, tokenizer) <= prompt_length:
                low = middle
            else:
                high = middle - 1
        if low == 0 or _longest_prompt(task, filler, draw, asked, low, tokenizer) > prompt_length:
            raise HaystackError(f"prompt_length={prompt_length} leaves no room for filler in {task}")
        haystack = _haystack(filler, draw, low)
        for key, value in asked:
            rows.append(_row(task, haystack, key, value))
            counts.append(prompt_token_count(tokenizer, rows[-1]))
    return rows, counts


def write_ruler_parquet(rows: list[dict], path: str | Path) -> None:
    """The rows as one parquet file in kvpress's RULER layout (what ``data.load_ruler_rows`` reads)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kvcache_bench.files import atomic_path

    table = pa.Table.from_pylist(
        rows,
        schema=pa.schema(
            [
                ("context", pa.string()),
                ("question", pa.string()),
                ("answer_prefix", pa.string()),
                ("answer", pa.list_(pa.string())),
                ("task", pa.string()),
                ("max_new_tokens", pa.int64()),
            ]
        ),
    )
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def make_ruler_haystack_dataset(
    task: str,
    *,
    tokenizer_dir: str | Path,
    prompt_length: int,
    num_examples: int,
    seed: int,
    ruler_layout_path: str | Path,
    rows_path: str | Path,
    params: dict,
    questions_per_haystack: int = 1,
) -> dict:
    """Generate ``task`` in RULER's layout, then read it back with the project's RULER loader into
    LongBench's schema, so these rows take exactly the path downloaded RULER data takes."""
    from transformers import AutoTokenizer

    from kvcache_bench.data.longbench import load_ruler_rows, normalise_rows, write_dataset
    from kvcache_bench.files import sha256_of

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    filler = python_docs_filler()
    ruler_rows, counts = make_haystack_rows(
        task,
        num_examples=num_examples,
        prompt_length=prompt_length,
        tokenizer=tokenizer,
        seed=seed,
        filler=filler,
        questions_per_haystack=questions_per_haystack,
    )
    write_ruler_parquet(ruler_rows, ruler_layout_path)
    rows = load_ruler_rows(
        task, dataset_name=params.get("dataset", "ruler"), local_path=str(Path(ruler_layout_path).parent), data_dir=None
    )
    generated = {
        "ruler_layout": {"path": str(ruler_layout_path), "sha256": sha256_of(ruler_layout_path)},
        "filler": {
            "source": filler.source,
            "python": platform.python_version(),
            "sha256": filler.sha256,
            "sentences": len(filler.sentences),
        },
        "needles": {
            "type": f"single {NEEDLE_TYPE}",
            "per_example": GENERATED_TASKS[task],
            "questions_per_haystack": questions_per_haystack,
        },
        # (manifest keys avoid "token": manifest.scrub_secrets redacts any key containing it)
        "prompt_lengths": {
            "unit": "tokens",
            "limit": prompt_length,
            "per_example": counts,
            "min": min(counts),
            "max": max(counts),
        },
        "length_counter": {
            "path": str(tokenizer_dir),
            "sha256_of_its_json": sha256_of(Path(tokenizer_dir) / "tokenizer.json"),
        },
    }
    facts = write_dataset(
        normalise_rows(rows, task, num_examples), rows_path, params, seed, extra={"generated": generated}
    )
    return {**facts, "prompt_lengths": counts}

"""The offline demo's data: seeded synthetic documents whose answers are words in the text.

A document is filler sentences with a few facts "the <attribute> of <entity> is <value> ." spread among
them; a question asks for one fact's value (1-3 invented names). Every word is its own token in the
demo's word-level tokenizer, so a document of n words is n tokens. The canary model is trained on this
very generator (kvcache_bench.canary), which is why it is one function of a seeded ``random.Random``.
"""

from __future__ import annotations

import functools
import random

from kvcache_bench.study.prompts import SYNTHETIC_FACTS_PER_DOCUMENT, SYNTHETIC_QUESTIONS_PER_DOCUMENT, SYNTHETIC_TASK

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
ATTRIBUTES = (
    "capital",
    "colour",
    "founder",
    "river",
    "animal",
    "instrument",
    "festival",
    "mountain",
    "motto",
    "emblem",
)
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
    facts_per_document: int = SYNTHETIC_FACTS_PER_DOCUMENT,
    questions_per_document: int = SYNTHETIC_QUESTIONS_PER_DOCUMENT,
    task: str = SYNTHETIC_TASK,
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

"""The canary's training data: sequences built exactly as the engine prompts, and the length curriculum.

Each sequence is BOS, the context part of the synthetic task's prompt (``prompts.split_prompt``), then several
"question part + answer + EOS" turns about the same document; the loss is on answer tokens and EOS only.
Token ids come from the word-level vocabulary directly (each word is one token), which is what the
tokenizer produces for these texts (tests/test_synthetic_data.py checks that).
"""

from __future__ import annotations

import random

import torch

from kvcache_bench.canary.settings import TrainSettings
from kvcache_bench.data.synthetic import (
    MAX_ANSWER_WORDS,
    make_synthetic_document,
    synthetic_question,
)
from kvcache_bench.study.prompts import PROMPTS, SYNTHETIC_TASK, split_prompt

IGNORE = -100


# ----------------------------------------------------------------------------------------------- data


class Vocabulary:
    """Word -> id as the canary's word-level tokenizer maps them (each word of these texts is one token)."""

    def __init__(self, tokenizer):
        self.ids = tokenizer.get_vocab()
        self.bos, self.eos, self.pad = tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id

    def encode(self, text: str) -> list[int]:
        return [self.ids[word] for word in text.split()]


def training_sequence(
    rng: random.Random, vocab: Vocabulary, max_tokens: int, settings: TrainSettings
) -> tuple[list[int], list[int]]:
    """A random document and several of its questions, as (input ids, labels), at most ``max_tokens`` long."""
    head = 1 + len(split_prompt(SYNTHETIC_TASK, "", "")[0].split())
    per_question = (
        len(_between_context_and_question().split())
        + len(split_prompt(SYNTHETIC_TASK, "", "what is the x of y ?")[1].split())
        + MAX_ANSWER_WORDS
        + 1
    )
    budget = max_tokens - head
    n_questions = max(1, min(settings.questions_per_sequence, budget // 40))
    max_words = budget - n_questions * per_question
    most_facts = max(n_questions, min(settings.max_facts, max_words // 12))  # sparse and dense documents alike
    n_facts = rng.randint(min(max(n_questions, settings.min_facts), most_facts), most_facts)
    shortest = n_facts * (6 + MAX_ANSWER_WORDS) + 2
    n_words = rng.randint(max(max_words // 2, shortest), max(max_words, shortest))
    context, facts = make_synthetic_document(rng, n_words, n_facts)
    return encode_sequence(vocab, context, rng.sample(facts, n_questions))


def encode_sequence(vocab: Vocabulary, context: str, asked: list[dict]) -> tuple[list[int], list[int]]:
    """BOS + context part + (question part + answer + EOS) per asked fact, and the answer-only labels.

    The first question follows the document exactly as in the engine's prompt; the others follow the
    previous answer's EOS. ``labels[t]`` is the token at t+1 when that token is an answer word or the
    answer's EOS, and IGNORE otherwise.
    """
    context_text, _ = split_prompt(SYNTHETIC_TASK, context, "")
    ids = [vocab.bos] + vocab.encode(context_text)
    is_target = [False] * len(ids)
    for turn, fact in enumerate(asked):
        _, question_text = split_prompt(SYNTHETIC_TASK, context, synthetic_question(fact))
        question = (vocab.encode(_between_context_and_question()) if turn else []) + vocab.encode(question_text)
        answer = vocab.encode(fact["value"]) + [vocab.eos]
        ids += question + answer
        is_target += [False] * len(question) + [True] * len(answer)
    labels = [ids[t + 1] if is_target[t + 1] else IGNORE for t in range(len(ids) - 1)] + [IGNORE]
    return ids, labels


def _between_context_and_question() -> str:
    """What the prompt puts between the document and the question ("question :"), repeated per turn."""
    return PROMPTS[SYNTHETIC_TASK].split("{context}", 1)[1].split("{input}", 1)[0]


def sequences_at(length: int, settings: TrainSettings) -> int:
    return max(1, min(settings.sequences_per_step, settings.tokens_per_step // length))


def training_batch(step: int, stage_length: int, vocab: Vocabulary, settings: TrainSettings) -> dict[str, torch.Tensor]:
    """The batch of ``step`` at a curriculum stage: a function of (seed, step, stage length) alone."""
    rng = random.Random(settings.seed * 1_000_003 + step)
    length = stage_length
    if rng.random() < settings.short_batch_fraction:
        length = rng.randint(settings.min_sequence_tokens, stage_length)
    sequences = [training_sequence(rng, vocab, length, settings) for _ in range(sequences_at(length, settings))]
    width = max(len(ids) for ids, _ in sequences)
    input_ids = torch.full((len(sequences), width), vocab.pad, dtype=torch.long)
    labels = torch.full((len(sequences), width), IGNORE, dtype=torch.long)
    for row, (ids, targets) in enumerate(sequences):  # right padding: causal attention never sees it
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, : len(targets)] = torch.tensor(targets)
    return {
        "step": step,
        "stage_length": stage_length,
        "at_stage_length": length == stage_length,
        "input_ids": input_ids,
        "labels": labels,
    }


class Curriculum:
    """Which stage of ``curriculum_lengths`` training is at; the next opens once the gate accuracy is met.

    The stage lives in shared memory so DataLoader workers build batches at the current length; batches
    already prefetched at the old length are simply used (each batch says its stage).
    """

    def __init__(self, settings: TrainSettings, stage: int = 0):
        import multiprocessing

        self.settings = settings
        self._stage = multiprocessing.get_context("fork").Value("i", stage, lock=False)
        self._accuracies: list[float] = []

    @property
    def stage(self) -> int:
        return self._stage.value

    @property
    def length(self) -> int:
        return self.settings.curriculum_lengths[self.stage]

    def observe(self, stage_length: int, at_stage_length: bool, accuracy: float) -> bool:
        """Count one step's answer accuracy; True when this opened the next stage."""
        if (
            stage_length != self.length
            or not at_stage_length
            or self.stage == len(self.settings.curriculum_lengths) - 1
        ):
            return False
        self._accuracies.append(accuracy)
        window = self._accuracies[-self.settings.curriculum_window :]
        if (
            len(window) < self.settings.curriculum_window
            or sum(window) / len(window) < self.settings.curriculum_gate_accuracy
        ):
            return False
        self._stage.value += 1
        self._accuracies = []
        return True


class StepBatches(torch.utils.data.IterableDataset):
    """Batches for steps [first, last) at the curriculum's current length, round-robin among workers."""

    def __init__(self, first: int, last: int, curriculum: Curriculum, vocab: Vocabulary, settings: TrainSettings):
        self.first, self.last, self.curriculum, self.vocab, self.settings = first, last, curriculum, vocab, settings

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        for step in range(self.first + worker, self.last, workers):
            yield training_batch(step, self.curriculum.length, self.vocab, self.settings)

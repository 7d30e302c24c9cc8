"""Training the canary: a tiny Llama that answers the synthetic long-document QA task.

With a random demo model every method scores ~0, so the demo shows nothing about compression. The canary
is small enough to commit (safetensors, fp32) and to run on 2 CPU cores, yet answers well enough that
dropping the wrong part of its KV cache costs points.

Training reads the same generator as the demo's data (``kvcache_bench.data``) and builds each sequence
exactly as the engine prompts (``prompts.split_prompt``): BOS, the context part, then several
"question part + answer + EOS" turns about the same document; the loss is on answer tokens and EOS only.
Token ids come from the word-level vocabulary directly (each word is one token), which is what the
tokenizer produces for these texts (tests/test_synthetic_data.py checks that), and is fast enough to feed
a GPU from a few CPU workers.

Recipe (what worked on one H200): fp32 weights with TF32 matmuls (bf16 autocast at lr 1e-3 diverged to NaN),
AdamW lr 5e-4, betas (0.9, 0.98), weight decay 0.01, 100-step linear warm-up then cosine decay, 64 sequences
a step, a length curriculum from 64 tokens to the longest sequence over the first 60% of the steps.

    python -m kvcache_bench.train --config config/canary-train.yaml --out results/models/canary
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch

from .data import MAX_ANSWER_WORDS, make_synthetic_document, synthetic_question, synthetic_vocabulary
from .engine import pick_device
from .prompts import PROMPTS, split_prompt

log = logging.getLogger(__name__)

TASK = "synthetic_qa"
IGNORE = -100


@dataclass
class ModelShape:
    hidden_size: int = 256
    intermediate_size: int = 768
    num_hidden_layers: int = 4
    num_attention_heads: int = 8
    num_key_value_heads: int = 2  # GQA, so kvpress's repeat_kv paths run
    head_dim: int = 32
    max_position_embeddings: int = 4096
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True  # copying a word from the context is easier through tied embeddings


@dataclass
class TrainSettings:
    seed: int = 20261130
    steps: int = 9000
    warmup_steps: int = 100
    learning_rate: float = 5e-4
    betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    sequences_per_step: int = 64
    tokens_per_step: int = 65536  # long sequences come fewer to a step, so a step's cost stays bounded
    min_sequence_tokens: int = 64
    max_sequence_tokens: int = 2304  # a 2,048-word document, its prompt and four questions
    curriculum_fraction: float = 0.6
    short_batch_fraction: float = 0.2  # batches whose length is drawn below the curriculum's
    questions_per_sequence: int = 4
    min_facts: int = 4
    max_facts: int = 8
    log_every: int = 250
    checkpoint_every: int = 1000
    num_workers: int = 0
    device: str = "auto"
    model: ModelShape = field(default_factory=ModelShape)

    @classmethod
    def from_dict(cls, values: dict) -> "TrainSettings":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown training settings {unknown}; known: {sorted(known)}")
        values = dict(values)
        if "model" in values:
            values["model"] = ModelShape(**values["model"])
        if "betas" in values:
            values["betas"] = tuple(values["betas"])
        return cls(**values)


# ----------------------------------------------------------------------------------------------- data


class Vocabulary:
    """Word -> id as the canary's word-level tokenizer maps them (each word of these texts is one token)."""

    def __init__(self, tokenizer):
        self.ids = tokenizer.get_vocab()
        self.bos, self.eos, self.pad = tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id

    def encode(self, text: str) -> list[int]:
        return [self.ids[word] for word in text.split()]


def training_sequence(rng: random.Random, vocab: Vocabulary, max_tokens: int, settings: TrainSettings) -> tuple[list[int], list[int]]:
    """A random document and several of its questions, as (input ids, labels), at most ``max_tokens`` long."""
    head = 1 + len(split_prompt(TASK, "", "")[0].split())
    per_question = len(_between_context_and_question().split()) + len(split_prompt(TASK, "", "what is the x of y ?")[1].split()) + MAX_ANSWER_WORDS + 1
    budget = max_tokens - head
    n_questions = max(1, min(settings.questions_per_sequence, budget // 40))
    max_words = budget - n_questions * per_question
    n_facts = min(rng.randint(max(n_questions, settings.min_facts), settings.max_facts), max(n_questions, max_words // 12))
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
    context_text, _ = split_prompt(TASK, context, "")
    ids = [vocab.bos] + vocab.encode(context_text)
    is_target = [False] * len(ids)
    for turn, fact in enumerate(asked):
        _, question_text = split_prompt(TASK, context, synthetic_question(fact))
        question = (vocab.encode(_between_context_and_question()) if turn else []) + vocab.encode(question_text)
        answer = vocab.encode(fact["value"]) + [vocab.eos]
        ids += question + answer
        is_target += [False] * len(question) + [True] * len(answer)
    labels = [ids[t + 1] if is_target[t + 1] else IGNORE for t in range(len(ids) - 1)] + [IGNORE]
    return ids, labels


def _between_context_and_question() -> str:
    """What the prompt puts between the document and the question ("question :"), repeated per turn."""
    return PROMPTS[TASK].split("{context}", 1)[1].split("{input}", 1)[0]


def sequence_length_at(step: int, settings: TrainSettings) -> int:
    """The curriculum: the longest sequence allowed at ``step``."""
    ramp = max(1, int(settings.steps * settings.curriculum_fraction))
    fraction = min(1.0, step / ramp)
    low, high = settings.min_sequence_tokens, settings.max_sequence_tokens
    return int(round(low + (high - low) * fraction))


def sequences_at(length: int, settings: TrainSettings) -> int:
    return max(1, min(settings.sequences_per_step, settings.tokens_per_step // length))


def training_batch(step: int, vocab: Vocabulary, settings: TrainSettings) -> dict[str, torch.Tensor]:
    """The batch of ``step``: a function of (seed, step) alone, so any worker can build any step."""
    rng = random.Random(settings.seed * 1_000_003 + step)
    length = sequence_length_at(step, settings)
    if rng.random() < settings.short_batch_fraction:  # keep short documents in practice once the curriculum is past them
        length = rng.randint(settings.min_sequence_tokens, length)
    sequences = [training_sequence(rng, vocab, length, settings) for _ in range(sequences_at(length, settings))]
    width = max(len(ids) for ids, _ in sequences)
    input_ids = torch.full((len(sequences), width), vocab.pad, dtype=torch.long)
    labels = torch.full((len(sequences), width), IGNORE, dtype=torch.long)
    for row, (ids, targets) in enumerate(sequences):  # right padding: causal attention never sees it
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, : len(targets)] = torch.tensor(targets)
    return {"step": step, "input_ids": input_ids, "labels": labels}


class StepBatches(torch.utils.data.IterableDataset):
    """Batches for steps [first, last), shared round-robin among DataLoader workers (order is kept)."""

    def __init__(self, first: int, last: int, vocab: Vocabulary, settings: TrainSettings):
        self.first, self.last, self.vocab, self.settings = first, last, vocab, settings

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        for step in range(self.first + worker, self.last, workers):
            yield training_batch(step, self.vocab, self.settings)


# ---------------------------------------------------------------------------------------------- model


def canary_tokenizer():
    from .demo_model import build_word_tokenizer

    return build_word_tokenizer(synthetic_vocabulary())


def build_canary_model(settings: TrainSettings, tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        **asdict(settings.model),
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        attn_implementation="sdpa",
    )
    torch.manual_seed(settings.seed)
    return LlamaForCausalLM(config)


def learning_rate_at(step: int, settings: TrainSettings, total_steps: int) -> float:
    if step < settings.warmup_steps:
        return settings.learning_rate * (step + 1) / settings.warmup_steps
    progress = (step - settings.warmup_steps) / max(1, total_steps - settings.warmup_steps)
    return settings.learning_rate * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def answer_loss(model, input_ids: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy on answer positions only (the LM head runs only there), and their accuracy."""
    hidden = model.model(input_ids=input_ids, use_cache=False).last_hidden_state
    selected = labels != IGNORE
    logits = model.lm_head(hidden[selected])
    targets = labels[selected]
    loss = torch.nn.functional.cross_entropy(logits.float(), targets)
    accuracy = (logits.argmax(-1) == targets).float().mean()
    return loss, accuracy


# ------------------------------------------------------------------------------------------- training


def _save_weights(model, out_dir: Path) -> None:
    """Replace out_dir's model.safetensors atomically (a killed run leaves the last whole checkpoint)."""
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".checkpoint-") as tmp:
        model.save_pretrained(tmp)
        for name in os.listdir(tmp):
            os.chmod(Path(tmp) / name, 0o644)
            os.replace(Path(tmp) / name, out_dir / name)


def _write_log(out_dir: Path, record: dict) -> None:
    tmp = out_dir / ".training_log.json.partial"
    tmp.write_text(json.dumps(record, indent=2, default=str) + "\n")
    os.replace(tmp, out_dir / "training_log.json")


def _time_step(model, batch, device) -> float:
    input_ids, labels = batch["input_ids"].to(device), batch["labels"].to(device)
    loss, _ = answer_loss(model, input_ids, labels)
    loss.backward()
    model.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(2):
        loss, _ = answer_loss(model, input_ids, labels)
        loss.backward()
        model.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) / 2 * 1.15  # the optimizer step and the data wait on top


def steps_within(budget_s: float, model, vocab: Vocabulary, settings: TrainSettings, device, started: float) -> tuple[int, dict]:
    """The most steps (up to settings.steps) whose estimated time fits what is left of ``budget_s``.

    Step time is measured at a few curriculum lengths and interpolated; the curriculum is stretched over
    the chosen step count, so shorter runs still reach the longest sequences.
    """
    probe_lengths = sorted({settings.min_sequence_tokens, (settings.min_sequence_tokens + settings.max_sequence_tokens) // 2, settings.max_sequence_tokens})
    measured = {}
    for length in probe_lengths:
        probe = dataclass_replace(settings, steps=1, min_sequence_tokens=length, max_sequence_tokens=length)
        measured[length] = _time_step(model, training_batch(0, vocab, probe), device)
    budget_s -= time.perf_counter() - started + 5.0  # what set-up and measuring took, and starting the workers

    def estimate(total: int) -> float:
        trial = dataclass_replace(settings, steps=total)
        seconds = 0.0
        for step in range(total):
            length = sequence_length_at(step, trial)
            seconds += _interpolate(measured, length)
        return seconds

    low, high = 1, settings.steps
    if estimate(high) <= budget_s:
        return high, measured
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if estimate(middle) <= budget_s else (low, middle - 1)
    return low, measured


def _interpolate(points: dict[int, float], x: int) -> float:
    keys = sorted(points)
    if x <= keys[0]:
        return points[keys[0]]
    for left, right in zip(keys, keys[1:]):
        if x <= right:
            return points[left] + (points[right] - points[left]) * (x - left) / (right - left)
    return points[keys[-1]]


def dataclass_replace(settings: TrainSettings, **changes) -> TrainSettings:
    import dataclasses

    return dataclasses.replace(settings, **changes)


def train_canary(settings: TrainSettings, out_dir: str | Path, time_budget_s: float | None = None) -> dict:
    """Train the canary into ``out_dir`` (config, tokenizer, model.safetensors, training_log.json).

    With ``time_budget_s`` the step count is cut to what fits (measured first, logged), and training stops
    and saves if it still runs past 105% of the budget; the log says which happened.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    device = pick_device(settings.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")

    tokenizer = canary_tokenizer()
    vocab = Vocabulary(tokenizer)
    model = build_canary_model(settings, tokenizer).to(device)
    calibration = None
    if time_budget_s:
        steps, measured = steps_within(time_budget_s, model, vocab, settings, device, started)
        calibration = {"budget_s": time_budget_s, "configured_steps": settings.steps, "chosen_steps": steps, "step_seconds_by_length": measured}
        log.info("time budget %.0f s: %d of %d steps fit (step seconds by length: %s)", time_budget_s, steps, settings.steps, measured)
        settings = dataclass_replace(settings, steps=steps)
        model = build_canary_model(settings, tokenizer).to(device)  # the probes touched nothing, but start clean
    model.train()
    tokenizer.save_pretrained(out)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id

    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, betas=settings.betas, weight_decay=settings.weight_decay)
    loader = torch.utils.data.DataLoader(
        StepBatches(0, settings.steps, vocab, settings),
        batch_size=None,
        num_workers=settings.num_workers,
        pin_memory=device.type == "cuda",
        prefetch_factor=4 if settings.num_workers else None,
    )
    n_parameters = sum(p.numel() for p in model.parameters())
    record = {
        "settings": asdict(settings),
        "parameters": n_parameters,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "calibration": calibration,
        "history": [],
        "steps_done": 0,
        "finished": False,
        "stopped_by_time_limit": False,
    }
    log.info("canary: %d parameters, %d steps on %s", n_parameters, settings.steps, record["device"])
    window_loss, window_accuracy, window_count, window_start = 0.0, 0.0, 0, time.perf_counter()
    step = -1
    for batch in loader:
        step = batch["step"]
        for group in optimizer.param_groups:
            group["lr"] = learning_rate_at(step, settings, settings.steps)
        input_ids = batch["input_ids"].to(device, non_blocking=True)
        labels = batch["labels"].to(device, non_blocking=True)
        loss, accuracy = answer_loss(model, input_ids, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
        optimizer.step()
        window_loss += loss.detach()
        window_accuracy += accuracy.detach()
        window_count += 1
        done = step + 1
        if done % settings.log_every == 0 or done == settings.steps:
            mean_loss = float(window_loss) / window_count
            if not math.isfinite(mean_loss):
                raise FloatingPointError(f"loss became {mean_loss} by step {done}")
            entry = {
                "step": done,
                "loss": round(mean_loss, 4),
                "answer_accuracy": round(float(window_accuracy) / window_count, 4),
                "lr": learning_rate_at(step, settings, settings.steps),
                "sequence_tokens": int(input_ids.shape[1]),
                "sequences": int(input_ids.shape[0]),
                "ms_per_step": round(1000 * (time.perf_counter() - window_start) / window_count, 1),
                "elapsed_s": round(time.perf_counter() - started, 1),
            }
            record["history"].append(entry)
            print(json.dumps(entry), flush=True)
            window_loss, window_accuracy, window_count, window_start = 0.0, 0.0, 0, time.perf_counter()
        over_time = time_budget_s is not None and time.perf_counter() - started > 1.05 * time_budget_s
        if done % settings.checkpoint_every == 0 or done == settings.steps or over_time:
            record["steps_done"] = done
            _save_weights(model, out)
            _write_log(out, record)
        if over_time:
            record["stopped_by_time_limit"] = True
            log.warning("stopped at step %d: past 105%% of the %.0f s budget", done, time_budget_s)
            break
    record["steps_done"] = step + 1
    record["finished"] = step + 1 == settings.steps
    record["seconds"] = round(time.perf_counter() - started, 1)
    _save_weights(model, out)
    _write_log(out, record)
    return record


def load_settings(path: str | Path) -> TrainSettings:
    import yaml

    return TrainSettings.from_dict(yaml.safe_load(Path(path).read_text()) or {})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Train the canary model (see kvcache_bench/train.py)")
    parser.add_argument("--config", default="config/canary-train.yaml")
    parser.add_argument("--out", required=True, help="directory for config, tokenizer, weights, training_log.json")
    parser.add_argument("--steps", type=int, help="override the config's step count")
    parser.add_argument("--num-workers", type=int, help="override the config's DataLoader workers")
    parser.add_argument("--time-budget-s", type=float, help="cut the step count to what fits, and stop past 105%%")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = load_settings(args.config)
    if args.steps:
        settings = dataclass_replace(settings, steps=args.steps)
    if args.num_workers is not None:
        settings = dataclass_replace(settings, num_workers=args.num_workers)
    record = train_canary(settings, args.out, args.time_budget_s)
    print(json.dumps({k: record[k] for k in ("steps_done", "finished", "stopped_by_time_limit", "seconds")}))


if __name__ == "__main__":
    main()

"""Training the canary: a tiny Llama that answers the synthetic long-document QA task.

With a random demo model every method scores ~0, so the demo shows nothing about compression. The canary
is small enough to commit (safetensors, fp32) and to run on 2 CPU cores, yet answers well enough that
dropping the wrong part of its KV cache costs points.

Training reads the same generator as the demo's data (``kvcache_bench.data.synthetic``) and builds each sequence
exactly as the engine prompts (``prompts.split_prompt``): BOS, the context part, then several
"question part + answer + EOS" turns about the same document; the loss is on answer tokens and EOS only.
Token ids come from the word-level vocabulary directly (each word is one token), which is what the
tokenizer produces for these texts (tests/test_synthetic_data.py checks that), and is fast enough to feed
a GPU from a few CPU workers.

Recipe (config/canary-train.yaml, which trained the committed weights): AdamW lr 5e-4, betas (0.9, 0.98),
weight decay 0.01, 64 sequences a step, bf16 autocast over fp32 weights (TF32 matmuls where fp32 remains;
an earlier experiment's bf16 at lr 1e-3 diverged to NaN, at 5e-4 with clipping it trained cleanly).

- The length curriculum is gated by what the model can do, not by the step count: sequences stay at a
  stage's length until the answer-token accuracy there reaches ``curriculum_gate_accuracy``. A fixed ramp
  (64 -> 2,304 tokens over 60% of the steps) reached long documents before the model had learned to look
  anything up, and stalled at loss 3.25.
- The learning rate warms up, holds, and decays linearly over the last ``decay_fraction`` of the run
  (warm-up/stable/decay). Under a time budget the decay starts when that fraction of the budget is left,
  so a run cut to fit a GPU lease still ends annealed; ``init_from`` continues from an earlier run's
  weights, so training can span several leases.

    python -m kvcache_bench.canary.train --config config/canary-train.yaml --out results/models/canary
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from kvcache_bench.canary.sequences import IGNORE, Curriculum, StepBatches, Vocabulary
from kvcache_bench.canary.settings import TrainSettings, dataclass_replace
from kvcache_bench.data.synthetic import (
    synthetic_vocabulary,
)
from kvcache_bench.engine.loading import pick_device
from kvcache_bench.files import write_text_atomic

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------- model


def canary_tokenizer():
    from kvcache_bench.data.demo_model import build_word_tokenizer

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


@dataclass
class Schedule:
    """Linear warm-up from ``first_step``, hold, then linear decay to zero over [decay_start, decay_end)."""

    first_step: int
    warmup_steps: int
    learning_rate: float
    decay_start: int
    decay_end: int

    @classmethod
    def for_steps(cls, settings: TrainSettings, first_step: int = 0) -> Schedule:
        decay_start = first_step + int((settings.steps - first_step) * (1 - settings.decay_fraction))
        return cls(first_step, settings.warmup_steps, settings.learning_rate, decay_start, settings.steps)

    def at(self, step: int) -> float:
        if step < self.first_step + self.warmup_steps:
            return self.learning_rate * (step - self.first_step + 1) / self.warmup_steps
        if step < self.decay_start:
            return self.learning_rate
        return self.learning_rate * max(0.0, (self.decay_end - step) / max(1, self.decay_end - self.decay_start))


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
    write_text_atomic(out_dir / "training_log.json", json.dumps(record, indent=2, default=str) + "\n")


def _previous_run(init_from: str | Path) -> dict:
    """What an earlier run left: its log (steps done, curriculum stage) and its weights' checksum."""
    from kvcache_bench.files import sha256_of

    source = Path(init_from)
    logged = json.loads((source / "training_log.json").read_text())
    return {
        "path": str(source),
        "steps_done": logged["steps_done"],
        "curriculum_stage": logged["curriculum_stage"],
        "weights_sha256": sha256_of(source / "model.safetensors"),
    }


def _start_model(settings: TrainSettings, tokenizer, device: torch.device, init_from: str | Path | None):
    """The model to train (on ``device``) and the earlier run it continues, if any."""
    model = build_canary_model(settings, tokenizer)
    previous = None
    if init_from is not None:
        from safetensors.torch import load_file

        previous = _previous_run(init_from)
        model.load_state_dict(
            load_file(Path(init_from) / "model.safetensors"), strict=False
        )  # tied lm_head is not stored
        if previous["steps_done"] >= settings.steps:
            raise ValueError(
                f"{init_from} already ran {previous['steps_done']} steps; settings.steps is {settings.steps}"
            )
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.to(device).train(), previous


class _ProgressWindow:
    """Loss and answer accuracy averaged since the last log line, and the step time they imply."""

    def __init__(self):
        self.loss, self.accuracy, self.count, self.start = 0.0, 0.0, 0, time.perf_counter()

    def add(self, loss: torch.Tensor, accuracy: torch.Tensor) -> None:
        self.loss, self.accuracy, self.count = (
            self.loss + loss.detach(),
            self.accuracy + accuracy.detach(),
            self.count + 1,
        )

    def entry(
        self, step: int, learning_rate: float, curriculum_tokens: int, input_ids: torch.Tensor, started: float
    ) -> dict:
        mean_loss = float(self.loss) / self.count
        if not math.isfinite(mean_loss):
            raise FloatingPointError(f"loss became {mean_loss} by step {step}")
        return {
            "step": step,
            "loss": round(mean_loss, 4),
            "answer_accuracy": round(float(self.accuracy) / self.count, 4),
            "lr": learning_rate,
            "curriculum_tokens": curriculum_tokens,
            "sequence_tokens": int(input_ids.shape[1]),
            "sequences": int(input_ids.shape[0]),
            "ms_per_step": round(1000 * self.seconds_per_step(), 1),
            "elapsed_s": round(time.perf_counter() - started, 1),
        }

    def seconds_per_step(self) -> float:
        return (time.perf_counter() - self.start) / self.count


def _fit_decay_to_budget(
    schedule: Schedule, settings: TrainSettings, done: int, elapsed: float, budget: float, step_s: float
) -> None:
    """Once ``decay_fraction`` of the budget is left, decay over the steps the recent step time says still fit."""
    if schedule.decay_start > done and elapsed >= (1 - settings.decay_fraction) * budget:
        steps_left = int((budget - elapsed) / step_s)
        schedule.decay_start, schedule.decay_end = done, min(settings.steps, done + max(1, steps_left))
        log.info("step %d: %.0f s of the budget left, decaying over %d steps", done, budget - elapsed, steps_left)


def _training_record(settings, model, device, time_budget_s, previous, curriculum, schedule) -> dict:
    """training_log.json as it starts: what is trained, where, and from what; history is appended as it runs."""
    first_step = previous["steps_done"] if previous else 0
    return {
        "settings": asdict(settings),
        "parameters": sum(p.numel() for p in model.parameters()),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "time_budget_s": time_budget_s,
        "init_from": previous,
        "first_step": first_step,
        "history": [],
        "curriculum_stages": [],
        "curriculum_stage": curriculum.stage,
        "schedule": asdict(schedule),
        "steps_done": first_step,
        "finished": False,
        "stopped_by_time_limit": False,
    }


def _train_step(model, optimizer, input_ids: torch.Tensor, labels: torch.Tensor, settings: TrainSettings):
    """One optimizer step on the answer tokens' loss; returns (loss, answer accuracy) as device tensors."""
    with torch.autocast(input_ids.device.type, dtype=torch.bfloat16, enabled=settings.bf16_autocast):
        loss, accuracy = answer_loss(model, input_ids, labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
    optimizer.step()
    return loss, accuracy


def train_canary(
    settings: TrainSettings,
    out_dir: str | Path,
    time_budget_s: float | None = None,
    init_from: str | Path | None = None,
) -> dict:
    """Train the canary into ``out_dir`` (config, tokenizer, model.safetensors, training_log.json).

    ``time_budget_s`` bounds the run: the learning rate starts its decay when ``decay_fraction`` of the
    budget is left, over the steps that the recent step time says still fit, and a run past 105% of the
    budget stops and saves. ``init_from`` (an earlier run's output directory) continues from its weights,
    step count and curriculum stage, with a fresh optimizer and a new warm-up.
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
    model, previous = _start_model(settings, tokenizer, device, init_from)
    first_step = previous["steps_done"] if previous else 0
    curriculum = Curriculum(settings, previous["curriculum_stage"] if previous else 0)
    schedule = Schedule.for_steps(settings, first_step)
    tokenizer.save_pretrained(out)

    optimizer = torch.optim.AdamW(
        model.parameters(), lr=settings.learning_rate, betas=settings.betas, weight_decay=settings.weight_decay
    )
    loader = torch.utils.data.DataLoader(
        StepBatches(first_step, settings.steps, curriculum, vocab, settings),
        batch_size=None,
        num_workers=settings.num_workers,
        pin_memory=device.type == "cuda",
        prefetch_factor=2 if settings.num_workers else None,
    )
    record = _training_record(settings, model, device, time_budget_s, previous, curriculum, schedule)
    log.info(
        "canary: %d parameters, steps %d.. on %s, curriculum at %d tokens",
        record["parameters"],
        first_step,
        record["device"],
        curriculum.length,
    )

    def save(done: int) -> None:
        record["steps_done"], record["curriculum_stage"], record["schedule"] = done, curriculum.stage, asdict(schedule)
        record["seconds"] = round(time.perf_counter() - started, 1)
        _save_weights(model, out)
        _write_log(out, record)

    window, recent_step_s, done, after_first_step = _ProgressWindow(), None, first_step, 0.0
    for batch in loader:
        step = batch["step"]
        learning_rate = schedule.at(step)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate
        input_ids = batch["input_ids"].to(device, non_blocking=True)
        loss, accuracy = _train_step(
            model, optimizer, input_ids, batch["labels"].to(device, non_blocking=True), settings
        )
        done = step + 1
        window.add(loss, accuracy)
        # The gate needs this step's accuracy on the host: a sync per step, cheap next to the step itself.
        if curriculum.observe(batch["stage_length"], batch["at_stage_length"], float(accuracy)):
            record["curriculum_stages"].append(
                {"step": done, "length": curriculum.length, "elapsed_s": round(time.perf_counter() - started, 1)}
            )
            log.info("step %d: curriculum opens %d-token sequences", done, curriculum.length)
        if done % settings.log_every == 0 or done == settings.steps:
            try:
                entry = window.entry(done, learning_rate, curriculum.length, input_ids, started)
            except FloatingPointError:
                save(done)
                raise
            recent_step_s = window.seconds_per_step()
            record["history"].append(entry)
            print(json.dumps(entry), flush=True)
            window = _ProgressWindow()
        elapsed = time.perf_counter() - started
        if done == first_step + 1:
            after_first_step = elapsed  # set-up and the first step's own warm-up are not a step's time
        # Before the first logged window, the mean step time since the first step
        step_s = recent_step_s or (
            (elapsed - after_first_step) / (done - first_step - 1) if done - first_step > 1 else None
        )
        if time_budget_s and step_s:
            _fit_decay_to_budget(schedule, settings, done, elapsed, time_budget_s, step_s)
        over_time = time_budget_s is not None and elapsed > 1.05 * time_budget_s
        if done % settings.checkpoint_every == 0 or over_time:
            save(done)
        if over_time:
            record["stopped_by_time_limit"] = True
            log.warning("stopped at step %d: past 105%% of the %.0f s budget", done, time_budget_s)
            break
        if done >= schedule.decay_end:
            break
    record["finished"] = done >= schedule.decay_end
    save(done)
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Train the canary model (see kvcache_bench/canary/train.py)")
    parser.add_argument("--config", default="config/canary-train.yaml")
    parser.add_argument("--out", required=True, help="directory for config, tokenizer, weights, training_log.json")
    parser.add_argument("--steps", type=int, help="override the config's step count")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting (VALUE is YAML), e.g. --set learning_rate=1e-3",
    )
    parser.add_argument("--num-workers", type=int, help="override the config's DataLoader workers")
    parser.add_argument("--time-budget-s", type=float, help="decay the learning rate to fit, and stop past 105%%")
    parser.add_argument("--init-from", help="an earlier run's output directory to continue from")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import yaml

    values = yaml.safe_load(Path(args.config).read_text()) or {}
    for assignment in args.set:
        key, _, value = assignment.partition("=")
        values[key] = yaml.safe_load(value)
    settings = TrainSettings.from_dict(values)
    if args.steps:
        settings = dataclass_replace(settings, steps=args.steps)
    if args.num_workers is not None:
        settings = dataclass_replace(settings, num_workers=args.num_workers)
    record = train_canary(settings, args.out, args.time_budget_s, args.init_from)
    print(json.dumps({k: record[k] for k in ("steps_done", "finished", "stopped_by_time_limit", "seconds")}))


if __name__ == "__main__":
    main()

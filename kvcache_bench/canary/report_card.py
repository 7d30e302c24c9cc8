"""The canary's report card: what each compression setting costs it, measured by the engine itself.

A held-out synthetic set (a seed training never uses) goes through ``cell.run_cell`` for batch-1 cells
and through ``engine.generate_padded_batch`` for the padding-unaware batched harness that ``checks.py``
refuses, so the published padding collapse can be reproduced offline. tests/test_canary.py asserts the
targets on these numbers; tools/gpu/train_canary_sweep.sh prints them right after training.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from kvcache_bench.study.prompts import SYNTHETIC_TASK

CANARY_DIR = Path(__file__).resolve().parents[2] / "resources" / "canary"
HELD_OUT_SEED = 777  # training draws its documents from (training seed, step); this seed is never used there
METHOD_KWARGS = {"snapkv": {"window_size": 8}}  # as config/demo.yaml: the prompt's question fits in 8 tokens


@dataclass(frozen=True)
class Setting:
    method: str
    retention: float = 1.0
    question_mode: str = "question_aware"
    batch_size: int = 1

    @property
    def name(self) -> str:
        mode = self.question_mode.removeprefix("question_")  # aware, agnostic, other_question
        return f"{self.method}@{self.retention:.2f}/{mode}/batch-{self.batch_size}"


REPORT_SETTINGS = (
    Setting("full_cache"),
    Setting("snapkv", 0.5),
    Setting("snapkv", 0.5, "question_agnostic"),
    Setting("snapkv", 0.25),
    Setting("snapkv", 0.25, "question_agnostic"),
    Setting("streaming_llm", 0.5),
    Setting("random", 0.5),
    Setting("snapkv", 0.5, batch_size=4),
    Setting("streaming_llm", 0.5, batch_size=4),
)


def has_weights(model_dir: str | Path = CANARY_DIR) -> bool:
    return (Path(model_dir) / "model.safetensors").is_file() and (Path(model_dir) / "config.json").is_file()


def held_out_rows(
    n_documents: int = 16,
    questions_per_document: int = 4,
    min_words: int = 256,
    max_words: int = 2048,
    facts_per_document: int = 6,
) -> list[dict]:
    """Documents of 256-2,048 tokens, six facts each among filler, four questions per document, mixed.

    Mixing matters for the batched harness: consecutive rows share a document (and its length), and a
    batch of equal lengths has no padding to go wrong.
    """
    from kvcache_bench.data.synthetic import make_synthetic_rows

    rows = make_synthetic_rows(
        n_documents,
        seed=HELD_OUT_SEED,
        min_words=min_words,
        max_words=max_words,
        facts_per_document=facts_per_document,
        questions_per_document=questions_per_document,
        task=SYNTHETIC_TASK,
    )
    random.Random(HELD_OUT_SEED).shuffle(rows)
    return rows


def _mean_f1(predictions: list[str], rows: list[dict]) -> float:
    from kvcache_bench.analysis.metrics import score_example

    scores = [score_example(SYNTHETIC_TASK, p, r["answers"]) for p, r in zip(predictions, rows)]
    return 100.0 * sum(scores) / len(scores)


def predictions_for(
    setting: Setting, rows: list[dict], model_dir: str | Path, seed: int = 0, device: str = "cpu"
) -> list[str]:
    """Answers under one setting: batch 1 through ``run_cell``; batch > 1 through the padded harness."""
    from kvcache_bench.engine.cell_runner import run_cell
    from kvcache_bench.engine.loading import ModelSettings
    from kvcache_bench.study.cell import CellRun

    model_settings = ModelSettings(
        path=str(model_dir), dtype="float32", attn_implementation="sdpa", max_context_tokens=4096, device=device
    )
    kwargs = METHOD_KWARGS.get(setting.method, {})
    if setting.batch_size == 1:
        run = CellRun(
            task=SYNTHETIC_TASK,
            model_settings=model_settings,
            method=setting.method,
            retention=setting.retention,
            question_mode=setting.question_mode,
            max_new_tokens=8,
            seed=seed,
            method_kwargs=kwargs,
        )
        records = run_cell(rows, run, progress=False)
        return [record["prediction"] for record in records]
    return _padded_predictions(setting, rows, model_settings, kwargs, seed)


def _padded_predictions(setting: Setting, rows: list[dict], model_settings, kwargs: dict, seed: int) -> list[str]:
    """What a batching harness does (left padding, presses rank the pads): refused by the pipeline."""
    import torch

    from kvcache_bench.engine.decoders.padded_batch import padded_batch_answers
    from kvcache_bench.engine.greedy import Decoding
    from kvcache_bench.engine.loading import load_for_settings
    from kvcache_bench.methods.registry import build_press
    from kvcache_bench.study.prompt_tokens import build_prompt_tokens
    from kvcache_bench.study.question_modes import QuestionMode

    if setting.question_mode != "question_aware":
        raise ValueError("the padded harness prefills the whole prompt: question-aware only")
    torch.manual_seed(seed)
    loaded = load_for_settings(model_settings)
    model, tokenizer, stop_ids = loaded.model, loaded.tokenizer, set(loaded.stop_ids)
    press = build_press(setting.method, setting.retention, kwargs, seed=seed)
    prompts = [
        build_prompt_tokens(
            tokenizer,
            SYNTHETIC_TASK,
            r["context"],
            r["input"],
            model_settings.max_context_tokens,
            chat_template=model_settings.chat_template,
        )
        for r in rows
    ]
    # the harness presses the whole padded prompt, question included: question-aware
    settings = Decoding(model, press, QuestionMode.QUESTION_AWARE, 8, stop_ids, pad_token_id=tokenizer.pad_token_id)
    return padded_batch_answers(settings, tokenizer, prompts, setting.batch_size)


def canary_report(
    model_dir: str | Path = CANARY_DIR, rows: list[dict] | None = None, settings=REPORT_SETTINGS, device: str = "cpu"
) -> dict[str, float]:
    """Mean F1 (x100) on the held-out set for each setting, keyed by ``Setting.name``."""
    rows = rows if rows is not None else held_out_rows()
    return {s.name: round(_mean_f1(predictions_for(s, rows, model_dir, device=device), rows), 1) for s in settings}


if __name__ == "__main__":
    import argparse
    import json
    import logging

    parser = argparse.ArgumentParser(description="Score a canary model directory on the held-out synthetic set")
    parser.add_argument("model_dir", nargs="?", default=str(CANARY_DIR))
    parser.add_argument("--documents", type=int, default=16)
    parser.add_argument("--device", default="cpu", help="the tests score on cpu; cuda is quicker on a GPU machine")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(json.dumps(canary_report(args.model_dir, held_out_rows(args.documents), device=args.device), indent=2))

"""One cell as the generate job runs it: one typed object on the generation path instead of a dozen keywords.

The job builds it from its wildcards and params (``CellRun.from_settings``); the engine
(``engine.cell_runner.run_cell``, ``engine.kvpress_pipeline.run_cell_on_kvpress_pipeline``) reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcache_bench.study.question_modes import HISTORY_REFERENCE, QuestionMode


@dataclass(frozen=True)
class CellRun:
    """A cell's settings (task, method, retention, question mode, batch sizes) and what else decides its records."""

    task: str
    model_settings: object  # engine.loading.ModelSettings (the study does not import the engine)
    method: str
    retention: float
    question_mode: str
    max_new_tokens: int
    seed: int
    batch_size: int = 1  # prompts prefilled together (left-padded): the full cache and kv_quant only
    decode_batch_size: int = 1  # compressed caches decoded together, each example prefilled alone
    method_kwargs: dict | None = None
    custom_methods: dict | None = None
    # multi_turn: what a later turn appends as the previous turn's answer (config multi_turn.history)
    multi_turn_history: str = HISTORY_REFERENCE

    @property
    def mode(self) -> QuestionMode:
        return QuestionMode(self.question_mode)

    @classmethod
    def from_settings(cls, settings, model_settings) -> CellRun:
        """From a job's wildcards and params (``workflow.settings_of``), on the model settings it loaded."""
        return cls(
            task=settings.task,
            model_settings=model_settings,
            method=settings.method,
            retention=settings.retention,
            question_mode=settings.question_mode,
            max_new_tokens=settings.max_new_tokens,
            seed=settings.seed,
            batch_size=settings.batch_size,
            decode_batch_size=settings.decode_batch_size,
            method_kwargs=settings.method_kwargs,
            # absent when a command line names no custom method
            custom_methods=getattr(settings, "custom_methods", None),
            # a param of multi_turn cells alone (rules/common.smk multi_turn_history)
            multi_turn_history=getattr(settings, "multi_turn_history", None) or HISTORY_REFERENCE,
        )

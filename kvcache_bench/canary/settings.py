"""The canary's training settings: model shape and recipe, read from config/canary-train.yaml."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path


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
    steps: int = 30000  # the most steps; a time budget usually ends the run first
    warmup_steps: int = 100
    learning_rate: float = 5e-4
    betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    sequences_per_step: int = 64
    tokens_per_step: int = 65536  # long sequences come fewer to a step, so a step's cost stays bounded
    min_sequence_tokens: int = 64
    curriculum_lengths: tuple[int, ...] = (
        128,
        256,
        512,
        1024,
        1536,
        2304,
    )  # 2,304: a 2,048-word document, its prompt and questions
    curriculum_gate_accuracy: float = 0.9  # answer-token accuracy at a stage's length that opens the next stage
    curriculum_window: int = 100  # steps at the stage's length that the gate averages over
    short_batch_fraction: float = (
        0.2  # batches whose length is drawn below the stage's, so short documents stay in practice
    )
    decay_fraction: float = 0.2
    bf16_autocast: bool = False
    questions_per_sequence: int = 4
    min_facts: int = 4
    max_facts: int = 8
    log_every: int = 250
    checkpoint_every: int = 1000
    num_workers: int = 0
    device: str = "auto"
    model: ModelShape = field(default_factory=ModelShape)

    @classmethod
    def from_dict(cls, values: dict) -> TrainSettings:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown training settings {unknown}; known: {sorted(known)}")
        values = dict(values)
        if "model" in values:
            values["model"] = ModelShape(**values["model"])
        for name in ("betas", "curriculum_lengths"):
            if name in values:
                values[name] = tuple(values[name])
        for name in (
            "learning_rate",
            "weight_decay",
            "grad_clip",
            "curriculum_gate_accuracy",
            "short_batch_fraction",
            "decay_fraction",
        ):
            if name in values:
                values[name] = float(values[name])  # YAML reads 5e-4 (no dot) as a string
        settings = cls(**values)
        if (
            list(settings.curriculum_lengths) != sorted(set(settings.curriculum_lengths))
            or settings.curriculum_lengths[0] < settings.min_sequence_tokens
        ):
            raise ValueError(
                f"curriculum_lengths must rise and start at >= min_sequence_tokens, got {settings.curriculum_lengths}"
            )
        return settings

    @property
    def max_sequence_tokens(self) -> int:
        return self.curriculum_lengths[-1]


def dataclass_replace(settings: TrainSettings, **changes) -> TrainSettings:
    import dataclasses

    return dataclasses.replace(settings, **changes)


def load_settings(path: str | Path) -> TrainSettings:
    import yaml

    return TrainSettings.from_dict(yaml.safe_load(Path(path).read_text()) or {})

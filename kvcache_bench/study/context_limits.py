"""How many positions a model was trained on, read from its config, and the study's prompt limit held against it.

A prompt past a model's trained context runs without an error: RoPE computes any position, and the model answers
from positions it never saw in training, which makes it another model than the one the table names (issue 51: a
folder whose config.json says ``max_position_embeddings: 64`` ran 729-token prompts, its records saying
``truncated: false``). LongBench's pred.py leaves room for the answer: its ``max_length`` (127,500 for a 128k model)
plus the task's ``max_gen`` fits the model's context. Here:

* ``models.<name>.max_context_tokens`` above the model's trained context is refused: at parse where the parse can
  read the folder's config.json (a local folder), else by the job that loads the model, naming both numbers. It is
  a setting of the whole study, known before any prompt; clamping it would make the config say one limit and the
  records another.
* A prompt that fits ``max_context_tokens`` but not the positions left once its answer's ``max_new_tokens`` are
  counted is cut further, in its middle, as LongBench cuts (``study.prompt_tokens.prompt_within_context``), and
  its record says ``truncated: true``, ``truncated_by: model_context``. Its length depends on the row and the task
  (each task's answer length differs), so a study-wide refusal would refuse a whole model for one long row.

Read without transformers (a parse pays no import for it): a config is a dict, config.json's or the loaded
model's ``config.to_dict()``.
"""

from __future__ import annotations

from dataclasses import dataclass

# transformers' names for a model's trained positions: most architectures' max_position_embeddings (Llama, Qwen,
# Mistral, Gemma, Gemma 3's text config), GPT-2's family's n_positions (and its older n_ctx), DBRX's max_seq_len;
# a few remote-code models' max_sequence_length or seq_length. A multimodal config (Gemma 3's
# Gemma3ForConditionalGeneration) holds its language model's under text_config.
CONTEXT_FIELDS = ("max_position_embeddings", "n_positions", "max_seq_len", "max_sequence_length", "seq_length", "n_ctx")
ROPE_FIELDS = ("rope_scaling", "rope_parameters")  # transformers 5 writes rope_parameters, older configs rope_scaling


@dataclass(frozen=True)
class ModelContext:
    tokens: int  # positions the model was trained on (or that its config's RoPE scaling declares it runs at)
    source: str  # where that number was read, e.g. "max_position_embeddings", "text_config.max_position_embeddings"


def _whole_number(value) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 1 else None


def model_context(config: dict) -> ModelContext | None:
    """The positions ``config`` (config.json, or ``model.config.to_dict()``) says the model runs at; None when it
    names none (a state-space model, or a field this list does not know: then nothing is checked)."""
    if not isinstance(config, dict):
        return None
    text_config = config.get("text_config")
    # the language model's own config first: in a multimodal config it is what reads the prompt
    sections = ([("text_config.", text_config)] if isinstance(text_config, dict) else []) + [("", config)]
    for prefix, section in sections:
        for field in CONTEXT_FIELDS:
            tokens = _whole_number(section.get(field))
            if tokens is None:
                continue
            found = ModelContext(tokens, f"{prefix}{field}")
            # A RoPE scaling that names the length it extends and its factor declares the longer context (Qwen2.5's
            # YaRN recipe: max_position_embeddings 32768, original 32768 x factor 4). Llama 3.1's llama3 scaling
            # (8192 x 8) is below its max_position_embeddings (131072) and changes nothing; Gemma 3's linear
            # scaling names no original length, its max_position_embeddings being the extended one already.
            for rope_field in ROPE_FIELDS:
                rope = section.get(rope_field)
                if not isinstance(rope, dict):
                    continue
                original = _whole_number(rope.get("original_max_position_embeddings"))
                factor = rope.get("factor")
                if original and isinstance(factor, (int, float)) and int(original * factor) > found.tokens:
                    kind = rope.get("rope_type") or rope.get("type") or "RoPE"
                    found = ModelContext(
                        int(original * factor),
                        f"{prefix}{rope_field}: original_max_position_embeddings {original} x {kind} factor {factor}",
                    )
            return found
    return None


def longest_answer(config: dict) -> tuple[int, str | None]:
    """(the most tokens any task of the study generates, that task): each prompt must leave room for its answer."""
    from kvcache_bench.study.prompts import KNOWN_TASKS, max_new_tokens_for

    overrides = (config.get("generation") or {}).get("max_new_tokens") or {}
    tasks = [task for dataset in config["datasets"].values() for task in dataset.get("tasks") or []]
    lengths = [(max_new_tokens_for(task, overrides.get(task)), task) for task in tasks if task in KNOWN_TASKS]
    return max(lengths, default=(0, None))


def context_setting_problem(
    key: str, max_context_tokens: int, context: ModelContext, described_by: str, answer_tokens: int, task: str | None
) -> str | None:
    """``max_context_tokens`` (the setting ``key``) against the model's trained context (``described_by``: the file
    it was read from) and the longest answer (``answer_tokens``, of ``task``); None when a prompt fits."""
    answers = f"max_new_tokens for task {task} is {answer_tokens}"
    if answer_tokens and context.tokens - answer_tokens < 16:  # the schema's least max_context_tokens
        return (
            f"{described_by} gives the model {context.tokens} positions ({context.source}), and {answers}: that "
            f"leaves {max(0, context.tokens - answer_tokens)} for a prompt. Lower generation.max_new_tokens for "
            f"{task}, or use a model trained on a longer context."
        )
    if max_context_tokens <= context.tokens:
        return None
    further = (
        f"; a prompt is then cut further, to {context.tokens - answer_tokens} tokens, where it must leave room for "
        f"its answer ({answers})"
    )
    return (
        f"{key} is {max_context_tokens}, but {described_by} gives the model {context.tokens} positions "
        f"({context.source}): a prompt of {context.tokens + 1} to {max_context_tokens} tokens would be read at "
        f"positions it was never trained on, as another model. Set {key} to at most {context.tokens}"
        f"{further if answer_tokens else ''}."
    )

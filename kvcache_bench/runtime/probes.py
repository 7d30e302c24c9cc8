"""Probes of a real model that explain its compression numbers: does it lean on an attention sink, and
does the published padding collapse happen to it?

* ``attention_on_first_position``: per layer, the mean attention weight that queries put on position 0.
  StreamingLLM keeps the first positions because many models park attention there (a "sink"); a model
  that does not is hurt less by losing them, and a batching harness whose first positions are pads
  (left padding) hurts it less.
* ``padding_effect``: the same harness (``model.generate`` under the press, question-aware) at batch 1
  and on left-padded batches, so the only difference is the padding the press ranks alongside the text,
  and how many pad positions the press kept in each padded row and layer (``pads_kept``).
  ``checks.py`` refuses this configuration in the study; here it is measured on purpose.
"""

from __future__ import annotations

import sys

import torch

from kvcache_bench.analysis.metrics import score_example
from kvcache_bench.engine.caches import attention_modules, clear_key_masks
from kvcache_bench.engine.decoders.padded_batch import left_padded_batch, padded_batch_answers
from kvcache_bench.engine.greedy import Decoding
from kvcache_bench.engine.loading import stop_token_ids
from kvcache_bench.engine.prefill import press_context
from kvcache_bench.methods.registry import build_press
from kvcache_bench.study.cell import CellRun
from kvcache_bench.study.context_limits import model_context
from kvcache_bench.study.prompt_tokens import prompt_within_context
from kvcache_bench.study.question_modes import QuestionMode


@torch.inference_mode()
def attention_on_first_position(model, token_ids: list[int]) -> list[float]:
    """Mean attention weight on position 0, per layer, over heads and every query but position 0 itself.

    The model must run eager attention (the only implementation that returns attention weights).
    """
    outputs = model(input_ids=torch.tensor([token_ids], device=model.device), output_attentions=True, use_cache=False)
    return [float(layer[0, :, 1:, 0].mean()) for layer in outputs.attentions]


def attention_sink_report(
    model, tokenizer, rows: list[dict], task: str, max_context_tokens: int, chat_template: bool = True
) -> dict:
    """Per-layer attention on position 0, averaged over ``rows``' prompts (as the engine builds them)."""
    per_row, lengths = [], []
    trained = (context := model_context(model.config.to_dict())) and context.tokens
    for row in rows:
        # no answer is generated: the prompt alone must fit the positions the model was trained on
        prompt = prompt_within_context(
            tokenizer,
            task,
            row,
            max_context_tokens,
            model_context=trained,
            answer_tokens=0,
            chat_template=chat_template,
        )
        per_row.append(attention_on_first_position(model, prompt.context_ids + prompt.question_ids))
        lengths.append(prompt.length)
    layers = len(per_row[0])
    per_layer = [sum(r[layer] for r in per_row) / len(per_row) for layer in range(layers)]
    # Early layers attend locally and the last ones to the answer: the middle of the stack says whether
    # the model parks attention on its first token.
    first, last = layers // 6, layers - layers // 6
    middle = per_layer[first:last]
    # What position 0 would get if every query spread its attention evenly over the keys it can see.
    uniform = sum(sum(1 / (q + 1) for q in range(1, n)) / (n - 1) for n in lengths) / len(lengths)
    return {
        "task": task,
        "examples": len(rows),
        "prompt_tokens": lengths,
        "layers": layers,
        "mean_attention_on_position_0_per_layer": [round(x, 4) for x in per_layer],
        "mean_attention_on_position_0_middle_layers": round(sum(middle) / len(middle), 4),
        "middle_layers": [first, last - 1],
        "if_attention_were_uniform": round(uniform, 4),
    }


def write_padding_report(job, loaded, data: dict, worker: dict | None = None) -> None:
    """The probe_padding rule's job on ``loaded`` (loaded here, or by a model worker: ``worker`` says which):
    the press at batch 1 and on left-padded batches, its report and manifest."""
    from kvcache_bench.files import read_jsonl, write_json_atomic
    from kvcache_bench.manifest import write_manifest
    from kvcache_bench.workflow import params_of, settings_of

    p = settings_of(job)
    rows = interleave_by_length([read_jsonl(path)[: p.examples_per_dataset] for path in job.input.rows])
    run = CellRun(
        task=p.task,
        model_settings=loaded.settings,
        method=p.method,
        retention=p.retention,
        question_mode=QuestionMode.QUESTION_AWARE.value,
        max_new_tokens=p.max_new_tokens,
        seed=p.seed,
        batch_size=p.batch_size,
        method_kwargs=p.method_kwargs,
    )
    report = padding_effect(loaded.model, loaded.tokenizer, rows, run)
    write_json_atomic(job.output.report, report)
    extra = {
        "examples": len(rows),
        "data_sha256": {path: manifest["content"]["sha256"] for path, manifest in data.items()},
    }
    write_manifest(job.output.report, params_of(job), p.seed, extra={**extra, **({"worker": worker} if worker else {})})
    print(
        f"{p.method}: {report['changed_answers']}/{len(rows)} answers changed; "
        f"score {report['score_batch_1']} -> {report['score_padded_batch']}",
        file=sys.stderr,
    )


def interleave_by_length(rows_by_source: list[list[dict]]) -> list[dict]:
    """Rows from several sources (e.g. 1k- and 2k-token sets) alternated, so each batch mixes lengths:
    a batch of equal lengths has no padding to go wrong."""
    mixed = []
    for group in zip(*rows_by_source):
        mixed.extend(group)
    return mixed


def padding_effect(model, tokenizer, rows: list[dict], run: CellRun) -> dict:
    """Answers of the batching harness at batch 1 and on left-padded batches of ``run.batch_size`` (the press of
    ``run.method`` at ``run.retention``, question-aware: the question in the padded prompt, as kvpress batched it)."""
    task, method, retention, batch_size = run.task, run.method, run.retention, run.batch_size
    max_new_tokens, method_kwargs, seed = run.max_new_tokens, run.method_kwargs, run.seed
    max_context_tokens = run.model_settings.max_context_tokens
    chat = run.model_settings.chat_template
    trained = (context := model_context(model.config.to_dict())) and context.tokens
    prompts = [
        prompt_within_context(
            tokenizer,
            task,
            r,
            max_context_tokens,
            model_context=trained,
            answer_tokens=max_new_tokens,
            chat_template=chat,
        )
        for r in rows
    ]
    stop_ids = stop_token_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def answers_at(size: int) -> list[str]:
        torch.manual_seed(seed)
        press = build_press(method, retention, method_kwargs, seed=seed)
        # the harness presses the whole padded prompt, question included: question-aware
        settings = Decoding(model, press, QuestionMode.QUESTION_AWARE, max_new_tokens, stop_ids, pad_token_id=pad_id)
        return padded_batch_answers(settings, tokenizer, prompts, size)

    def mean_score(answers: list[str]) -> float:
        return round(100 * sum(score_example(task, a, r["answers"]) for a, r in zip(answers, rows)) / len(rows), 2)

    alone, padded = answers_at(1), answers_at(batch_size)
    pads, kept = [], []
    for start in range(0, len(prompts), batch_size):
        chunk = [p.context_ids + p.question_ids for p in prompts[start : start + batch_size]]
        width = max(len(ids) for ids in chunk)
        pads.extend(width - len(ids) for ids in chunk)
        torch.manual_seed(seed)
        kept.extend(pads_kept(model, chunk, build_press(method, retention, method_kwargs, seed=seed), pad_id))
    scores_alone = [score_example(task, a, r["answers"]) for a, r in zip(alone, rows)]
    scores_padded = [score_example(task, b, r["answers"]) for b, r in zip(padded, rows)]
    return {
        "task": task,
        "method": method,
        "retention": retention,
        "batch_size": batch_size,
        "examples": len(rows),
        "changed_answers": sum(a != b for a, b in zip(alone, padded)),
        "score_batch_1": mean_score(alone),
        "score_padded_batch": mean_score(padded),
        "pad_tokens_per_row": pads,
        # per row, per layer: pad positions still in the cache after the press, averaged over KV heads
        "pads_kept_per_row_and_layer": kept,
        "answers": [
            {
                "id": r["_id"],
                "batch_1": a,
                "padded_batch": b,
                "references": r["answers"],
                "score_batch_1": x,
                "score_padded_batch": y,
            }
            for r, a, b, x, y in zip(rows, alone, padded, scores_alone, scores_padded)
        ],
    }


@torch.inference_mode()
def pads_kept(model, rows: list[list[int]], press, pad_token_id: int) -> list[list[float]]:
    """Per row of one left-padded batch and per layer, how many pad positions ``press`` left visible in the
    cache (mean over KV heads): the published write-up's missing number.

    The harness's prefill runs twice on the same batch, without and with the press. Kept keys are copies
    of uncompressed ones, so each kept slot is matched to its nearest original key; a slot matched to a
    position before the row's first token is a pad (pads share one token and one position, so their keys
    are equal and any of them is the same answer). Slots a press hides with kvpress's fake keys
    (``masked_key_indices``) are not counted.
    """
    input_ids, mask = left_padded_batch(rows, pad_token_id, model.device)
    pads = [input_ids.shape[1] - len(ids) for ids in rows]
    full, _ = _prefilled_cache(model, input_ids, mask, None)
    compressed, masked = _prefilled_cache(model, input_ids, mask, press)
    kept = [[] for _ in rows]
    for layer, (original, pressed) in enumerate(zip(full.layers, compressed.layers)):
        hidden = _hidden_slots(masked[layer])
        for row, row_pads in enumerate(pads):
            heads = pressed.keys.shape[1]
            count = 0
            for head in range(heads):
                nearest = torch.cdist(pressed.keys[row, head].float(), original.keys[row, head].float()).argmin(dim=1)
                visible = [slot for slot in range(nearest.shape[0]) if (row, head, slot) not in hidden]
                count += int((nearest[visible] < row_pads).sum()) if visible else 0
            kept[row].append(round(count / heads, 2))
    return kept


def _prefilled_cache(model, input_ids, mask, press):
    """The cache after the harness's prefill (``generate`` stopped after its first token), and the slots
    the press hid per layer."""
    from transformers import DynamicCache

    cache = DynamicCache()
    clear_key_masks(model)
    with press_context(press, model):
        model.generate(
            input_ids=input_ids,
            attention_mask=mask,
            past_key_values=cache,
            max_new_tokens=1,
            do_sample=False,
            pad_token_id=0,
        )
    masked = [getattr(module, "masked_key_indices", None) for module in attention_modules(model)]
    return cache, masked


def _hidden_slots(masked) -> set[tuple[int, int, int]]:
    if masked is None:
        return set()
    return set(zip(*(t.tolist() for t in masked[:3])))

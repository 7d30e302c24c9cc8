"""The config check that every generation job waits for.

Why it exists: batching left-pads short prompts, and a press's scoring step ranks the pad positions
alongside the real text (StreamingLLM's "sink" tokens are literally the pads). A published run lost
SnapKV 48.3 -> 15.7 F1 this way. Batched *prefill* with an evicting method is therefore refused.
"""

from __future__ import annotations

from kvcache_bench.methods.registry import FULL_RETENTION, UnknownMethodError, get_method
from kvcache_bench.study.cell import CellRun
from kvcache_bench.study.cells import Cell, setting_slug
from kvcache_bench.study.press_values import decoding_budget_problem
from kvcache_bench.study.prompts import KNOWN_TASKS
from kvcache_bench.study.question_modes import QUESTION_MODES, QuestionMode


class ConfigCheckError(ValueError):
    pass


def problems_with(
    setting: Cell | CellRun,
    custom_methods: dict | None = None,
    measured: dict | None = None,
    max_new_tokens: int | None = None,
    sliding_layers: str | None = None,
) -> list[str]:
    """Everything wrong with a target, judged from the config (no kvpress import: it is cheap) and, when given,
    from the method's measured properties (its check job's output, ``methods.method_properties``) and the
    cell's ``max_new_tokens`` (a decoding-time budget must compress within them).

    ``setting`` is a ``Cell``, or the ``CellRun`` a generation job runs (whatever its dataset and model are called):
    only its task, method, question mode, retention and batch sizes are read. ``sliding_layers``: the setting its
    model runs with when the model has sliding-window layers (``study.sliding_layers.sliding_layers_of``)."""
    task, method, question_mode = setting.task, setting.method, setting.question_mode
    retention, batch_size, decode_batch_size = setting.retention, setting.batch_size, setting.decode_batch_size
    problems = []
    try:
        spec = get_method(method, custom_methods)
    except UnknownMethodError as error:
        return [str(error)]
    if measured is not None:
        problems += measured_problems(
            method,
            measured,
            batch_size=batch_size,
            decode_batch_size=decode_batch_size,
            question_mode=question_mode,
            max_new_tokens=max_new_tokens,
            sliding_layers=sliding_layers,
        )
    if task not in KNOWN_TASKS:
        problems.append(f"unknown task {task!r}; known tasks: {', '.join(sorted(KNOWN_TASKS))}")
    if question_mode not in QUESTION_MODES:
        problems.append(f"unknown question mode {question_mode!r}; allowed: {', '.join(QUESTION_MODES)}")
    if batch_size < 1:
        problems.append(f"batch size must be >= 1, got {batch_size}")
    if decode_batch_size < 1:
        problems.append(f"decode batch size must be >= 1, got {decode_batch_size}")
    if question_mode == QuestionMode.MULTI_TURN and batch_size > 1:
        problems.append(
            f"the multi_turn mode prefills each conversation's first turn alone and decodes turns together: batch size "
            f"{batch_size} would pad first turns into one press call. Use batch size 1 and decode_batch_size."
        )
    if batch_size > 1 and decode_batch_size > 1:
        problems.append(
            f"batch size {batch_size} already decodes its padded batch together; "
            f"decode batch size {decode_batch_size} applies to batch size 1 only"
        )
    if spec.evicts and batch_size > 1 and measured is None:  # the declared cross-check, at parse time
        problems.append(
            f"{spec.label} evicts cache entries and batch size is {batch_size}: left padding would be "
            "scored alongside the prompt (the padding collapse). Use batch size 1 for eviction methods; "
            "only methods that keep every token (full_cache, kv_quant_*) may batch."
        )
    if spec.kv_cache_bits is not None and sliding_layers is not None:
        problems.append(
            f"{spec.label} quantises the cache, and this model has sliding-window layers: a quantised cache's windows "
            "are masked by slots, which this engine does not do; run it on a model without sliding layers"
        )
    if not spec.evicts and retention != FULL_RETENTION:
        problems.append(f"{spec.label} keeps the whole cache; its retention must be 1.0, not {retention}")
    if spec.evicts and not 0.0 < retention < 1.0:
        problems.append(f"{spec.label} retention must be in (0, 1), got {retention}")
    return problems


def measured_problems(
    method: str,
    measured: dict,
    *,
    batch_size: int,
    decode_batch_size: int,
    question_mode: str = QuestionMode.QUESTION_AWARE.value,
    max_new_tokens: int | None = None,
    sliding_layers: str | None = None,
) -> list[str]:
    """Refusals from what the method was measured to do, so that a custom press is judged like a built-in one."""
    problems = []
    if sliding_layers is not None:
        problems += sliding_layer_problems(method, measured, sliding_layers)
    if measured.get("needs_hub_data"):
        problems.append(
            f"{method} needs data from the Hugging Face hub, unreachable here; provide {measured['needs_hub_data']}"
        )
    elif measured.get("status") == "fails":
        problems.append(f"{method} fails on a tiny model: {measured.get('error')}")
    if measured.get("cache_growth", 1.0) > 1.0:
        problems.append(
            f"{method} leaves a cache {measured['cache_growth']:g}x as long as the prompt it compressed (measured on a "
            "tiny model): no mask hides the slots past the prompt's own (KVCompose unstructured keeps its second "
            "pass's whole copy of the context), so its cells would not measure the compression they ask for"
        )
    changes_slots = [what for what in ("removes_tokens", "masks_slots") if measured.get(what)]
    if changes_slots and batch_size > 1:
        share = measured.get("padded_row_pad_share")
        measured_share = (
            f"; measured: {share:.0%} of the padded row's kept slots were pads" if share is not None else ""
        )
        problems.append(
            f"{method} {' and '.join(w.replace('_', ' ') for w in changes_slots)} and batch size is {batch_size}: "
            f"left padding would be scored alongside the prompt (the padding collapse{measured_share}). "
            "Use batch size 1."
        )
    if (
        measured.get("masks_slots")
        and question_mode in QUESTION_MODES
        and QuestionMode(question_mode).removes_the_question_it_showed
    ):
        problems.append(
            f"{method} masks slots per head, and the {question_mode} mode removes the question it showed from the "
            "cache slot by slot: the two cannot be combined (docs/other-question.md). Use question_aware or "
            "question_agnostic."
        )
    if measured.get("compresses_while_decoding"):
        problems += while_decoding_problems(
            method, measured, batch_size=batch_size, question_mode=question_mode, max_new_tokens=max_new_tokens
        )
    return problems


def sliding_layer_problems(method: str, measured: dict, sliding_layers: str) -> list[str]:
    """A press that did not run on a tiny Gemma 3 with this setting (measured by its check), or one that compresses
    while decoding: its hooks would evict from sliding windows between steps, which the engine's masks, built from
    each window's positions at the prompt, do not follow."""
    facts = (measured.get("sliding_layers") or {}).get(sliding_layers)
    if facts is not None and not facts.get("runs"):
        return [
            f"{method} does not run on a model with sliding-window layers (sliding_layers: {sliding_layers}), measured "
            f"on a tiny Gemma 3: {facts.get('error')}"
        ]
    if measured.get("compresses_while_decoding"):
        return [
            f"{method} compresses while decoding: on a model with sliding-window layers its hooks would evict from the "
            "windows between decode steps, which this engine does not follow (it masks each window by the positions "
            "its slots held after the prompt)"
        ]
    return []


def while_decoding_problems(
    method: str, measured: dict, *, batch_size: int, question_mode: str, max_new_tokens: int | None
) -> list[str]:
    """A press that compresses while decoding runs one example at a time (question-aware, question-agnostic or a
    multi_turn turn), with a budget that compresses within the cell's new tokens (decode batching falls back to batch
    1, said in each record)."""
    problems = []
    if batch_size > 1:
        problems.append(
            f"{method} compresses while decoding, and kvpress's hooks keep one sequence's step counts and hidden "
            f"states: batch size {batch_size} cannot be decoded under it. Use batch size 1."
        )
    if question_mode in QUESTION_MODES and QuestionMode(question_mode).removes_the_question_it_showed:
        problems.append(
            f"{method} compresses while decoding, after the prompt is in the cache: the {question_mode} mode "
            "compresses the context with a question and removes that question before answering, which such a press "
            "never does (it sees no prompt-time compression to remove from). Use question_aware, question_agnostic or "
            "multi_turn."
        )
    construction = measured.get("construction")
    if construction is None and measured.get("decoding_budget"):  # shipped facts carry the default budget alone
        construction = {"kwargs": measured["decoding_budget"]}
    if max_new_tokens is not None and (problem := decoding_budget_problem(method, construction, max_new_tokens)):
        problems.append(problem)
    return problems


def decode_note(method: str, measured: dict | None, decode_batch_size: int) -> str | None:
    """What a cell at ``decode_batch_size`` will do other than its name says (it runs; its records say so too):
    a press that compresses while decoding decodes one example at a time (a masking press's rows decode together,
    each with its own masks, in either question mode)."""
    if measured is None or decode_batch_size <= 1:
        return None
    if measured.get("compresses_while_decoding"):
        return (
            f"{method} compresses while decoding: its decode batch {decode_batch_size} cells decode one example "
            "at a time"
        )
    return None


def problems_of(
    fields: dict,
    custom_methods: dict | None = None,
    measured: dict | None = None,
    max_new_tokens: int | None = None,
    sliding_layers: str | None = None,
) -> list[str]:
    """``problems_with`` for a cell given as a dict of its fields (what kvcache_bench.study.cells passes)."""
    return problems_with(Cell(**fields), custom_methods, measured, max_new_tokens, sliding_layers)


def check_cell(
    cell: Cell, custom_methods: dict | None = None, measured: dict | None = None, max_new_tokens: int | None = None
) -> None:
    _refuse(cell.target, problems_with(cell, custom_methods, measured, max_new_tokens))


def check_setting(run: CellRun) -> None:
    """``check_cell`` for a job that knows what it runs but not its cell's names (``engine.cell_runner``)."""
    target = (
        f"{run.task}/{run.method}/{run.question_mode}/"
        f"{setting_slug(run.retention, run.batch_size, run.decode_batch_size)}"
    )
    _refuse(target, problems_with(run, run.custom_methods))


def _refuse(target: str, problems: list[str]) -> None:
    if problems:
        raise ConfigCheckError(f"refused target {target}:\n" + "\n".join(f"  - {p}" for p in problems))

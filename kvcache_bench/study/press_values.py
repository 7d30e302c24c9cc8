"""The values of a press's kwargs: their types and ranges at parse time, windows against the prompts they meet.

kvpress asserts these deep inside a forward pass (``Query length 333 should be greater than the window size
1000``), once per generate job, after the model has loaded. Which kwargs a press accepts at all is the
signature check's (kvcache_bench.methods); this module judges only the values, so that check can call it.
"""

from __future__ import annotations

from kvcache_bench.methods.constructions import decoding_budget

# kvpress 0.5.5's numeric press fields (their dataclass annotations) and the least value each accepts.
INTEGER_KWARGS = {"window_size": 1, "kernel_size": 1, "n_sink": 0, "n_future_positions": 1, "beta": 1}
BOOLEAN_KWARGS = {"use_covariance", "use_vnorm"}
NON_NEGATIVE_NUMBER_KWARGS = {"epsilon"}
# Kwargs a prompt must be longer than, in tokens: kvpress's assertions (SnapKV's and PyramidKV's window, the sinks).
PROMPT_MUST_EXCEED = ("window_size", "n_sink")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def kwarg_value_problems(method: str, kwargs: dict) -> list[str]:
    """Each kwarg of the wrong type or out of range, named as the config writes it (method_kwargs.<method>.<kwarg>)."""
    problems = []
    for name, value in (kwargs or {}).items():
        where = f"method_kwargs.{method}.{name} is {value!r}"
        if name in INTEGER_KWARGS:
            if isinstance(value, bool) or not isinstance(value, int):
                problems.append(
                    f"{where}: it must be a whole number of tokens (an integer), not {type(value).__name__}"
                )
            elif value < INTEGER_KWARGS[name]:
                problems.append(f"{where}: it must be at least {INTEGER_KWARGS[name]}")
        elif name in BOOLEAN_KWARGS and not isinstance(value, bool):
            problems.append(f"{where}: it must be true or false, not {type(value).__name__}")
        elif name in NON_NEGATIVE_NUMBER_KWARGS and (not _is_number(value) or value < 0):
            problems.append(f"{where}: it must be a number >= 0")
        elif _is_number(value) and value < 0:
            problems.append(f"{where}: a negative size or count has no meaning for a press")
    return problems


def method_kwargs_value_problems(config: dict) -> list[str]:
    return [
        problem
        for method, kwargs in (config.get("method_kwargs") or {}).items()
        for problem in kwarg_value_problems(method, kwargs)
    ]


def prompt_length_problem(method: str, kwargs: dict, pressed_lengths: list[int]) -> str | None:
    """A window (or sink) at least as long as the shortest prompt the press compresses: refused with both numbers."""
    if not pressed_lengths:
        return None
    shortest = min(pressed_lengths)
    for name in PROMPT_MUST_EXCEED:
        value = (kwargs or {}).get(name)
        if _is_number(value) and value >= shortest:
            return (
                f"method_kwargs.{method}.{name} is {value}, but the shortest prompt the press compresses has "
                f"{shortest} tokens (of {len(pressed_lengths)}; longest {max(pressed_lengths)}): kvpress needs every "
                f"prompt longer than the {name}. Lower {name} below {shortest}."
            )
    return None


def decoding_budget_problem(
    method: str, construction: dict | None, max_new_tokens: int, prompt_lengths: list[int] | None = None
) -> str | None:
    """A decoding-time budget that cannot compress within ``max_new_tokens`` new tokens, named as the config sets it.

    kvpress's DecodingPress compresses a layer when ``compression_interval`` forward passes under the press have run
    (the question's and then one per new token but the last: ``max_new_tokens`` in all), down to ``target_size``
    tokens. With an interval above max_new_tokens it never compresses; with a target_size at least the longest prompt
    plus its answer (``prompt_lengths``, where known) there is never anything to remove. Either way the cell would
    measure the full cache under the method's name."""
    budget = decoding_budget(construction)
    interval, target = budget.get("compression_interval"), budget.get("target_size")
    if _is_number(interval) and interval > max_new_tokens:
        return (
            f"{method} compresses every method_kwargs.{method}.compression_interval = {interval} decoding steps, but "
            f"its cells generate at most {max_new_tokens} tokens: it would never compress, and the cell would measure "
            f"the full cache. Set method_kwargs.{method}.compression_interval to at most {max_new_tokens} and "
            "target_size below the prompts' length (kvpress's defaults, 512 and 2048, are for answers of thousands of "
            "tokens)."
        )
    if prompt_lengths and _is_number(target) and target >= max(prompt_lengths) + max_new_tokens:
        return (
            f"method_kwargs.{method}.target_size is {target}, but the longest prompt plus its answer holds "
            f"{max(prompt_lengths) + max_new_tokens} tokens (prompt {max(prompt_lengths)}, max_new_tokens "
            f"{max_new_tokens}): the cache never outgrows it, so {method} would compress nothing. Lower target_size "
            f"below {min(prompt_lengths)}."
        )
    return None

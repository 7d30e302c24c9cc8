"""Is the model that loaded the checkpoint on disk, whole? transformers fills a missing weight with random
numbers and goes on (its "newly initialized" report lands in a log nobody reads): here that fails the job,
naming the tensors. A load that fails outright names the damaged file of a local folder, not hub advice.
"""

from __future__ import annotations

import json
from pathlib import Path

MAX_NAMED_TENSORS = 12


class IncompleteCheckpointError(RuntimeError):
    """The weights loaded are not all the checkpoint's: part of the model would run on random numbers."""


def _named(keys) -> str:
    keys = sorted(str(key) for key in keys)
    shown = ", ".join(keys[:MAX_NAMED_TENSORS])
    return shown + (f" and {len(keys) - MAX_NAMED_TENSORS} more" if len(keys) > MAX_NAMED_TENSORS else "")


def loading_problems(loading_info: dict) -> list[str]:
    """What transformers' ``output_loading_info`` says is not the checkpoint: missing (so newly initialized),
    unexpected (in the file, used by nothing), shape-mismatched tensors, and its error messages."""
    problems = []
    if loading_info.get("missing_keys"):
        problems.append(
            f"missing from the checkpoint, so newly initialized at random: {_named(loading_info['missing_keys'])}"
        )
    if loading_info.get("unexpected_keys"):
        problems.append(f"in the checkpoint but not in the model (ignored): {_named(loading_info['unexpected_keys'])}")
    mismatched = loading_info.get("mismatched_keys") or []
    if mismatched:
        problems.append(
            "of another shape than the model's (so newly initialized): "
            f"{_named(m[0] if isinstance(m, tuple) else m for m in mismatched)}"
        )
    problems += [str(message) for message in loading_info.get("error_msgs") or []]
    return problems


def require_whole_checkpoint(loading_info: dict, path: str) -> None:
    problems = loading_problems(loading_info)
    if problems:
        raise IncompleteCheckpointError(
            f"the model at {path!r} did not load whole; its scores would measure random weights, "
            "so nothing is generated:\n"
            + "\n".join(f"  - {problem}" for problem in problems)
            + "\nReplace the checkpoint with a complete one (or fix models.<name>.path)."
        )


def damaged_model_files(path: str) -> list[str]:
    """The files of a local model folder that cannot be read: a config that is not JSON, a weights file whose
    header or length is not that of a safetensors file (cut short by a copy, say). Empty for a hub id."""
    folder = Path(path)
    if not folder.is_dir():
        return []
    damaged = []
    for config in sorted(folder.glob("*.json")):
        try:
            json.loads(config.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            damaged.append(f"{config}: not valid JSON ({error})")
    for weights in sorted(folder.glob("*.safetensors")):
        if problem := safetensors_problem(weights):
            damaged.append(f"{weights}: {problem}")
    return damaged


def safetensors_problem(path: Path) -> str | None:
    """Why ``path`` is not a whole safetensors file (header length, JSON header, tensor bytes past its end)."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            return f"{size} bytes, too short for a safetensors header"
        header_length = int.from_bytes(prefix, "little")
        if 8 + header_length > size:
            return f"its header says {header_length} bytes of metadata but the file has {size} bytes: cut short"
        try:
            header = json.loads(handle.read(header_length))
        except (json.JSONDecodeError, UnicodeDecodeError):
            return "its header is not valid JSON: not a safetensors file, or damaged"
    ends = [entry["data_offsets"][1] for name, entry in header.items() if name != "__metadata__"]
    needed = 8 + header_length + max(ends, default=0)
    if needed > size:
        return f"its tensors need {needed} bytes but the file has {size}: cut short (an interrupted copy or download?)"
    return None

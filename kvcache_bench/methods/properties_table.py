"""The methods' measured properties as one table (``snakemake doctor``), read from their check outputs."""

from __future__ import annotations

import json
from pathlib import Path

from kvcache_bench.methods.constructions import decoding_budget

WHILE_DECODING = "runs while decoding, with its budget in method_kwargs"
FLAGS = (
    ("removes_tokens", "removes"),
    ("masks_slots", "masks"),
    ("prunes_channels", "channels"),
    ("compresses_while_decoding", "decoding"),
    ("reads_question", "question"),
)


def verdict(properties: dict) -> str:
    """Whether this engine runs the method, and if not, why (the per-cell check refuses on the same facts)."""
    if properties.get("needs_hub_data"):
        return f"needs data: {properties['needs_hub_data']}"
    if properties.get("status") == "fails":
        return f"fails: {properties.get('error')}"
    if properties.get("cache_growth", 1.0) > 1.0:
        return f"refused: leaves a cache {properties['cache_growth']:g}x the prompt (an uncompressed copy of it)"
    if properties.get("compresses_while_decoding"):
        budget = decoding_budget(properties.get("construction"))
        return (
            f"{WHILE_DECODING}: compression_interval {budget.get('compression_interval')}, target_size "
            f"{budget.get('target_size')} "
            "(a cell is refused where the budget cannot compress within its max_new_tokens)"
        )
    return "runs"


def runs_offline(properties: dict) -> bool:
    """Runs here in every cell at its settings (a decoding-time press runs only with a budget its cells reach)."""
    return verdict(properties) == "runs"


def runs_while_decoding(properties: dict) -> bool:
    return verdict(properties).startswith(WHILE_DECODING)


SLIDING_SHORT = {"full_attention": "global", "sliding_attention": "sliding"}


def on_sliding_layers(properties: dict) -> str:
    """What the press touched on a tiny Gemma 3 under each setting: ``keep:global compress:global+sliding``, ``no``
    where it did not run, ``-`` where it ran and changed no layer (a press that compresses while decoding)."""
    measured = properties.get("sliding_layers")
    if not measured:
        return "-"
    parts = []
    for setting, facts in measured.items():
        touched = "+".join(SLIDING_SHORT.get(kind, kind) for kind in facts.get("touches") or []) or "-"
        parts.append(f"{setting}:{touched if facts.get('runs') else 'no'}")
    return " ".join(parts)


def doctor_table(paths: list[str]) -> str:
    rows = [json.loads(Path(path).read_text()) for path in paths]
    header = (
        f"{'method':<38} {'family':<16} "
        + " ".join(f"{short:<8}" for _, short in FLAGS)
        + f" {'pad share':<9} {'on sliding layers (Gemma 3)':<30} verdict\n"
    )
    lines = [header]
    for row in rows:
        flags = " ".join(f"{('yes' if row.get(key) else '-'):<8}" for key, _ in FLAGS)
        share = row.get("padded_row_pad_share")
        share_text = "-" if share is None else f"{share:.0%}"
        method, family, sliding = row["method"], row.get("family", ""), on_sliding_layers(row)
        lines.append(f"{method:<38} {family:<16} {flags} {share_text:<9} {sliding:<30} {verdict(row)[:140]}\n")
    running = sum(runs_offline(row) for row in rows)
    decoding = sum(runs_while_decoding(row) for row in rows)
    lines.append(
        f"\n{running} of {len(rows)} methods run offline here, and {decoding} more while decoding with a budget in "
        "method_kwargs (compression_interval at most the cells' max_new_tokens, target_size below their prompts). "
        "removes: the cache is shorter; masks: slots hidden, cache full size (no memory saved); channels: key channels "
        "zeroed (no memory saved); decoding: compresses while decoding; question: keeps different context slots for a "
        "different question; pad share: on a left-padded batch of 2, the share of the padded row's kept slots that are "
        "pads (random weights: an illustration); on sliding layers: on a tiny Gemma 3, under sliding_layers keep and "
        "compress, the layer types the press changed (no: it does not run there, and such cells are refused; "
        "docs/sliding-layers.md). Measured by kvcache_bench.methods.method_properties.\n"
    )
    return "".join(lines)

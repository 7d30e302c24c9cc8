"""An example of a researcher's own press: keep the tokens whose VALUE vectors are largest, plus a few sinks.

Hypothesis it tests: a token's contribution to an attention output is its weight times its value, so tokens
with small values matter little whatever their keys say (Knorm ranks by keys; this ranks by values).
Use it from a config:

    custom_methods:
      value_norm: {press: "presses/value_norm.py:ValueNormPress", kwargs: {n_sink: 4}, label: Value norm}
    methods: [full_cache, value_norm]

Editing this file reruns the cells of the methods built from it, and no others.
"""

from dataclasses import dataclass

import torch
from kvpress import ScorerPress


@dataclass
class ValueNormPress(ScorerPress):
    """Scores each cached token by the L2 norm of its value vector; the first ``n_sink`` tokens are always kept."""

    compression_ratio: float = 0.0
    n_sink: int = 4

    def score(self, module, hidden_states, keys, values, attentions, kwargs) -> torch.Tensor:
        scores = values.float().norm(dim=-1)  # (batch, kv_heads, tokens)
        scores[..., : self.n_sink] = torch.finfo(scores.dtype).max
        return scores

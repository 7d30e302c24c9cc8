"""How each built-in method's answers are checked against kvpress 0.5.5's own, derived from the catalogue.

``tests/test_kvpress_parity_library.py`` parametrizes over ``parity_plan()`` and ``tools/docs.py parity`` writes
it into docs/parity.md, so a method added to the catalogue is checked (or listed as not checked, and why) the
day it is added. Every method that can run offline (a press that needs no hub data, the full cache, a
quantised cache) is compared on SmolLM2 with kvpress's ``KVPressTextGenerationPipeline``: the same greedy ids,
except in three cases, each asserted by the same tests so that this list cannot go stale:

- ``PIPELINE_FAILS``: kvpress's pipeline raises for the method, so the reference is the press applied by hand
  through kvpress's own hooks (``with press(model)`` over the context, then the question and greedy decoding
  at the pipeline's positions). The test asserts that the pipeline still fails.
- ``ENGINE_REFUSES`` and every decoding-time press: this engine refuses the method before generation (its
  measured properties), so the test asserts the refusal, not ids.
- methods that need hub data are not run here at all.

``BUDGET_KWARGS`` are the kwargs a method that takes no retention runs with in the test (its budget, at the
test's prompt of a few hundred tokens: the defaults would compress nothing). This module is data: no torch.
"""

from __future__ import annotations

from kvcache_bench.methods.catalogue import BUILT_IN, DECODING

PIPELINE, HOOKS, REFUSED, HUB = "kvpress pipeline", "kvpress hooks", "refused", "needs hub data"

_UNEQUAL_LAYERS = (
    "its layers keep different numbers of tokens, and the pipeline runs the question in one pass whose causal "
    "mask (transformers 5.2) has one length for every layer: RuntimeError, tensor sizes must match"
)
PIPELINE_FAILS = {
    "pyramidkv": _UNEQUAL_LAYERS,
    "kvcompose": _UNEQUAL_LAYERS + " (structured KVCompose keeps a count per layer)",
    "simlayerkv": _UNEQUAL_LAYERS + " (lazy layers keep only their first and last tokens)",
}
PIPELINE_ERROR = "must match the size of tensor"  # what kvpress's pipeline raises for every method above

# method -> (what its measured check says, why): the engine refuses these before generation.
ENGINE_REFUSES = {
    "finch": (
        "No delimiter token ID provided",
        "FinchPress needs update_model_and_tokenizer (a delimiter token added to the tokenizer and the model's "
        "embeddings) and that token between context and question; kvpress's pipeline does neither, and this engine "
        "refuses it (its check fails: No delimiter token ID provided)",
    ),
}
DECODING_REFUSAL = (
    "compresses while decoding: this engine decodes without the press's hooks (issue 19 item 5), so it refuses "
    "the method before generation (cam_adakv_snapkv and decoding_adakv_snapkv already fail on the check's tiny "
    "model, and are refused for that)"
)

BUDGET_KWARGS = {"simlayerkv": {"lazy_threshold": 0.5, "n_recent": 64}}


def parity_plan() -> dict[str, tuple[str, str]]:
    """Every built-in method -> (how it is checked: PIPELINE, HOOKS, REFUSED or HUB, why)."""
    plan = {}
    for name, spec in BUILT_IN.items():
        if spec.hub_data is not None:
            plan[name] = (HUB, spec.hub_data)
        elif spec.family == DECODING:
            plan[name] = (REFUSED, DECODING_REFUSAL)
        elif name in ENGINE_REFUSES:
            plan[name] = (REFUSED, ENGINE_REFUSES[name][1])
        elif name in PIPELINE_FAILS:
            plan[name] = (HOOKS, PIPELINE_FAILS[name])
        else:
            plan[name] = (PIPELINE, "")
    return plan


def methods_checked(how: str) -> list[str]:
    return [name for name, (checked, _) in parity_plan().items() if checked == how]


def question_agnostic_methods() -> list[str]:
    """The methods also checked question-agnostic: the first of each family that the pipeline checks.

    The question-agnostic path is the same engine code for every press (the context pressed, the question run
    after it on the compressed cache); checking all of them would double the tests' time. The hook-checked
    methods are checked question-aware only: their unequal layers take the held-back tokens through the same
    one-token-at-a-time path that the question takes question-agnostic."""
    first_of_family: dict[str, str] = {}
    for name in methods_checked(PIPELINE):
        first_of_family.setdefault(BUILT_IN[name].family, name)
    return list(first_of_family.values())

"""How each built-in method's answers are checked against kvpress 0.5.5's own, derived from the catalogue.

``tests/test_kvpress_parity_library.py`` parametrizes over ``parity_plan()`` and ``tools/docs.py parity`` writes
it into docs/parity.md, so a method added to the catalogue is checked (or listed as not checked, and why) the
day it is added. Every method that can run offline (a press that needs no hub data, the full cache, a
quantised cache) is compared on SmolLM2 with kvpress's ``KVPressTextGenerationPipeline``: the same greedy ids,
except in the cases below, each asserted by the same tests so that this list cannot go stale:

- ``PIPELINE_FAILS``: kvpress's pipeline raises for the method, so the reference is the press applied by hand
  through kvpress's own hooks (``with press(model)`` over the context, then the question and greedy decoding
  at the pipeline's positions). The test asserts that the pipeline still fails.
- ``ENGINE_REFUSES`` and ``DECODING_FAILS``: this engine refuses the method before generation (its measured
  properties), so the test asserts the refusal, not ids.
- every other decoding-time press (``WHILE_DECODING``): compared with kvpress's pipeline too, at ``DECODING_BUDGET``
  so that it compresses within the test's new tokens; the engine runs the press over the question and decoding
  as the pipeline does, and the test asserts that the cache was compressed while decoding.
- methods that need hub data are not run here at all.

``BUDGET_KWARGS`` are the kwargs a method that takes no retention runs with in the test (its budget, at the
test's prompt of a few hundred tokens: the defaults would compress nothing). This module is data: no torch.
"""

from __future__ import annotations

from kvcache_bench.methods.catalogue import BUILT_IN, DECODING

PIPELINE, HOOKS, REFUSED, HUB = "kvpress pipeline", "kvpress hooks", "refused", "needs hub data"
WHILE_DECODING = "kvpress pipeline, press while decoding"

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
# Decoding-time presses that fail in kvpress 0.5.5 itself, on the check's tiny model as in its pipeline at the test's
# budget: method -> (what the measured check says, why). The engine refuses them (their check fails).
DECODING_FAILS = {
    "cam_adakv_snapkv": (
        "'AdaKVPress' object has no attribute 'score'",
        "kvpress's CAMPress scores through its base press's score(), which AdaKVPress has not (AttributeError), in "
        "kvpress's pipeline as on the check's tiny model: refused, its check fails",
    ),
    "decoding_adakv_snapkv": (
        "should be greater than the window size 64",
        "SnapKV's window (64 tokens) is longer than the hidden states DecodingPress has buffered when it compresses: "
        "kvpress asserts 'Query length ... should be greater than the window size 64', in its pipeline at the test's "
        "budget as on the check's tiny model: refused, its check fails (a hidden_states_buffer_size and "
        "compression_interval of 64 or more would run, with answers of more than 64 tokens)",
    ),
}

# A decoding-time press's budget shrunk so that it compresses within the test's 12 new tokens, on its prompt of
# ~260: a layer is cut to target_size every compression_interval passes (kvpress's defaults are 512 and 2048).
DECODING_BUDGET = {"compression_interval": 2, "target_size": 128, "hidden_states_buffer_size": 4}
BUDGET_KWARGS = {
    "simlayerkv": {"lazy_threshold": 0.5, "n_recent": 64},
    **{name: DECODING_BUDGET for name, spec in BUILT_IN.items() if spec.family == DECODING},
}


def parity_plan() -> dict[str, tuple[str, str]]:
    """Every built-in method -> (how it is checked: PIPELINE, WHILE_DECODING, HOOKS, REFUSED or HUB, why)."""
    plan = {}
    for name, spec in BUILT_IN.items():
        if spec.hub_data is not None:
            plan[name] = (HUB, spec.hub_data)
        elif name in DECODING_FAILS:
            plan[name] = (REFUSED, DECODING_FAILS[name][1])
        elif spec.family == DECODING:
            plan[name] = (WHILE_DECODING, "")
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
    """The methods also checked question-agnostic: the first of each family that the pipeline checks, and the first
    decoding-time press of each kvpress class.

    The question-agnostic path is the same engine code for every press (the context pressed, the question run
    after it on the compressed cache); checking all of them would double the tests' time. The hook-checked
    methods are checked question-aware only: their unequal layers take the held-back tokens through the same
    one-token-at-a-time path that the question takes question-agnostic."""
    first_of_family: dict[str, str] = {}
    for name in methods_checked(PIPELINE):
        first_of_family.setdefault(BUILT_IN[name].family, name)
    for name in methods_checked(
        WHILE_DECODING
    ):  # the first of each decoding-time press class (DecodingPress, CAMPress)
        first_of_family.setdefault(BUILT_IN[name].construction.press, name)
    return list(first_of_family.values())

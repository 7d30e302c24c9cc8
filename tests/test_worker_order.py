"""A GPU holds one model worker, so a study's generate jobs run model by model (and, within a model, attention by
attention): alternating two models restarted SmolLM2's worker at each switch on the H200 (docs/findings.md)."""

import re

from conftest import run_snakemake, write_config


def generate_jobs_in_start_order(log: str) -> list[tuple[str, str]]:
    """(model, method) of each generate job, in the order Snakemake started them."""
    blocks = re.findall(r"rule generate:\n(?:.*\n)*?\s+wildcards: (.*)\n", log)
    wildcards = [dict(pair.split("=", 1) for pair in block.split(", ")) for block in blocks]
    return [(w["model"], w["method"]) for w in wildcards]


def test_two_models_cells_run_one_model_after_the_other_and_eager_attention_together(workflow_copy):
    canary = {"path": "resources/canary", "dtype": "float32", "attn_implementation": "sdpa", "max_context_tokens": 4096}
    config = write_config(
        workflow_copy, "config/demo.yaml", "two-models.yaml",
        models={"canary": canary, "canary-again": dict(canary)},
        methods=["snapkv", "h2o", "knorm"], retentions=[0.5, 0.25], question_modes=["question_aware"],
        batch_size_overrides={},
    )
    result = run_snakemake(workflow_copy, "--cores", "1", "results/tables/summary.csv", "--configfile", str(config), check=True)
    order = generate_jobs_in_start_order(result.stderr + result.stdout)
    assert len(order) == 12
    # first model first; within it, its own attention (sdpa) before h2o's eager
    assert [model for model, _ in order] == ["canary"] * 6 + ["canary-again"] * 6
    for half in (order[:6], order[6:]):
        assert [method == "h2o" for _, method in half] == [False] * 4 + [True] * 2

"""Generated text reaches the scorer exactly as LongBench's pred.py keeps it: decoded, never stripped.

LongBench's eval.py alone post-processes (``lstrip('\\n')`` then the first line, for trec/triviaqa/samsum);
whitespace in front of an answer or inside indented code is part of what it scores.
"""

import pytest

from kvcache_bench.analysis.metrics import LONGBENCH_TASK_METRICS, METRICS, score_example
from kvcache_bench.engine.greedy import decode_answer


def longbench_eval_score(task, prediction, answers, all_classes=None):
    """eval.py's scorer() for one example, step by step (with this project's metric functions)."""
    if task in ["trec", "triviaqa", "samsum", "lsht"]:
        prediction = prediction.lstrip("\n").split("\n")[0]
    metric = METRICS[LONGBENCH_TASK_METRICS[task]]
    score = 0.0
    for ground_truth in answers:
        score = max(score, metric.per_reference(prediction, ground_truth, all_classes=all_classes))
    return score


CASES = [
    ("triviaqa", " \nParis", ["Paris"]),  # the first line is " ": LongBench scores 0, a stripped copy 1
    ("triviaqa", "\n\nParis\nQuestion: next", ["Paris"]),
    ("trec", "  Location\n", ["Location"]),
    ("samsum", "\nAnna will bring the cake.\nDialogue:", ["Anna brings the cake."]),
    ("qasper", "\n  unanswerable  ", ["unanswerable"]),
    ("lcc", "        return self.root\n", ["        return self.root"]),
    ("lcc", "\n    x = load(path)  # cached\n", ["x = load(path)"]),
    ("repobench-p", "    def files(self):\n", ["def files(self):"]),
]


@pytest.mark.parametrize(("task", "generated", "answers"), CASES)
def test_scores_equal_longbench_on_whitespace_and_indented_code(smollm2_tokenizer, task, generated, answers):
    all_classes = ["Location", "Entity"] if task == "trec" else None
    token_ids = smollm2_tokenizer(generated, add_special_tokens=False)["input_ids"] + [smollm2_tokenizer.eos_token_id]
    prediction = decode_answer(smollm2_tokenizer, token_ids)
    assert prediction == generated  # the end-of-turn token is skipped, the whitespace kept
    assert score_example(task, prediction, answers, all_classes) == longbench_eval_score(task, generated, answers, all_classes)


def test_a_leading_blank_line_costs_triviaqa_its_answer_as_in_longbench(smollm2_tokenizer):
    ids = smollm2_tokenizer(" \nParis", add_special_tokens=False)["input_ids"]
    assert score_example("triviaqa", decode_answer(smollm2_tokenizer, ids), ["Paris"]) == 0.0
    ids = smollm2_tokenizer("\nParis", add_special_tokens=False)["input_ids"]
    assert score_example("triviaqa", decode_answer(smollm2_tokenizer, ids), ["Paris"]) == 1.0

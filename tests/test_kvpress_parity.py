"""The engine answers exactly as kvpress's own pipeline on a real model (SmolLM2-135M-Instruct, fp32, CPU).

Both question modes, five presses at retention 0.25, 12 new tokens: the same token ids in, the same token ids
out. Question-aware, kvpress compresses context + question and runs the chat template's generation suffix
and the answer prefix afterwards; question-agnostic, it compresses the context and runs the question after.
Retention 0.5, for these five and every other method that runs offline: tests/test_kvpress_parity_library.py.
"""

import pytest
import torch

from kvcache_bench.engine.decoders.one_by_one import generate_one
from kvcache_bench.engine.greedy import Decoding
from kvcache_bench.engine.loading import load_model, load_tokenizer, stop_token_ids
from kvcache_bench.methods.registry import build_press
from kvcache_bench.study.prompt_tokens import build_prompt_tokens
from kvcache_bench.study.question_modes import QuestionMode

MAX_NEW_TOKENS = 12
FILLER = (
    "The river town kept its markets open through the winter, and the traders who came down from the hills "
    "brought wool, salt and news of the passes. ",
    "Most evenings the council argued about the bridge, which had been repaired three times in a decade. ",
    "A visiting scholar wrote that the town's library held more maps than books, most of them wrong. ",
    "In spring the fields flooded, and the children were sent to count the herons on the eastern bank. ",
)
NEEDLE = "The special magic word for Paris is: lantern. "
QUESTION = "What is the special magic word for Paris mentioned in the provided text?"
ANSWER_PREFIX = " The special magic word for Paris mentioned in the provided text is"


def haystack(sentences: int, needle_at: int) -> str:
    parts = [FILLER[i % len(FILLER)] for i in range(sentences)]
    parts.insert(needle_at, NEEDLE)
    # ".\n" then the question: no BPE merge crosses the context/question seam, so kvpress's two encodes
    # equal the engine's one (a trailing " \n" would merge on one side only, the defect the engine avoids)
    return "Some special magic words are hidden within the following text.\n" + "".join(parts).rstrip() + "\n"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def smollm2(smollm2_model_dir):
    torch.manual_seed(0)
    tokenizer = load_tokenizer(smollm2_model_dir)
    model = load_model(smollm2_model_dir, "float32", "sdpa", torch.device("cpu"))
    return model, tokenizer


@pytest.fixture(scope="module")
def kvpress_pipeline(smollm2):
    from kvpress import KVPressTextGenerationPipeline

    model, tokenizer = smollm2
    return KVPressTextGenerationPipeline(model=model, tokenizer=tokenizer, device=torch.device("cpu"))


def kvpress_answer_ids(pipeline, context: str, question: str, press, max_new_tokens: int = MAX_NEW_TOKENS, cache=None) -> tuple[list[int], dict]:
    """Greedy ids kvpress's pipeline generates (read where it decodes them), and the ids it prefilled."""
    inputs = pipeline.preprocess(context, [question], ANSWER_PREFIX, max_context_length=10**9)
    seen = []
    tokenizer = pipeline.tokenizer
    original_decode = tokenizer.decode

    def recording_decode(ids, *args, **kwargs):
        seen.append([int(i) for i in ids])
        return original_decode(ids, *args, **kwargs)

    tokenizer.decode = recording_decode
    try:
        with torch.no_grad():  # as transformers' Pipeline.forward runs _forward
            pipeline._forward(inputs, max_new_tokens=max_new_tokens, press=press, cache=cache)
    finally:
        del tokenizer.decode
    return seen[-1], inputs


@pytest.mark.parametrize("retention", [0.25])
@pytest.mark.parametrize("method", ["snapkv", "streaming_llm", "knorm", "tova", "plain_expected_attention"])
@pytest.mark.parametrize("mode", [QuestionMode.QUESTION_AWARE, QuestionMode.QUESTION_AGNOSTIC], ids=str)
def test_greedy_ids_equal_kvpress_pipeline(smollm2, kvpress_pipeline, method, retention, mode):
    model, tokenizer = smollm2
    context = haystack(14, needle_at=5)
    prompt = build_prompt_tokens(tokenizer, "niah_single_1", context, QUESTION, 100_000, answer_prefix=ANSWER_PREFIX)
    assert prompt.chat_template and prompt.held_back_tokens > 0

    if mode == QuestionMode.QUESTION_AWARE:  # kvpress's question-aware use: the question inside the context, no question
        theirs, inputs = kvpress_answer_ids(kvpress_pipeline, context + QUESTION, "", build_press(method, retention, seed=0))
        ids = prompt.context_ids + prompt.question_ids
        assert inputs["context_ids"][0].tolist() == ids[: -prompt.held_back_tokens]  # same tokens pressed
        assert inputs["questions_ids"][0][0].tolist() == ids[-prompt.held_back_tokens :]  # same tokens after
    else:
        theirs, inputs = kvpress_answer_ids(kvpress_pipeline, context, QUESTION, build_press(method, retention, seed=0))
        assert inputs["context_ids"][0].tolist() == prompt.context_ids
        assert inputs["questions_ids"][0][0].tolist() == prompt.question_ids

    ours = generate_one(Decoding(model, build_press(method, retention, seed=0), mode, MAX_NEW_TOKENS, stop_token_ids(model, tokenizer)), prompt)
    assert ours.kept_tokens < ours.pressed_tokens  # the press really evicted
    assert ours.token_ids == theirs, (tokenizer.decode(ours.token_ids), tokenizer.decode(theirs))


def test_full_cache_finds_the_needle(smollm2):
    """The fixture is a real model: with the whole cache it reads the haystack and answers."""
    model, tokenizer = smollm2
    prompt = build_prompt_tokens(tokenizer, "niah_single_1", haystack(14, needle_at=5), QUESTION, 100_000, answer_prefix=ANSWER_PREFIX)
    answer = generate_one(Decoding(model, None, QuestionMode.QUESTION_AWARE, MAX_NEW_TOKENS, stop_token_ids(model, tokenizer)), prompt)
    assert "lantern" in tokenizer.decode(answer.token_ids)

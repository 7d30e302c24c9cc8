"""One-time costs paid once per model worker: a warm-up per kind of work, a graph per decode shape, prompts tokenised
once. A sweep of 43 cells paid 104 s of per-cell warm-ups and recaptured its graphs in every cell before."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kvcache_bench.engine import static_decode, warm_ups
from kvcache_bench.engine.decoders.decode_many import generate_prefill_one_decode_many
from kvcache_bench.engine.greedy import Decoding
from kvcache_bench.study.question_modes import QuestionMode
from tests.test_batched_decode import STOP, demo_shaped_llama, engine_tokens, press_for, random_prompts

pytestmark = pytest.mark.usefixtures("one_torch_thread")

DEMO = Path(__file__).resolve().parents[1] / "resources" / "demo"


class _Model:
    device = torch.device("cpu")


@pytest.fixture
def warm_ups_on_the_cpu(monkeypatch):
    """The CPU warms up as a GPU does (it normally skips: nothing lazy to pay there)."""
    monkeypatch.setattr(warm_ups, "WARM_UP_DEVICES", ("cuda", "cpu"))


def test_a_model_warms_up_once_per_kind_of_work(warm_ups_on_the_cpu):
    model, runs = _Model(), []
    snapkv, tova = press_for("snapkv"), press_for("tova")
    first = warm_ups.warm_up_once(model, warm_ups.warm_up_kind("decode_many", snapkv), lambda: runs.append("a"))
    again = warm_ups.warm_up_once(model, warm_ups.warm_up_kind("decode_many", snapkv), lambda: runs.append("b"))
    other_press = warm_ups.warm_up_once(model, warm_ups.warm_up_kind("decode_many", tova), lambda: runs.append("c"))
    other_work = warm_ups.warm_up_once(model, warm_ups.warm_up_kind("one_by_one", snapkv), lambda: runs.append("d"))
    assert runs == ["a", "c", "d"]
    assert first > 0 and again == 0.0 and other_press > 0 and other_work > 0


def test_the_cpu_skips_warm_ups():
    runs = []
    assert warm_ups.warm_up_once(_Model(), ("decode_many",), lambda: runs.append(1)) == 0.0 and runs == []


def test_a_warm_up_leaves_the_random_generator_as_it_found_it(warm_ups_on_the_cpu):
    """Compactor sketches from torch's global generator: a warm-up that drew from it moved a cell's score 39 -> 48."""
    torch.manual_seed(5)
    expected = torch.rand(4)
    torch.manual_seed(5)
    warm_ups.warm_up_once(_Model(), ("compactor",), lambda: torch.rand(1000))
    assert torch.equal(torch.rand(4), expected)


def test_a_wrapped_press_is_its_own_kind():
    """AdaKV over SnapKV runs other kernels than AdaKV over another scorer: the classes inside count."""
    kind = warm_ups.warm_up_kind("decode_many", press_for("adakv_snapkv"))
    assert kind[0] == "decode_many" and any("AdaKVPress" in name for name in kind)
    assert any("SnapKVPress" in name for name in kind)
    assert warm_ups.warm_up_kind("decode_many", None) == ("decode_many",)


def _decode(model, prompts, batch):
    settings = Decoding(model, press_for("snapkv"), QuestionMode.QUESTION_AWARE, 6, STOP, decode_batch_size=batch)
    generations, _ = generate_prefill_one_decode_many(settings, prompts)
    return [g.token_ids for g in generations]


def test_decode_states_are_kept_per_shape_and_reused_with_the_batch_one_engines_tokens(monkeypatch):
    """Alternating batch shapes (a cell's full batches and its shorter last one, cell after cell) reuse each shape's
    state, stale slots and all, and answer as the batch-1 engine does."""
    monkeypatch.setattr(static_decode, "decode_states_budget", lambda device: float("inf"))
    model = demo_shaped_llama("sdpa")
    static_decode.release_decode_states(model)
    prompts = random_prompts([(150, 8)] * 3, seed=3)  # one batch of 2, then one of 1: two shapes
    made = []
    original = static_decode.StaticDecodeState

    class Counted(original):
        def __init__(self, shape, device):
            made.append(shape)
            super().__init__(shape, device)

    monkeypatch.setattr(static_decode, "StaticDecodeState", Counted)
    expected = engine_tokens(model, prompts, "snapkv", QuestionMode.QUESTION_AWARE, new_tokens=6)
    for _ in range(3):
        assert _decode(model, prompts, 2) == expected
    assert len(made) == 2 and len(static_decode.held_decode_states(model)) == 2
    static_decode.release_decode_states(model)


def test_held_decode_states_stay_within_their_budget_least_recently_used_first(monkeypatch):
    model = demo_shaped_llama("sdpa")
    static_decode.release_decode_states(model)
    a, b, c = (
        static_decode._DecodeShape(rows, 256, 2, 2, 1, 16, torch.float32, 6, (), 0) for rows in (2, 3, 4)
    )
    static_decode._state_for(model, a)
    static_decode._state_for(model, b)
    assert list(static_decode.held_decode_states(model)) == [b]  # the CPU keeps the newest only: no graph to keep
    monkeypatch.setattr(static_decode, "decode_states_budget", lambda device: a.nbytes() + b.nbytes() + c.nbytes() - 1)
    static_decode._state_for(model, a)
    kept = static_decode._state_for(model, b)  # both fit: b is the same state as before, a is made again
    assert list(static_decode.held_decode_states(model)) == [a, b]
    static_decode._state_for(model, a)  # used again: b is now the least recently used
    static_decode._state_for(model, c)  # past the budget with all three: b goes
    assert list(static_decode.held_decode_states(model)) == [a, c]
    assert kept.shape == b and static_decode._state_for(model, b) is not kept
    static_decode.release_decode_states(model)


def test_a_decoded_batch_on_the_cpu_captures_no_graph_and_every_record_says_so():
    model = demo_shaped_llama("sdpa")
    settings = Decoding(model, press_for("snapkv"), QuestionMode.QUESTION_AWARE, 6, STOP, decode_batch_size=4)
    generations, _ = generate_prefill_one_decode_many(settings, random_prompts())
    assert all(g.graph_capture_seconds == 0.0 and g.seconds > 0 for g in generations)


def test_a_workers_prompts_are_tokenised_once_per_tokenizer(monkeypatch):
    from transformers import AutoTokenizer

    from kvcache_bench.study import prompt_tokens

    tokenizer = AutoTokenizer.from_pretrained(DEMO / "tokenizer")
    calls = []
    original = prompt_tokens.build_prompt_tokens
    monkeypatch.setattr(prompt_tokens, "build_prompt_tokens", lambda *a, **k: calls.append(a) or original(*a, **k))
    rows = [{"context": f"the pass code is {n} " * 20, "input": "what is the code?"} for n in range(3)]
    first = [prompt_tokens.row_prompt_tokens(tokenizer, "synthetic_qa", row, 2048) for row in rows]
    again = [prompt_tokens.row_prompt_tokens(tokenizer, "synthetic_qa", row, 2048) for row in rows]
    assert len(calls) == 3 and all(a is b for a, b in zip(first, again))
    assert first[0] == original(tokenizer, "synthetic_qa", rows[0]["context"], rows[0]["input"], 2048, "")
    shorter = prompt_tokens.row_prompt_tokens(tokenizer, "synthetic_qa", rows[0], 16)  # another limit: tokenised
    assert len(calls) == 4 and shorter.length < first[0].length
    monkeypatch.setattr(prompt_tokens, "PROMPT_MEMO_TOKENS", first[0].length)  # room for one prompt
    prompt_tokens.row_prompt_tokens(tokenizer, "synthetic_qa", {**rows[0], "input": "and now?"}, 2048)
    assert len(prompt_tokens._PROMPT_MEMOS[tokenizer]) == 1


def test_a_workers_first_cell_warms_up_its_later_cells_do_not_and_no_answer_depends_on_it(
    demo_model, warm_ups_on_the_cpu
):
    """Compactor draws its sketch from torch's global generator: a cell run after a warm-up, in a worker that warmed
    up before, and with no warm-up at all give the same answers."""
    from kvcache_bench.data.longbench import normalise_rows
    from kvcache_bench.data.synthetic import make_synthetic_rows
    from kvcache_bench.engine.cell_runner import run_cell
    from kvcache_bench.engine.loading import ModelSettings, load_for_settings
    from kvcache_bench.study.cell import CellRun

    rows = normalise_rows(
        make_synthetic_rows(3, seed=7, min_words=60, max_words=90, questions_per_document=2), "synthetic_qa", None
    )
    settings = ModelSettings(path=demo_model, dtype="float32", device="cpu", max_context_tokens=2048)
    run = CellRun(
        task="synthetic_qa",
        model_settings=settings,
        method="compactor",
        retention=0.1,
        batch_size=1,
        question_mode="question_aware",
        max_new_tokens=12,
        seed=0,
        decode_batch_size=4,
    )
    loaded = load_for_settings(settings)
    first = list(run_cell(rows, run, loaded=loaded, progress=False))
    later = list(run_cell(rows, run, loaded=loaded, progress=False))
    assert {r["warmup_seconds"] > 0 for r in first} == {True} and {r["warmup_seconds"] for r in later} == {0.0}
    warm_ups.WARM_UP_DEVICES = ("cuda",)  # (restored by monkeypatch) a process that never warms up
    cold = list(run_cell(rows, run, loaded=load_for_settings(settings), progress=False))
    answers = [[(r["prediction"], r["kept_tokens"]) for r in records] for records in (first, later, cold)]
    assert answers[0] == answers[1] == answers[2]


def test_the_warm_up_runs_on_a_press_of_its_own_so_the_cells_press_sees_the_cells_examples_alone(
    demo_model, warm_ups_on_the_cpu, monkeypatch
):
    from kvcache_bench.data.longbench import normalise_rows
    from kvcache_bench.data.synthetic import make_synthetic_rows
    from kvcache_bench.engine import cell_runner
    from kvcache_bench.engine.loading import ModelSettings, load_for_settings
    from kvcache_bench.study.cell import CellRun

    rows = normalise_rows(make_synthetic_rows(2, seed=3, min_words=60, max_words=90), "synthetic_qa", None)
    settings = ModelSettings(path=demo_model, dtype="float32", device="cpu", max_context_tokens=2048)
    run = CellRun(task="synthetic_qa", model_settings=settings, method="snapkv", retention=0.5, question_mode="question_aware",
                  max_new_tokens=4, seed=0, decode_batch_size=2)
    built, original = [], cell_runner.cell_press

    def counted(run):
        press = original(run)
        calls = {"compress": 0}
        compress = press.compress

        def counting(*args, **kwargs):
            calls["compress"] += 1
            return compress(*args, **kwargs)

        press.compress = counting
        built.append(calls)
        return press

    monkeypatch.setattr(cell_runner, "cell_press", counted)
    records = list(cell_runner.run_cell(rows, run, loaded=load_for_settings(settings), progress=False))
    assert records[0]["warmup_seconds"] > 0 and len(built) == 2  # the cell's press, then the warm-up's
    cells, warm = built[0]["compress"], built[1]["compress"]
    assert warm > 0 and cells == warm * len(rows)  # one compression per layer and example, each where it belongs


def test_a_scorer_taken_in_an_init_of_its_own_is_part_of_the_kind():
    """CriticalKV takes its scorer in its own ``__init__`` (no dataclass field): CriticalKV over SnapKV and over another
    scorer run other kernels, so one's warm-up must not stand for the other's."""
    kind = warm_ups.warm_up_kind("decode_many", press_for("critical_snapkv"))
    assert kind[1:] == ("kvpress.presses.criticalkv_press.CriticalKVPress", "kvpress.presses.snapkv_press.SnapKVPress")

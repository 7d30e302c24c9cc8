"""Exactness on a GPU (skipped without CUDA): what the retired tools/gpu/batched_decode_h200.py checked by hand (git show 7fee214:tools/gpu/batched_decode_h200.py).

fp32 (TF32 off) on Llama-3.1-8B's shape with random weights: SnapKV 50%, question-aware, prompts of about
1.5k tokens of uneven length; decoding 4 compressed caches together (static cache, CUDA-graph steps) gives
the batch-1 engine's ids token for token. On the H200 this held for 4 prompts x 32 tokens
(reference/h200-fast-decode/batched_decode_h200.json).
"""

import pytest
import torch

from kvcache_bench.data.model_shapes import LLAMA_31_8B_SHAPE, build_random_model
from kvcache_bench.engine.decoders.decode_many import generate_prefill_one_decode_many
from kvcache_bench.engine.decoders.one_by_one import generate_one
from kvcache_bench.engine.greedy import Decoding
from kvcache_bench.methods.registry import build_press
from kvcache_bench.study.prompt_tokens import PromptTokens
from kvcache_bench.study.question_modes import QuestionMode

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
QUESTION_TOKENS = 32


def random_prompts(count: int, mean_tokens: int, vocab_size: int, seed: int) -> list[PromptTokens]:
    """Lengths spread +-10% around ``mean_tokens`` so every decode batch holds caches of different lengths."""
    generator = torch.Generator().manual_seed(seed)
    prompts = []
    for _ in range(count):
        length = int(mean_tokens * (0.9 + 0.2 * torch.rand((), generator=generator).item()))
        ids = torch.randint(3, vocab_size, (length,), generator=generator).tolist()
        prompts.append(PromptTokens(ids[:-QUESTION_TOKENS], ids[-QUESTION_TOKENS:]))
    return prompts


@pytest.fixture(scope="module")
def model():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return build_random_model(LLAMA_31_8B_SHAPE, torch.float32, torch.device("cuda"), seed=0)


# SnapKV evicts; AdaKV-SnapKV masks slots per head (kvpress's fake keys at batch 1, the decode batch's per-head masks)
@pytest.mark.parametrize("method", ["snapkv", "adakv_snapkv"])
def test_decode_batch_4_gives_the_batch_1_engines_ids_in_fp32_on_the_8b_shape(model, method):
    prompts = random_prompts(4, 1500, LLAMA_31_8B_SHAPE["vocab_size"], seed=3)
    reference = [
        generate_one(
            Decoding(model, build_press(method, 0.5, seed=0), QuestionMode.QUESTION_AWARE, 32, set()), p
        ).token_ids
        for p in prompts
    ]
    generations, path = generate_prefill_one_decode_many(
        Decoding(model, build_press(method, 0.5, seed=0), QuestionMode.QUESTION_AWARE, 32, set(), decode_batch_size=4),
        prompts,
    )
    assert path.effective_decode_batch_size == 4 and path.fallback is None
    assert [g.token_ids for g in generations] == reference


def test_a_question_agnostic_masking_press_decodes_shared_contexts_together_with_the_batch_1_ids(model):
    """AdaKV-SnapKV question-agnostic: two contexts of two questions each, every context compressed once, its masks
    carried by each question's row; decode batch 4 gives the batch-1 engine's ids (kvpress's fake keys there)."""
    from kvcache_bench.engine.decoders import shared_contexts_together

    contexts = random_prompts(2, 1500, LLAMA_31_8B_SHAPE["vocab_size"], seed=5)
    questions = random_prompts(4, 40, LLAMA_31_8B_SHAPE["vocab_size"], seed=6)
    prompts = [PromptTokens(contexts[i // 2].context_ids, questions[i].question_ids) for i in range(4)]
    mode = QuestionMode.QUESTION_AGNOSTIC
    reference = [
        generate_one(Decoding(model, build_press("adakv_snapkv", 0.5, seed=0), mode, 32, set()), p).token_ids
        for p in prompts
    ]
    settings = Decoding(model, build_press("adakv_snapkv", 0.5, seed=0), mode, 32, set(), decode_batch_size=4)
    generations, path = shared_contexts_together.decode(settings, prompts)
    assert path.effective_decode_batch_size == 4 and path.fallback is None
    assert [g.token_ids for g in generations] == reference


def test_a_decode_shapes_graph_is_captured_once_and_replayed_with_the_same_ids(model):
    """A worker keeps a CUDA graph per decode batch shape: the second pass over the same prompts captures nothing,
    reports no capture seconds, and gives the first pass's ids."""
    from kvcache_bench.engine.static_decode import held_decode_states, release_decode_states

    release_decode_states(model)
    prompts = random_prompts(6, 1500, LLAMA_31_8B_SHAPE["vocab_size"], seed=7)  # batches of 4 and 2: two shapes
    settings = Decoding(
        model, build_press("snapkv", 0.5, seed=0), QuestionMode.QUESTION_AWARE, 32, set(), decode_batch_size=4
    )
    first, _ = generate_prefill_one_decode_many(settings, prompts)
    again, _ = generate_prefill_one_decode_many(settings, prompts)
    assert [g.token_ids for g in again] == [g.token_ids for g in first]
    assert all(g.graph_capture_seconds > 0 for g in first) and all(g.graph_capture_seconds == 0 for g in again)
    assert len(held_decode_states(model)) == 2
    release_decode_states(model)


def test_liger_kernels_decode_batch_4_gives_their_batch_1_ids_near_transformers_logits(model):
    """models.<name>.kernels: liger (Liger-Kernel's fused RMSNorm, SwiGLU and RoPE) on a second copy of the weights:
    the issue's exactness (decode batch 4 = batch 1, fp32) holds on the fused kernels too, and their prefill logits
    stay within rounding of transformers' modules (same maths, one rounding per fused kernel)."""
    pytest.importorskip("liger_kernel")
    from kvcache_bench.engine.kernels import use_kernels

    fused = build_random_model(LLAMA_31_8B_SHAPE, torch.float32, torch.device("cuda"), seed=0)
    use_kernels(fused, "liger")
    prompts = random_prompts(4, 1500, LLAMA_31_8B_SHAPE["vocab_size"], seed=3)
    ids = torch.tensor([prompts[0].context_ids + prompts[0].question_ids], device="cuda")
    with torch.no_grad():
        transformers_logits, fused_logits = model(ids).logits[0, -1], fused(ids).logits[0, -1]
    assert (fused_logits - transformers_logits).abs().max().item() < 1e-3 * transformers_logits.abs().max().item()
    reference = [
        generate_one(
            Decoding(fused, build_press("snapkv", 0.5, seed=0), QuestionMode.QUESTION_AWARE, 32, set()), p
        ).token_ids
        for p in prompts
    ]
    generations, path = generate_prefill_one_decode_many(
        Decoding(
            fused, build_press("snapkv", 0.5, seed=0), QuestionMode.QUESTION_AWARE, 32, set(), decode_batch_size=4
        ),
        prompts,
    )
    assert path.effective_decode_batch_size == 4 and path.fallback is None
    assert [g.token_ids for g in generations] == reference
    del fused
    torch.cuda.empty_cache()


def test_attention_plans_built_ahead_spare_a_prompt_its_plan_build():
    """engine.attention_plans: on an H200 a prompt of a length its worker had not met paid ≈ 80 ms, which cuDNN spends
    building an attention plan for the new shape (docs/perf-reference.md). After build_plans for that length the prompt
    pass finds its plan: it takes a fraction of a never-met length's time, with the same cache and logits. bf16, as
    the reference config runs (cuDNN's attention takes no fp32), on two layers of the 8B shape."""
    import time

    from kvcache_bench.engine.attention_plans import build_plans, prompt_calls, recording_prompt_attention
    from kvcache_bench.engine.prefill import prefill_example

    if not torch.backends.cuda.cudnn_sdp_enabled():
        pytest.skip("cuDNN attention is off in this torch: no per-shape plans to build")
    two_layers = build_random_model(
        {**LLAMA_31_8B_SHAPE, "num_hidden_layers": 2}, torch.bfloat16, torch.device("cuda"), 0
    )
    ids = torch.randint(
        3, LLAMA_31_8B_SHAPE["vocab_size"], (3000,), generator=torch.Generator().manual_seed(9)
    ).tolist()

    def prefill_seconds(length: int):
        prompt = PromptTokens(ids[: length - QUESTION_TOKENS], ids[length - QUESTION_TOKENS : length])
        torch.cuda.synchronize()
        started = time.perf_counter()
        # the pass under the press alone: decode_many runs the held-back tokens once per decode batch
        press = build_press("snapkv", 0.5, seed=0)
        done = prefill_example(two_layers, prompt, press, QuestionMode.QUESTION_AWARE, run_held_back=False)
        torch.cuda.synchronize()
        return time.perf_counter() - started, done

    with recording_prompt_attention(prompt_calls(two_layers)):
        prefill_seconds(1000)  # the warm-up: lazy loading, and the prompt pass's calls recorded
    prefill_seconds(1100)
    never_met, _ = prefill_seconds(1700)
    pressed = 2300 - 1  # the prompt but the held-back last token
    assert build_plans(two_layers, [pressed]) > 0
    planned, done = prefill_seconds(2300)
    assert planned < never_met / 2, (planned, never_met)
    assert torch.equal(done.last_logits, prefill_seconds(2300)[1].last_logits)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_snapkv_window_attention_is_kvpress_own_bit_for_bit_on_the_gpu(dtype):
    """engine.sync_free_scores.window_attention leaves out kvpress's full-size mask: on the GPU's kernels too, the
    weights are kvpress's bit for bit, at the 8B layer's size and a prompt of 5,000 tokens (the reference config's)."""
    from kvpress import SnapKVPress

    from kvcache_bench.engine.sync_free_scores import window_attention

    layer = build_random_model({**LLAMA_31_8B_SHAPE, "num_hidden_layers": 1}, dtype, torch.device("cuda"), 0)
    attention = layer.model.layers[0].self_attn
    generator = torch.Generator(device="cuda").manual_seed(5)
    length, head_dim = 5000, attention.head_dim
    hidden = torch.randn(1, length, LLAMA_31_8B_SHAPE["hidden_size"], generator=generator, device="cuda", dtype=dtype)
    keys = torch.randn(
        1, LLAMA_31_8B_SHAPE["num_key_value_heads"], length, head_dim, generator=generator, device="cuda"
    )
    angles = torch.randn(1, length, head_dim, generator=generator, device="cuda")
    embeddings = (angles.cos().to(dtype), angles.sin().to(dtype))
    with torch.inference_mode():
        ours = window_attention(attention, hidden, keys.to(dtype), 64, embeddings)
        theirs = SnapKVPress.compute_window_attention(attention, hidden, keys.to(dtype), 64, embeddings)
    assert torch.equal(ours, theirs)

"""models.<name>.kernels: liger routes one model's RMSNorm, MLP and RoPE through Liger-Kernel and nothing else.

Liger is Triton (GPU only), so here it is stood in by a package of the same names whose kernels are transformers'
own maths and count their calls: the wiring is what is tested (which calls reach Liger, what stays untouched,
what a CPU job is told). tests/test_gpu_exactness.py runs the real kernels on a GPU.
"""

import sys
import types

import pytest
import torch
from transformers.models.llama import modeling_llama

from kvcache_bench.data.model_shapes import TINY_LLAMA_SHAPE, build_random_model
from kvcache_bench.engine.kernels import kernels_problem, use_kernels
from kvcache_bench.engine.loading import ModelSettings, ModelUnavailableError, load_for_settings
from kvcache_bench.perf.floor import engine_rows, markdown_table

CPU = torch.device("cpu")


@pytest.fixture
def stand_in_liger(monkeypatch):
    """A ``liger_kernel.transformers`` whose entry point does what Liger's does (swap the module's classes and
    patch the instance's modules) with counting stand-ins that compute transformers' own results."""
    calls = {"rms_norm": 0, "mlp": 0, "rope": 0}
    eager_rope = modeling_llama.apply_rotary_pos_emb
    eager_norm, eager_mlp = modeling_llama.LlamaRMSNorm.forward, modeling_llama.LlamaMLP.forward

    def rope(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
        calls["rope"] += 1
        return eager_rope(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)

    def norm_forward(self, hidden):
        calls["rms_norm"] += 1
        return eager_norm(self, hidden)

    def mlp_forward(self, x):
        calls["mlp"] += 1
        return eager_mlp(self, x)

    def apply_liger_kernel_to_llama(rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu, model):
        assert not (rope or cross_entropy or fused_linear_cross_entropy) and rms_norm and swiglu
        modeling_llama.LlamaRMSNorm = type("LigerRMSNorm", (torch.nn.Module,), {})  # as Liger's own does
        modeling_llama.LlamaMLP = type("LigerSwiGLUMLP", (torch.nn.Module,), {})
        modeling_llama.apply_rotary_pos_emb = None  # Liger sets it when rope=True; restored all the same
        base = model.model
        for module in [base.norm] + [m for layer in base.layers for m in (layer.input_layernorm, layer.post_attention_layernorm)]:
            module.forward = types.MethodType(norm_forward, module)
        for layer in base.layers:
            layer.mlp.forward = types.MethodType(mlp_forward, layer.mlp)

    package = types.ModuleType("liger_kernel")
    transformers_part = types.ModuleType("liger_kernel.transformers")
    transformers_part.apply_liger_kernel_to_llama = apply_liger_kernel_to_llama
    transformers_part.liger_rotary_pos_emb = rope
    package.transformers = transformers_part
    monkeypatch.setitem(sys.modules, "liger_kernel", package)
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers", transformers_part)
    return calls


def tiny(seed=0):
    return build_random_model(TINY_LLAMA_SHAPE, torch.float32, CPU, seed=seed)


def logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


def test_liger_reaches_every_norm_mlp_and_rope_of_the_model_with_the_same_logits(stand_in_liger):
    ids = torch.randint(3, 1000, (1, 12), generator=torch.Generator().manual_seed(1))
    eager_logits = logits(tiny(), ids)
    model = tiny()
    use_kernels(model, "liger")
    assert torch.equal(logits(model, ids), eager_logits)  # the stand-ins are transformers' maths: nothing else moved
    layers = TINY_LLAMA_SHAPE["num_hidden_layers"]
    assert stand_in_liger == {"rms_norm": 2 * layers + 1, "mlp": layers, "rope": layers}
    assert model.kvcache_bench_kernels == "liger"


def test_liger_leaves_transformers_module_and_the_next_model_alone(stand_in_liger):
    originals = (modeling_llama.LlamaRMSNorm, modeling_llama.LlamaMLP, modeling_llama.apply_rotary_pos_emb)
    model = tiny()
    use_kernels(model, "liger")
    logits(model, torch.tensor([[5, 6, 7]]))
    # a worker's next model on transformers' kernels is built from these
    assert (modeling_llama.LlamaRMSNorm, modeling_llama.LlamaMLP, modeling_llama.apply_rotary_pos_emb) == originals
    counted = dict(stand_in_liger)
    logits(tiny(seed=1), torch.tensor([[5, 6, 7]]))
    assert stand_in_liger == counted


def test_a_rope_patch_already_in_place_is_left_to_run(stand_in_liger, monkeypatch):
    """kvpress's ExpectedAttentionWithStats records queries by patching the module's RoPE: it must still see them."""
    seen = []
    eager_rope = modeling_llama.apply_rotary_pos_emb

    def recording_rope(q, k, cos, sin, unsqueeze_dim=1):
        seen.append(q.shape)
        return eager_rope(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)

    model = tiny()
    use_kernels(model, "liger")
    monkeypatch.setattr(modeling_llama, "apply_rotary_pos_emb", recording_rope)
    logits(model, torch.tensor([[5, 6, 7]]))
    assert len(seen) == TINY_LLAMA_SHAPE["num_hidden_layers"] and stand_in_liger["rope"] == 0


def test_transformers_kernels_change_nothing():
    model = tiny()
    forwards = [layer.self_attn.forward for layer in model.model.layers]
    use_kernels(model, "transformers")
    assert [layer.self_attn.forward for layer in model.model.layers] == forwards
    assert not hasattr(model, "kvcache_bench_kernels")


def test_a_cpu_job_asking_for_liger_is_refused_before_loading_naming_the_setting():
    problem = kernels_problem("liger", CPU)
    assert "CUDA" in problem and "kernels: transformers" in problem
    assert kernels_problem("transformers", CPU) is None
    settings = ModelSettings(path="/nonexistent/model", max_context_tokens=512, device="cpu", kernels="liger")
    with pytest.raises(ModelUnavailableError, match="needs a CUDA GPU"):  # not the missing folder: nothing loaded
        load_for_settings(settings, tokenizer=False)


def test_liger_refuses_an_architecture_it_is_not_wired_for():
    model = tiny()
    model.config.model_type = "qwen2"
    with pytest.raises(ValueError, match="wired for llama"):
        use_kernels(model, "liger")


def test_without_liger_installed_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "liger_kernel", None)  # import raises ImportError
    with pytest.raises(ImportError, match="pip install liger-kernel"):
        use_kernels(tiny(), "liger")


def test_the_engine_table_names_the_fused_kernels_and_lists_them_after_transformers():
    def records(seconds, batch):
        return [{"seconds": seconds, "effective_decode_batch_size": batch, "prompt_tokens": 5000, "kept_tokens": 2500,
                 "generated_tokens": 64}] * 4

    cells = [
        {"model": "m-liger", "engine": "kvcache_bench", "kernels": "liger", "records": records(0.15, 32)},
        {"model": "m", "engine": "kvcache_bench", "records": records(0.25, 32)},
        {"model": "m-kvpress", "engine": "kvpress_pipeline", "records": records(2.0, 1)},
    ]
    rows = engine_rows(cells, TINY_LLAMA_SHAPE, "bfloat16", {"copy_bytes_per_s": 4e12, "matmul_flop_per_s": 8e14})
    assert [(r["path"], r.get("kernels"), r["decode_batch_size"]) for r in rows] == [
        ("kvpress_pipeline", "transformers", 1), ("kvcache_bench", "transformers", 32),
        ("kvcache_bench", "liger", 32), ("floor", None, 32)]
    table = markdown_table(rows)
    assert "| this engine, decode batch 32 | 4.00 | 8.0× |" in table
    assert "| this engine on Liger's fused kernels, decode batch 32 | 6.67 | 13.3× |" in table

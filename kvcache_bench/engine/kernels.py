"""Which kernels run a model's elementwise layers: transformers' own modules, or Liger-Kernel's fused ones.

Eager Llama spends about a third of a 5k-token prefill's GPU time outside matrix products and attention:
RMSNorm's fp32 cast, pow, mean, rsqrt and products, RoPE's slices, ``cat`` and products, SiLU then times up,
each a kernel reading and writing the whole activation (docs/perf-reference.md). Liger-Kernel
(linkedin/Liger-Kernel, ``pip install liger-kernel``) does each of the three in one Triton kernel.

Opt-in per model (``models.<name>.kernels: liger``) because it changes the model's rounding, not its maths:
a fused kernel rounds once where eager rounds after every op, and sums RMSNorm's squares in another order.
Matrix products, attention, the cache and every press run as before. transformers' own route to these
kernels (``use_kernels=True``) downloads them from the Hugging Face hub; this one installs from PyPI.
"""

from __future__ import annotations

import functools

import torch

TRANSFORMERS = "transformers"
LIGER = "liger"
KERNELS = (TRANSFORMERS, LIGER)
# Liger's own per-architecture entry point patches these; SmolLM2 is a Llama too
LIGER_MODEL_TYPES = ("llama",)
LIGER_HELP = (
    "models.<name>.kernels: liger runs Liger-Kernel's Triton kernels: install it (pip install liger-kernel==0.8.5; "
    "requirements-no-deps.txt, envs/generate.post-deploy.sh) or set kernels: transformers"
)


def kernels_problem(kernels: str, device: torch.device) -> str | None:
    """Why ``kernels`` cannot run on ``device`` (checked before the weights load), or None."""
    if kernels not in KERNELS:
        return f"models.<name>.kernels is {kernels!r}; one of {', '.join(KERNELS)}"
    if kernels == LIGER and device.type != "cuda":
        return (
            f"models.<name>.kernels: liger needs a CUDA GPU (Liger-Kernel is Triton code) and this job runs on "
            f"{device.type}; set kernels: transformers for a CPU run"
        )
    return None


def use_kernels(model, kernels: str) -> None:
    """Route ``model``'s RMSNorm, MLP and RoPE through ``kernels``; this model only, not others in the process."""
    if kernels == TRANSFORMERS:
        return
    model_type = model.config.model_type
    if model_type not in LIGER_MODEL_TYPES:
        raise ValueError(
            f"models.<name>.kernels: liger is wired for {', '.join(LIGER_MODEL_TYPES)} models here; this one is "
            f"{model_type!r} (set kernels: transformers)"
        )
    try:
        from liger_kernel.transformers import apply_liger_kernel_to_llama, liger_rotary_pos_emb
    except ImportError as error:
        raise ImportError(LIGER_HELP) from error
    from transformers.models.llama import modeling_llama

    # Liger's entry point also swaps the module's classes and RoPE function, which would reach every Llama the
    # process builds later (a worker's next model on transformers' kernels): put them back, keep the instance's
    swapped = ("LlamaRMSNorm", "LlamaMLP", "apply_rotary_pos_emb")
    module_globals = {name: getattr(modeling_llama, name) for name in swapped}
    try:
        apply_liger_kernel_to_llama(
            rope=False, cross_entropy=False, fused_linear_cross_entropy=False, rms_norm=True, swiglu=True, model=model
        )
    finally:
        for name, value in module_globals.items():
            setattr(modeling_llama, name, value)
    for layer in model.model.layers:
        layer.self_attn.forward = _with_rope(layer.self_attn.forward, liger_rotary_pos_emb, modeling_llama)
    model.kvcache_bench_kernels = kernels


def _with_rope(forward, fused, module):
    """``forward`` with ``module.apply_rotary_pos_emb`` (which LlamaAttention calls by name) swapped for ``fused``
    during the call: RoPE is a function, not a module, so an instance cannot hold its own."""
    transformers_rope = module.apply_rotary_pos_emb

    @functools.wraps(forward)
    def rope_fused(*args, **kwargs):
        if module.apply_rotary_pos_emb is not transformers_rope:
            # someone else's patch is in place (kvpress's ExpectedAttentionWithStats records queries through it)
            return forward(*args, **kwargs)
        module.apply_rotary_pos_emb = fused
        try:
            return forward(*args, **kwargs)
        finally:
            module.apply_rotary_pos_emb = transformers_rope

    return rope_fused

"""Model shapes the GPU scripts build with random weights: cost figures need the shape, not the weights."""

from __future__ import annotations

import copy

import torch

# meta-llama/Llama-3.1-8B(-Instruct) config.json, field for field (minus the token ids nothing here needs).
LLAMA_31_8B_SHAPE = dict(
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=128256,
    max_position_embeddings=131072,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
    rope_parameters={
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
)

# The same family at toy size, so every GPU script also runs on a CPU in seconds (--tiny).
TINY_LLAMA_SHAPE = {
    **LLAMA_31_8B_SHAPE,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 1000,
}


def build_random_model(
    shape: dict, dtype: torch.dtype, device: torch.device, seed: int, attn_implementation: str = "sdpa"
):
    """Random init straight on the device: 16 GB of bf16 weights never touch the host or the disk."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(seed)
    config = LlamaConfig(**copy.deepcopy(shape))  # LlamaConfig writes into its rope settings
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn_implementation)
    if next(model.parameters()).device.type != device.type:  # a transformers that ignores the device context
        model = model.to(device)
    return model.eval()

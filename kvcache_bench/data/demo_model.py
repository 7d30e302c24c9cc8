"""The offline demo's model: a tiny Llama built deterministically from a committed config and seed.

It is saved with ``save_pretrained`` and read back by the same ``from_pretrained`` code the real study
uses, so the demo exercises the real loading path without any download.
"""

from __future__ import annotations

import json
from pathlib import Path

from kvcache_bench.data.synthetic import SPECIAL_TOKENS


def build_word_tokenizer(vocabulary: list[str]):
    """A word-level tokenizer (whitespace + punctuation split) over a fixed vocabulary."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {
        token: index
        for index, token in enumerate(list(SPECIAL_TOKENS) + [w for w in vocabulary if w not in SPECIAL_TOKENS])
    }
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.normalizer = normalizers.Lowercase()
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with single spaces
    # The tokenizer itself starts every text with <s>, as Llama's does: prompts are encoded the way the
    # benchmark's reference code encodes them (``tokenizer(prompt)``), and the canary was trained so.
    core.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", vocab["<s>"])])
    return PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", pad_token="<pad>", bos_token="<s>", eos_token="</s>"
    )


def build_demo_model(model_config_path: str | Path, tokenizer_dir: str | Path, seed: int, out_dir: str | Path) -> Path:
    """Random-init Llama from the committed config, saved with the committed tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    settings = json.loads(Path(model_config_path).read_text())
    settings.update(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    config = LlamaConfig(**settings)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out

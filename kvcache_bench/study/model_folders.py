"""Parse-time checks of what is inside a local model or tokenizer folder the study names.

A folder with config.json and weights but no tokenizer loads anyway: transformers falls back to a stand-in
tokenizer that reads every prompt as a couple of unknown tokens, and the run exits 0 with scores of nothing.
A folder with only tokenizer_config.json, or a config.json whose model_type transformers does not know, fails
in every job, deep in transformers. A tokenizer that loads but cuts English into fragments (the one transformers
5.2 derives from Gemma 3's GGUF: 2.6 pieces per word, docs/gemma3.md) runs every job to exit 0 on prompts the model
cannot read. Each is told here, once, naming the config key and what to put in the folder.

transformers is never imported (a parse would pay seconds for it): its table of model types is read from its
source file, found with importlib without running it, and a tokenizer.json is read with the tokenizers library
alone, once per content (its measure is kept by sha256 beside study.sources' hashes).
"""

from __future__ import annotations

import ast
import difflib
import importlib.metadata
import importlib.util
import json
import os
from functools import cache, lru_cache
from pathlib import Path

# Files that hold a tokenizer's vocabulary, in the formats from_pretrained reads: tokenizer.json (fast), a
# sentencepiece or tiktoken model (tokenizer.model, spiece.model, *.tiktoken), BPE's vocab.json + merges.txt,
# WordPiece's vocab.txt. tokenizer_config.json and special_tokens_map.json are settings, not a vocabulary.
VOCABULARY_SUFFIXES = (".model", ".tiktoken")
VOCABULARY_PREFIXES = ("tokenizer.json", "vocab", "merges")
VOCABULARY_EXAMPLES = "tokenizer.json, tokenizer.model, or vocab.json + merges.txt"


def has_vocabulary(folder: Path) -> bool:
    return any(
        path.is_file() and (path.name.startswith(VOCABULARY_PREFIXES) or path.suffix in VOCABULARY_SUFFIXES)
        for path in folder.iterdir()
    )


def tokenizer_problem(where: str, folder: Path, fix: str) -> str | None:
    """None when ``folder`` holds a tokenizer from_pretrained can read; else what the user reads, naming ``where``."""
    if has_vocabulary(folder):
        return None
    if (folder / "tokenizer_config.json").is_file():
        return (
            f"{where} has tokenizer_config.json but no vocabulary file ({VOCABULARY_EXAMPLES}), so its tokenizer "
            f"cannot load. {fix}"
        )
    return (
        f"{where} has no tokenizer files ({VOCABULARY_EXAMPLES}): transformers would tokenise every prompt with a "
        f"stand-in tokenizer that knows no word, and measure nothing. {fix}"
    )


@lru_cache(maxsize=1)
def transformers_model_types() -> tuple[str | None, dict[str, str]]:
    """(installed version, {model_type: config class}) from transformers' CONFIG_MAPPING_NAMES, read from its
    source; (None, {}) when transformers is not installed here or its table cannot be found (nothing checked)."""
    spec = importlib.util.find_spec("transformers")  # a top-level package: found, not imported
    if spec is None or not spec.origin:
        return None, {}
    source = Path(spec.origin).parent / "models" / "auto" / "configuration_auto.py"
    try:
        text = source.read_text(encoding="utf-8")
        version = importlib.metadata.version("transformers")
        # only the assignment is parsed (the whole file takes 0.1 s, paid by every parse of the workflow):
        # CONFIG_MAPPING_NAMES = OrderedDict([("llama", "LlamaConfig"), ...]) at the top level, closed by ")"
        start = text.index("\nCONFIG_MAPPING_NAMES") + 1
        tree = ast.parse(text[start : text.index("\n)\n", start) + 2])
    except (OSError, ValueError, SyntaxError, importlib.metadata.PackageNotFoundError):
        return None, {}
    pairs = [
        (item.elts[0].value, item.elts[1].value)
        for item in ast.walk(tree)
        if isinstance(item, ast.Tuple)
        and len(item.elts) == 2
        and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in item.elts)
    ]
    return (version, dict(pairs)) if pairs else (None, {})


def _likely_model_type(config: dict, known: dict[str, str]) -> str | None:
    """The model_type whose config class names the checkpoint's architecture (LlamaForCausalLM: llama), if any."""
    architectures = [a for a in config.get("architectures") or [] if isinstance(a, str)]
    matches = [
        (len(cls), model_type)
        for model_type, cls in known.items()
        for architecture in architectures
        if cls.endswith("Config") and architecture.startswith(cls[: -len("Config")])
    ]
    return max(matches)[1] if matches else None


# A plain English paragraph (written for this check): how many pieces a tokenizer cuts it into per word tells a
# working tokenizer from a broken one without loading a model. Words are its whitespace-separated chunks holding a
# letter, so a word-level tokenizer (the canary's) measures exactly 1.
ENGLISH_PARAGRAPH = (
    "The only way their performance could improve was to practise every day, so the members of the small orchestra "
    "met each morning in the village hall. They tuned their instruments, argued about the tempo of the slow movement, "
    "and played the same difficult passages again and again until the conductor, a retired schoolteacher with a "
    "famously short temper, was satisfied. By the end of the summer the music sounded quite different: the strings "
    "were warmer, the brass no longer drowned out the woodwind, and the audience that filled the hall in September "
    "stood to applaud for several minutes. Nobody could remember a concert like it."
)
# Measured on the paragraph (docs/gemma3.md): 1.13 for Gemma 3's tokenizer rebuilt from its GGUF, for SmolLM2's and
# for Llama 3.1's; 1.00 for the canary's word-level one; 2.65 for the Unigram transformers 5.2 derives from Gemma 3's
# GGUF. Above 2.0 common words are cut into fragments; below 0.5 pieces span words (a tokenizer.json without its
# pre-tokenizer reads a sentence as one unknown token).
PIECES_PER_WORD_BOUNDS = (0.5, 2.0)
PIECES_CACHE = Path(".snakemake/kvcache-bench/pieces-per-word.json")
SEGMENTATION_FIX = (
    "Save the model's own tokenizer into the folder (for a GGUF, the tokenizer its SentencePiece or BPE data "
    "describes, as kvcache_bench/data/packaged_models.py rebuilds Gemma 3's and SmolLM2's, not the one transformers "
    "derives from the GGUF), or point the setting at a folder that holds it."
)


def pieces_per_word(tokenizer_json: str | os.PathLike) -> float:
    """The paragraph's pieces (no special token added) per word, by the tokenizers library alone (~1 s for a
    262k-token vocabulary, 0.4 s for Llama 3.1's)."""
    from tokenizers import Tokenizer

    pieces = Tokenizer.from_file(str(tokenizer_json)).encode(ENGLISH_PARAGRAPH, add_special_tokens=False).ids
    words = [word for word in ENGLISH_PARAGRAPH.split() if any(c.isalpha() for c in word)]
    return len(pieces) / len(words)


@cache
def _pieces_cache() -> dict:
    try:
        return json.loads(PIECES_CACHE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def cached_pieces_per_word(tokenizer_json: Path) -> float:
    """``pieces_per_word``, measured once per content of the file (its sha256, itself read once while the file's
    size, mtime and inode are unchanged): a parse after the first pays a stat, not a tokenizer load."""
    from kvcache_bench.study.sources import file_sha256

    digest = file_sha256(tokenizer_json)
    if digest not in _pieces_cache():
        _pieces_cache()[digest] = round(pieces_per_word(tokenizer_json), 4)
        try:
            from kvcache_bench.files import write_json_atomic

            PIECES_CACHE.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(PIECES_CACHE, _pieces_cache())
        except OSError:
            pass  # a read-only checkout measures again next time; the answer is the same
    return _pieces_cache()[digest]


def segmentation_problem(where: str, folder: Path, fix: str) -> str | None:
    """None when the folder's tokenizer.json cuts English into a plausible number of pieces per word (or there is
    no tokenizer.json to read: a slow tokenizer's files are converted by transformers in the job, not here)."""
    tokenizer_json = Path(folder) / "tokenizer.json"
    if not tokenizer_json.is_file() or importlib.util.find_spec("tokenizers") is None:
        return None
    try:
        ratio = cached_pieces_per_word(tokenizer_json)
    except Exception:  # a tokenizer.json the library cannot read: the job that loads it names the damaged file
        return None
    low, high = PIECES_PER_WORD_BOUNDS
    if low <= ratio <= high:
        return None
    how = "cuts common words into fragments" if ratio > high else "reads several words as one piece"
    return (
        f"{where}: its tokenizer.json {how}: {ratio:.2f} pieces per word of plain English, where a working tokenizer "
        f"gives {low} to {high} (Gemma 3's, SmolLM2's and Llama 3.1's 1.13; kvcache_bench/study/model_folders.py). "
        f"The model would read every prompt in pieces it was not trained on. {fix}"
    )


def model_type_problem(where: str, config: dict, trust_remote_code: bool) -> str | None:
    """config.json's model_type is how AutoConfig picks the architecture: say when it is missing or unknown."""
    if trust_remote_code and config.get("auto_map"):
        return None  # the folder's own code registers its model type
    version, known = transformers_model_types()
    if not known:
        return None  # transformers is not installed in this env: the jobs that load models have it
    model_type = config.get("model_type")
    likely = _likely_model_type(config, known)
    if not model_type:
        hint = f' (its architectures say "model_type": "{likely}")' if likely else ""
        return (
            f"{where}: config.json has no model_type, so transformers cannot tell which architecture to load. "
            f"Add the model_type it was saved with{hint}."
        )
    if model_type in known:
        return None
    close = [likely] if likely else difflib.get_close_matches(str(model_type), list(known), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return (
        f"{where}: config.json has model_type {model_type!r}, which the installed transformers {version} does not "
        f"know.{hint} Fix model_type, or install a transformers version that has this architecture."
    )


def model_folder_problems(where: str, folder: Path, settings: dict) -> list[str]:
    """An existing local model folder with a readable config.json: its model_type and its tokenizer."""
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    problems = [
        model_type_problem(where, config if isinstance(config, dict) else {}, bool(settings.get("trust_remote_code"))),
        tokenizer_problem(
            where, folder, "Save the model's tokenizer into the folder (tokenizer.save_pretrained(path))."
        )
        or segmentation_problem(where, folder, SEGMENTATION_FIX),
    ]
    return [problem for problem in problems if problem]


def tokenizer_settings(config: dict) -> list[tuple[str, str]]:
    """(config key, folder) of every setting that names a tokenizer folder (schemas/config.schema.yaml)."""
    settings = [
        (f"models.{name}.build.tokenizer", (model.get("build") or {}).get("tokenizer"))
        for name, model in config["models"].items()
    ]
    for name, dataset in config["datasets"].items():
        for source in ("ruler_haystack", "ruler", "needle_in_haystack"):
            settings.append((f"datasets.{name}.{source}.tokenizer", (dataset.get(source) or {}).get("tokenizer")))
    return [(key, path) for key, path in settings if isinstance(path, str) and path]


def tokenizer_folder_problems(config: dict, workdir: str | os.PathLike = ".") -> list[str]:
    """Tokenizer folders from outside the workflow. One it makes (a results/ folder: a built or materialised
    model, Llama 3.1's tokenizer) does not exist at parse time and is made whole by its rule: not checked."""
    made = {os.path.normpath(m["path"]) for m in config["models"].values() if m.get("build") or m.get("from_package")}
    problems = []
    for key, path in tokenizer_settings(config):
        relative = os.path.normpath(path)
        if relative in made or relative.split(os.sep, 1)[0] == "results":
            continue
        folder = Path(path) if Path(path).is_absolute() else Path(workdir, path)
        if folder.is_file():
            problems.append(f"{key} {path!r} is a file; name the folder the tokenizer was saved in")
        elif folder.is_dir() and (
            problem := tokenizer_problem(
                f"{key} {path!r}",
                folder,
                "Name a folder a tokenizer was saved in (tokenizer.save_pretrained), e.g. a local model's path.",
            )
            or segmentation_problem(f"{key} {path!r}", folder, SEGMENTATION_FIX)
        ):
            problems.append(problem)
    return problems

"""Parse-time checks of what is inside a local model or tokenizer folder the study names.

A folder with config.json and weights but no tokenizer loads anyway: transformers falls back to a stand-in
tokenizer that reads every prompt as a couple of unknown tokens, and the run exits 0 with scores of nothing.
A folder with only tokenizer_config.json, or a config.json whose model_type transformers does not know, fails
in every job, deep in transformers. Each is told here, once, naming the config key and what to put in the folder.

transformers is never imported (a parse would pay seconds for it): its table of model types is read from its
source file, found with importlib without running it.
"""

from __future__ import annotations

import ast
import difflib
import importlib.metadata
import importlib.util
import json
import os
from functools import lru_cache
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
        ),
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
        ):
            problems.append(problem)
    return problems

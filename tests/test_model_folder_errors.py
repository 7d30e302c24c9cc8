"""Local model and tokenizer folders that transformers would misread are refused at parse (issue 27 item 6).

Before: a model folder without tokenizer files ran to exit 0 on prompts read as 2 unknown tokens; one with only
tokenizer_config.json, or a config.json without a known model_type, failed in every job inside transformers; one
whose tokenizer cuts English into fragments (transformers 5.2's from Gemma 3's GGUF) ran to exit 0 on prompts the
model cannot read (tests/test_gemma3_tokenizer.py feeds it that very tokenizer).
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO, copy_workflow, run_snakemake

from kvcache_bench.study.config_checks import study_config_problems
from kvcache_bench.study.model_folders import ENGLISH_PARAGRAPH

CANARY = REPO / "resources/canary"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def demo_config(**models) -> dict:
    config = yaml.safe_load((REPO / "config/demo.yaml").read_text())
    for name, settings in models.items():
        config["models"] = {name: {**config["models"]["canary"], **settings}}
    return config


def model_folder(destination: Path, tokenizer_files=TOKENIZER_FILES, **config_changes) -> Path:
    """A copy of the canary's folder with only these tokenizer files, its config.json changed (None: removed)."""
    destination.mkdir(parents=True)
    for source in CANARY.iterdir():
        if source.name not in TOKENIZER_FILES or source.name in tokenizer_files:
            shutil.copy2(source, destination / source.name)
    config = json.loads((CANARY / "config.json").read_text())
    config.update(config_changes)
    config = {key: value for key, value in config.items() if value is not None}
    (destination / "config.json").write_text(json.dumps(config))
    return destination


def problems_of_model(folder: Path, **settings) -> list[str]:
    return study_config_problems(demo_config(canary={"path": str(folder), **settings}), REPO)


def test_the_canary_and_every_committed_config_pass():
    assert problems_of_model(CANARY) == []
    for config_file in sorted(REPO.glob("config/*.yaml")):
        config = yaml.safe_load(config_file.read_text())
        if "models" in config:  # made tokenizer folders (results/...) are not there yet: not checked
            assert study_config_problems(config, REPO) == [], config_file


def test_a_model_folder_without_tokenizer_files_is_refused(tmp_path):
    folder = model_folder(tmp_path / "no-tokenizer", tokenizer_files=())
    [problem] = problems_of_model(folder)
    assert problem.startswith(f"models.canary.path '{folder}' has no tokenizer files (tokenizer.json, ")
    assert "stand-in tokenizer" in problem
    assert "Save the model's tokenizer into the folder (tokenizer.save_pretrained(path))." in problem


def test_a_model_folder_with_only_tokenizer_config_is_refused(tmp_path):
    folder = model_folder(tmp_path / "config-only", tokenizer_files=("tokenizer_config.json",))
    [problem] = problems_of_model(folder)
    assert problem.startswith(
        f"models.canary.path '{folder}' has tokenizer_config.json but no vocabulary file (tokenizer.json, "
        "tokenizer.model, or vocab.json + merges.txt)"
    )
    assert "tokenizer.save_pretrained(path)" in problem


@pytest.mark.parametrize("vocabulary", ["tokenizer.model", "vocab.json", "vocab.txt", "qwen.tiktoken"])
def test_a_slow_tokenizers_vocabulary_is_a_tokenizer(tmp_path, vocabulary):
    folder = model_folder(tmp_path / "slow", tokenizer_files=("tokenizer_config.json",))
    (folder / vocabulary).write_text("x")
    assert problems_of_model(folder) == []


def test_a_config_without_model_type_is_refused_with_the_type_its_architecture_names(tmp_path):
    folder = model_folder(tmp_path / "no-type", model_type=None)
    [problem] = problems_of_model(folder)
    assert problem == (
        f"models.canary.path '{folder}': config.json has no model_type, so transformers cannot tell which "
        'architecture to load. Add the model_type it was saved with (its architectures say "model_type": "llama").'
    )


def test_an_unknown_model_type_is_refused_naming_the_installed_transformers(tmp_path):
    folder = model_folder(tmp_path / "typo", model_type="llamma", architectures=None)
    [problem] = problems_of_model(folder)
    version = importlib.metadata.version("transformers")
    assert problem == (
        f"models.canary.path '{folder}': config.json has model_type 'llamma', which the installed transformers "
        f"{version} does not know. Did you mean 'llama'? Fix model_type, or install a transformers version that "
        "has this architecture."
    )


def test_a_model_type_of_the_folders_own_code_is_left_to_it(tmp_path):
    folder = model_folder(tmp_path / "remote", model_type="my_arch", auto_map={"AutoConfig": "my.MyConfig"})
    assert problems_of_model(folder, trust_remote_code=True) == []
    assert "'my_arch'" in problems_of_model(folder)[0]  # without trust_remote_code transformers' table decides


def test_the_model_type_table_is_read_without_importing_transformers():
    script = (
        "import sys; from kvcache_bench.study.model_folders import transformers_model_types as table; "
        "version, known = table(); print(version, known['llama'], 'transformers' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True,
                            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert result.stdout.split() == [importlib.metadata.version("transformers"), "LlamaConfig", "False"]


def haystack_dataset(tokenizer: str) -> dict:
    return {"source": "ruler_haystack", "tasks": ["niah_single_2"], "num_examples": 4,
            "ruler_haystack": {"prompt_length": 1024, "tokenizer": tokenizer}}


def test_a_tokenizer_folder_without_tokenizer_files_is_refused(tmp_path):
    folder = model_folder(tmp_path / "no-tokenizer", tokenizer_files=())
    config = demo_config()
    config["datasets"]["haystack"] = haystack_dataset(str(folder))
    [problem] = study_config_problems(config, REPO)
    assert problem.startswith(f"datasets.haystack.ruler_haystack.tokenizer '{folder}' has no tokenizer files")
    assert problem.endswith("Name a folder a tokenizer was saved in (tokenizer.save_pretrained), e.g. a local model's path.")

    config["datasets"]["haystack"] = haystack_dataset(str(folder / "config.json"))
    assert study_config_problems(config, REPO) == [
        f"datasets.haystack.ruler_haystack.tokenizer '{folder}/config.json' is a file; name the folder the "
        "tokenizer was saved in"
    ]


def test_a_build_tokenizer_with_only_tokenizer_config_is_refused(tmp_path):
    folder = model_folder(tmp_path / "config-only", tokenizer_files=("tokenizer_config.json",))
    config = yaml.safe_load((REPO / "config/demo-random.yaml").read_text())
    config["models"]["demo-tiny-llama"]["build"]["tokenizer"] = str(folder)
    [problem] = study_config_problems(config, REPO)
    assert problem.startswith(f"models.demo-tiny-llama.build.tokenizer '{folder}' has tokenizer_config.json but no "
                              "vocabulary file")


def test_a_folder_the_workflow_makes_is_not_checked_at_parse():
    config = yaml.safe_load((REPO / "config/demo-random.yaml").read_text())
    config["datasets"]["haystack"] = haystack_dataset("results/models/demo-tiny-llama")
    config["datasets"]["llama"] = haystack_dataset("results/tokenizers/llama-3.1")
    assert study_config_problems(config, REPO) == []


def test_a_dry_run_refuses_a_model_folder_without_tokenizer_files_once(tmp_path):
    workdir = copy_workflow(tmp_path / "workflow")
    model_folder(workdir / "resources/no-tokenizer", tokenizer_files=())
    config = demo_config(canary={"path": "resources/no-tokenizer"})
    (workdir / "config/case.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    result = run_snakemake(workdir, "-n", "--configfile", "config/case.yaml", timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    message = "models.canary.path 'resources/no-tokenizer' has no tokenizer files"
    assert output.count(message) == 1, output[-3000:]
    assert "the study config is refused before any job runs" in output


def save_tokenizer_json(folder: Path, pre_tokenizer: bool) -> None:
    """A tokenizer.json over the paragraph's characters and no merges: with a whitespace pre-tokenizer it cuts every
    word into letters; without one (a WordLevel of <unk> alone) it reads the whole paragraph as one unknown piece."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    if pre_tokenizer:
        letters = ["<unk>", *sorted(set(ENGLISH_PARAGRAPH) - {" "})]
        core = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(letters)}, merges=[], unk_token="<unk>"))
        core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    else:
        core = Tokenizer(models.WordLevel(vocab={"<unk>": 0}, unk_token="<unk>"))
    core.save(str(folder / "tokenizer.json"))


@pytest.fixture
def measured_here(tmp_path, monkeypatch):
    """The parse's caches (.snakemake/kvcache-bench/) in this test's folder, as a fresh checkout's."""
    import kvcache_bench.study.model_folders as model_folders
    import kvcache_bench.study.sources as sources

    monkeypatch.chdir(tmp_path)
    model_folders._pieces_cache.cache_clear()
    sources._hash_cache.cache_clear()
    yield
    model_folders._pieces_cache.cache_clear()
    sources._hash_cache.cache_clear()


@pytest.mark.unit
def test_a_model_folder_whose_tokenizer_cuts_words_into_letters_is_refused_naming_the_remedy(tmp_path, measured_here):
    folder = model_folder(tmp_path / "letters")
    save_tokenizer_json(folder, pre_tokenizer=True)
    [problem] = problems_of_model(folder)
    assert problem.startswith(f"models.canary.path '{folder}': its tokenizer.json cuts common words into fragments: ")
    assert re.search(r": [4-6]\.\d\d pieces per word of plain English, where a working tokenizer gives 0\.5 to 2\.0", problem)
    assert "Save the model's own tokenizer into the folder" in problem and "point the setting at a folder" in problem


@pytest.mark.unit
def test_a_tokenizer_folder_that_reads_the_paragraph_as_one_piece_is_refused(tmp_path, measured_here):
    folder = model_folder(tmp_path / "one-piece")
    save_tokenizer_json(folder, pre_tokenizer=False)
    config = demo_config()
    config["datasets"]["haystack"] = haystack_dataset(str(folder))
    [problem] = study_config_problems(config, REPO)
    assert problem.startswith(f"datasets.haystack.ruler_haystack.tokenizer '{folder}': its tokenizer.json reads several "
                              "words as one piece: 0.01 pieces per word")


@pytest.mark.unit
def test_pieces_per_word_are_measured_once_per_content_of_tokenizer_json(tmp_path, measured_here, monkeypatch):
    import kvcache_bench.study.model_folders as model_folders

    folder = model_folder(tmp_path / "canary")
    assert problems_of_model(folder) == []
    assert json.loads((tmp_path / model_folders.PIECES_CACHE).read_text()) != {}
    model_folders._pieces_cache.cache_clear()  # a new parse: the measure comes back from its file, not a tokenizer load
    with monkeypatch.context() as patched:
        patched.setattr(model_folders, "pieces_per_word", lambda path: pytest.fail("measured again"))
        assert problems_of_model(folder) == []
    save_tokenizer_json(folder, pre_tokenizer=True)  # other bytes: measured anew, and refused
    assert "cuts common words into fragments" in problems_of_model(folder)[0]


def test_the_pieces_per_word_check_reads_tokenizer_json_without_transformers():
    script = (
        "import sys; from pathlib import Path; from kvcache_bench.study.model_folders import pieces_per_word; "
        "print(round(pieces_per_word(Path('resources/canary/tokenizer.json')), 2), 'transformers' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True,
                            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert result.stdout.split() == ["1.0", "False"]  # the canary's word-level tokenizer: one piece per word

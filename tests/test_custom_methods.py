"""custom_methods: a researcher's own method from config, refused at parse time with a message naming the key."""

from __future__ import annotations

import pytest

from kvcache_bench.methods.custom import custom_method_problems, methods_needed, press_code_hash
from kvcache_bench.methods.registry import build_press, import_kvpress, retentions_for

REPO_PRESS = "presses/value_norm.py:ValueNormPress"
# a module of the researcher's (a press file, a module:Class) is checked in a child process (methods.user_code)
USER_CODE = pytest.mark.workflow


def problems(custom=None, methods=("full_cache",), workdir="."):
    return custom_method_problems({"methods": list(methods), "custom_methods": custom or {}}, workdir)


def test_a_wrapper_from_config_wraps_the_method_named_in_inner():
    custom = {"adakv_tova": {"press": "AdaKVPress", "inner": "tova", "kwargs": {"alpha_safeguard": 0.3}}}
    assert problems(custom, ["adakv_tova"]) == []
    press = build_press("adakv_tova", 0.25, custom_methods=custom)
    kvpress = import_kvpress()
    assert type(press) is kvpress.AdaKVPress and type(press.press) is kvpress.TOVAPress
    assert press.alpha_safeguard == 0.3 and press.press.compression_ratio == pytest.approx(0.75)
    assert retentions_for("adakv_tova", [0.5, 0.25], custom) == [0.5, 0.25]


@USER_CODE
def test_a_press_file_in_the_workflow_directory_builds():
    custom = {"value_norm": {"press": REPO_PRESS, "kwargs": {"n_sink": 2}}}
    assert problems(custom, ["value_norm"]) == []
    press = build_press("value_norm", 0.5, custom_methods=custom)
    assert type(press).__name__ == "ValueNormPress" and press.n_sink == 2 and press.compression_ratio == 0.5


@pytest.mark.parametrize(
    "custom, methods, expected",
    [
        ({}, ["snapkvv"], "methods names 'snapkvv', which is no method; did you mean 'snapkv'?"),
        ({"mine": {"press": "AdaKVPress"}}, ["mine"], "custom_methods.mine: AdaKVPress wraps another press; name the method it wraps in `inner`"),
        ({"mine": {"press": "AdaKVPress", "inner": "tovaa"}}, ["mine"], "custom_methods.mine.inner names 'tovaa', which is no method; did you mean 'tova'?"),
        ({"mine": {"press": "AdaKVPress", "inner": "full_cache"}}, ["mine"], "custom_methods.mine.inner: 'full_cache' has no press to wrap"),
        pytest.param({"mine": {"press": "no_such_module:Press"}}, ["mine"], "custom_methods.mine.press: press 'no_such_module:Press': module 'no_such_module' does not import", marks=USER_CODE),
        pytest.param({"mine": {"press": "collections:OrderedDict"}}, ["mine"], "custom_methods.mine.press: press 'collections:OrderedDict' is not a kvpress BasePress subclass", marks=USER_CODE),
        pytest.param({"mine": {"press": "../outside.py:Press"}}, ["mine"], "custom_methods.mine.press: press file '../outside.py' is outside the workflow directory", marks=USER_CODE),
        ({"mine": {"press": "KnormPress", "kwargs": {"window": 3}}}, ["mine"], "custom_methods.mine.kwargs: KnormPress does not take ['window']"),
        ({"snapkv": {"press": "KnormPress"}}, ["snapkv"], "custom_methods.snapkv shadows the built-in method 'snapkv' (SnapKV)"),
        ({"mine": {"press": "CriticalKVPress", "inner": "adakv_snapkv"}}, ["mine"], "custom_methods.mine does not build: AssertionError: CriticalKVPress requires a ScorerPress"),
    ],
    ids=["unknown-name", "wrapper-without-inner", "unknown-inner", "inner-without-press", "not-importable",
         "not-a-press", "file-outside", "bad-kwarg", "shadows-built-in", "inner-it-cannot-take"],
)
def test_bad_custom_methods_are_refused_naming_the_key(custom, methods, expected):
    found = problems(custom, methods)
    assert any(expected in problem for problem in found), found


def test_a_methods_jobs_see_only_the_custom_settings_it_is_built_from(tmp_path):
    custom = {
        "mine": {"press": "presses/mine.py:Mine"},
        "ada_mine": {"press": "AdaKVPress", "inner": "mine"},
        "other": {"press": "KnormPress"},
    }
    assert set(methods_needed("ada_mine", custom)) == {"ada_mine", "mine"}
    assert methods_needed("snapkv", custom) == {}
    (tmp_path / "presses").mkdir()
    (tmp_path / "presses/mine.py").write_text("X = 1\n")
    before = {name: press_code_hash(name, custom, tmp_path) for name in ("mine", "ada_mine", "other")}
    assert before["other"] == "" and before["mine"]
    (tmp_path / "presses/mine.py").write_text("X = 2\n")
    after = {name: press_code_hash(name, custom, tmp_path) for name in ("mine", "ada_mine", "other")}
    assert after["mine"] != before["mine"] and after["ada_mine"] != before["ada_mine"] and after["other"] == ""


def test_editing_a_module_a_press_file_imports_reruns_its_cells(tmp_path):
    """A press that imports a helper from its folder: editing the helper once planned nothing, and a forced
    rerun moved the score from 54.54 to 0.00. Its hash now covers the workflow modules it imports, at any depth."""
    from kvcache_bench.methods.custom import press_files

    custom = {"mine": {"press": "presses/mine.py:Mine"}}
    (tmp_path / "presses").mkdir()
    (tmp_path / "presses/mine.py").write_text("import torch\nfrom scoring import score\nfrom .weights import w\n")
    (tmp_path / "presses/scoring.py").write_text("from presses.weights import w\ndef score(): return 1\n")
    (tmp_path / "presses/weights.py").write_text("w = 1\n")
    (tmp_path / "presses/unused.py").write_text("u = 1\n")
    assert press_files("mine", custom, str(tmp_path)) == ["presses/mine.py", "presses/scoring.py", "presses/weights.py"]
    before = press_code_hash("mine", custom, tmp_path)
    (tmp_path / "presses/unused.py").write_text("u = 2\n")
    assert press_code_hash("mine", custom, tmp_path) == before  # a module it does not import changes nothing
    (tmp_path / "presses/weights.py").write_text("w = 2\n")  # two imports away
    assert press_code_hash("mine", custom, tmp_path) != before

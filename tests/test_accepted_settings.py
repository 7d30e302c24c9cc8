"""Every setting the schema accepts is used or refused with the reason: none is accepted and ignored."""

from __future__ import annotations

import json

import yaml
from conftest import REPO, copy_workflow, run_snakemake

from kvcache_bench.study.config_checks import method_kwargs_problems


def test_compression_ratio_in_a_custom_press_kwargs_is_refused_not_replaced():
    config = yaml.safe_load((REPO / "config/demo.yaml").read_text())
    config["custom_methods"] = {"value_norm": {"press": "presses/value_norm.py:ValueNormPress", "kwargs": {"compression_ratio": 0.7}}}
    [problem] = method_kwargs_problems(config)
    assert problem.startswith("custom_methods.value_norm.kwargs sets compression_ratio: each cell's is 1 - its retention")
    config["custom_methods"]["value_norm"]["kwargs"] = {}
    assert method_kwargs_problems(config) == []


def test_a_built_models_own_seed_builds_it_and_a_new_seed_rebuilds_it(tmp_path):
    """build.seed beside build.model_config was accepted and ignored: the model was built with the study's seed,
    and changing it rebuilt nothing."""
    workdir = copy_workflow(tmp_path / "workflow")
    config = yaml.safe_load((workdir / "config/demo-random.yaml").read_text())
    config["models"]["demo-tiny-llama"]["build"]["seed"] = 7
    (workdir / "config/seeded.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    model = "results/models/demo-tiny-llama"
    run_snakemake(workdir, "--cores", "1", model, "--configfile", "config/seeded.yaml", check=True)
    manifest = json.loads((workdir / model / "config.json.manifest.json").read_text())
    assert manifest["seed"] == 7 and manifest["params"]["seed"] == 7
    config["models"]["demo-tiny-llama"]["build"]["seed"] = 8
    (workdir / "config/seeded.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    planned = run_snakemake(workdir, "-n", model, "--configfile", "config/seeded.yaml", check=True)
    assert "rule build_demo_model:" in planned.stdout + planned.stderr


def schema_keys(node, path=()) -> dict[str, list[str]]:
    """Every property name the config schema accepts, with the dotted paths it appears at."""
    found: dict[str, list[str]] = {}

    def walk(node, path):
        if not isinstance(node, dict):
            return
        for key, child in (node.get("properties") or {}).items():
            found.setdefault(key, []).append(".".join((*path, key)))
            walk(child, (*path, key))
        for child in (node.get("patternProperties") or {}).values():
            walk(child, (*path, "*"))
        for keyword in ("additionalProperties", "items"):
            walk(node.get(keyword), (*path, "*"))
        for keyword in ("oneOf", "anyOf", "allOf"):
            for child in node.get(keyword) or []:
                walk(child, path)
        for name, child in (node.get("definitions") or node.get("$defs") or {}).items():
            walk(child, (f"#{name}",))

    walk(node, tuple(path))
    return found


def test_every_key_the_schema_accepts_is_read_by_name_somewhere_in_the_workflow():
    """A schema key no rule, script or package module reads by name is accepted and ignored (as build.seed beside
    build.model_config once was): a new key must be used, or left out of the schema so that it is refused."""
    import re

    keys = schema_keys(yaml.safe_load((REPO / "schemas/config.schema.yaml").read_text()))
    assert len(keys) > 50  # the walk reaches the nested settings, not only the top level
    sources = [*REPO.glob("kvcache_bench/**/*.py"), *REPO.glob("rules/*.smk"), REPO / "Snakefile", *REPO.glob("scripts/*.py")]
    code = "\n".join(path.read_text() for path in sources)
    unread = {
        key: paths
        for key, paths in keys.items()
        if not re.search(rf"[\"']{re.escape(key)}[\"']|\b{re.escape(key)}=|\.{re.escape(key)}\b", code)
    }
    assert not unread, f"accepted by the schema, read nowhere: {unread}"

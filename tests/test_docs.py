"""The generated parts of the docs match what they describe: every config key, and who imports whom."""

from __future__ import annotations

import re
import runpy

import pytest
import yaml
from conftest import REPO

DOCS = runpy.run_path(str(REPO / "tools/docs.py"))


@pytest.mark.parametrize(
    "what", ["config", "modules", "methods", "method-families", "parity", "findings", "gemma3-findings"]
)
def test_generated_docs_are_up_to_date(what):
    relative, generate = DOCS["TARGETS"][what]
    text = (REPO / relative).read_text()
    assert DOCS["replace_block"](text, what, generate()) == text, f"run: python tools/docs.py {what}"


def test_every_config_key_has_a_description_in_the_schema():
    schema = yaml.safe_load((REPO / "schemas/config.schema.yaml").read_text())
    rows = DOCS["config_rows"](schema)
    assert any("`models.<name>.max_context_tokens`" in row for row in rows)
    undescribed = [row.split("|")[1].strip() for row in rows if row.endswith("|  |")]
    assert not undescribed, undescribed


# A path in prose or a docstring names a file of this checkout, or its paragraph says the file is retired and names
# the commit to `git show` it from. Tests write their own config/ and presses/ files: only the tools
# and the package's paths are checked.
PROSE = [
    "README.md",
    "config/README.md",
    "reference/README.md",
    "reference/*/README.md",
    "docs/*.md",
    "tests/*.py",
    "tools/**/*",
    ".ci/*",
]
TOOL_PATH = re.compile(r"(?<![\w./-])((?:tools|kvcache_bench)/[\w./-]*\w)")
MODULE = re.compile(r"(?<![\w./-])kvcache_bench((?:\.\w+)+)")
GIT_SHOW = re.compile(r"git show \w+:\S+")


def module_exists(parts: list[str]) -> bool:
    """kvcache_bench.<parts>: packages down to a module, then a name that module defines (or imports)."""
    where = REPO / "kvcache_bench"
    for index, part in enumerate(parts):
        if (where / part).is_dir():
            where = where / part
        elif (where / f"{part}.py").exists():
            rest = parts[index + 1 :]
            return not rest or re.search(rf"\b{rest[0]}\b", (where / f"{part}.py").read_text()) is not None
        else:
            return False
    return True


def missing_paths(text: str) -> list[str]:
    missing = []
    for paragraph in re.split(r"\n\s*\n", text):
        if "retired" in paragraph and GIT_SHOW.search(paragraph):
            continue
        for path in TOOL_PATH.findall(paragraph):
            if not (REPO / path.rstrip(".")).exists():
                missing.append(path)
        for dotted in MODULE.findall(paragraph):
            if not module_exists(dotted.strip(".").split(".")):
                missing.append("kvcache_bench" + dotted)
    return missing


def test_every_tool_and_module_the_docs_name_exists_or_is_marked_retired():
    files = sorted({path for pattern in PROSE for path in REPO.glob(pattern) if path.is_file()})
    assert REPO / "README.md" in files and REPO / "tools/gpu/multigpu_check.sh" in files
    assert missing_paths("run tools/gpu/gone.py, then kvcache_bench.engine.gone.f") == [
        "tools/gpu/gone.py",
        "kvcache_bench.engine.gone.f",
    ]
    assert missing_paths("tools/gpu/gone.py (retired, git show abc1234:tools/gpu/gone.py)") == []
    missing = {str(path.relative_to(REPO)): found for path in files if (found := missing_paths(path.read_text()))}
    assert not missing, missing


# A link to a heading works on GitHub only when its anchor is the heading's slug: lower case, punctuation dropped,
# spaces to hyphens (so a heading that grows a date or a path changes its anchor).
LINK = re.compile(r"\]\(([^()\s#]*)#([^()\s]+)\)")


def github_slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def broken_anchors(page, text: str) -> list[str]:
    broken = []
    for target, anchor in LINK.findall(text):
        linked = (page.parent / target) if target else page
        if linked.suffix != ".md" or not linked.exists():
            continue  # a missing file is test_every_tool_and_module_the_docs_name_exists_or_is_marked_retired's
        headings = re.findall(r"^#+ (.+)$", linked.read_text(), re.M)
        if anchor not in {github_slug(heading) for heading in headings}:
            broken.append(f"{target}#{anchor}")
    return broken


def test_every_link_to_a_heading_finds_it():
    readme = REPO / "README.md"
    assert github_slug("Liger kernels on real weights (one H200, `config/x.yaml`, 2026-12-04)") == (
        "liger-kernels-on-real-weights-one-h200-configxyaml-2026-12-04"
    )
    assert broken_anchors(readme, "[a](docs/perf-reference.md#no-such-heading) [b](#performance)") == [
        "docs/perf-reference.md#no-such-heading"
    ]
    pages = [readme, REPO / "config/README.md", REPO / "reference/README.md", *sorted((REPO / "docs").glob("*.md"))]
    broken = {str(page.relative_to(REPO)): found for page in pages if (found := broken_anchors(page, page.read_text()))}
    assert not broken, broken

"""The generated parts of the docs match what they describe: every config key, and who imports whom."""

from __future__ import annotations

import runpy

import pytest
import yaml
from conftest import REPO

DOCS = runpy.run_path(str(REPO / "tools/docs.py"))


@pytest.mark.parametrize("what", ["config", "modules", "methods", "method-families", "parity", "findings"])
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

"""A custom press's label is the user's text, and it lands in Markdown tables, the report's captions, the params the
report embeds in a <script> element, and figures. Issue 51: a label closed the report's <script id="results"> and
both payloads ran in Chromium; summary.md and ranking.md carried it raw. Each format shows it as typed, and no
format reads it as markup. (The report itself, in Chromium: tests/test_report.py.)"""

import ast
import html
import json
import pickle
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from markdown_view import markup_left, raw_html, shown, tables_of

from kvcache_bench.analysis.figures.quality_vs_retention import quality_vs_retention
from kvcache_bench.analysis.figures.style import save_figure
from kvcache_bench.analysis.needle_heatmap import heatmap_figure
from kvcache_bench.analysis.padding import PADDING_COLUMNS, padding_markdown
from kvcache_bench.analysis.ranking import ranking_markdown
from kvcache_bench.analysis.summary_markdown import summary_markdown
from kvcache_bench.analysis.versus import highlight_caption, label_of
from kvcache_bench.escaping import markdown_text, one_line, script_safe
from kvcache_bench.methods.registry import METHODS

REPO = Path(__file__).resolve().parents[1]

HOSTILE = {
    "issue": "<script>alert(1)</script><img src=x onerror=alert(2)>",  # issue 51's label
    "closer": "</script><script>alert(3)</script>",
    "bar": "left | right",  # a table's column bar
    "newline": "line one\nline two",  # a row's end
    "markdown": "`code` *em* _em_ ~~gone~~ [link](javascript:alert(4)) ![img](x) &lt; &amp; <b>bold</b>",
    "dollars": "$1 and $2, $\\frac$",  # GitHub's math; matplotlib's mathtext (\frac crashed the figure job)
    "backslashes": "back\\slash \\| \\\\",
    "controls": "\x1b[31mred\x1b[0m\ttab\r\nend",  # a terminal escape, a tab, a Windows line end
    "braces": "{method} {0}",  # Snakemake formats a str param with the wildcards
}
ORDINARY = [spec.label for spec in METHODS.values()] + ["Value norm", "value_norm", "my_press_2"]


@pytest.mark.parametrize("label", list(HOSTILE.values()), ids=list(HOSTILE))
def test_a_hostile_label_is_shown_as_typed_in_markdown_and_read_as_no_syntax(label):
    escaped = markdown_text(label)
    assert "\n" not in escaped and "\r" not in escaped and "\x1b" not in escaped
    assert markup_left(escaped) == [], escaped
    assert shown(escaped) == one_line(label)


def test_ordinary_labels_and_method_names_are_written_as_they_were():
    # the built-in labels, a custom label, names: a table of them is byte for byte what it was before escaping existed
    assert [markdown_text(label) for label in ORDINARY] == ORDINARY


def summary_row(method, retention, score, label=None, mode="question_aware", n=40):
    return dict(dataset="longbench", task="qasper", model="llama", method=method, question_mode=mode,
                retention=retention, batch_size=1, decode_batch_size=1, metric="qa_f1", n=n, expected_n=n,
                incomplete=False, small_n=False, score=score, ci_low=score - 4, ci_high=score + 4, n_paired=n,
                full_cache_score=50.0, diff_vs_full=score - 50.0, diff_ci_low=score - 52.0, diff_ci_high=score - 48.0,
                effective_retention=retention, truncated_share=0.0, context_lost=0.0, retention_off=False,
                context_cut=False, label=label)


def hostile_summary() -> pd.DataFrame:
    rows = [summary_row("full_cache", 1.0, 50.0, "Full cache"), summary_row("snapkv", 0.5, 47.0, "SnapKV")]
    rows += [summary_row(f"mine_{i}", 0.5, 40.0 - i, label) for i, label in enumerate(HOSTILE.values())]
    return pd.DataFrame(rows)


def test_summary_ranking_and_padding_tables_keep_their_columns_and_show_hostile_labels_as_typed():
    summary = hostile_summary()
    refusal = {"target": "longbench/qasper/llama/mine_1/question_aware/retention-0.50_batch-2_decode-1",
               "problems": [f"{HOSTILE['closer']} evicts cache entries and batch size is 2 | see docs"]}
    padding = pd.DataFrame([dict.fromkeys(PADDING_COLUMNS, 1) | {"task": "qasper", "method": f"mine_{i}", "retention": 0.5}
                            for i in range(len(HOSTILE))])
    labels = {f"mine_{i}": label for i, label in enumerate(HOSTILE.values())}
    files = {
        "summary.md": summary_markdown(summary, not_run=[refusal]),
        "ranking.md": ranking_markdown(summary),
        "padding_probe.md": padding_markdown(padding, labels),
    }
    expected = {one_line(label) for label in HOSTILE.values()}
    for name, markdown in files.items():
        tables = tables_of(markdown)
        assert tables, name
        for table in tables:
            assert {len(row) for row in table} == {len(table[0])}, f"{name}: a row with other columns than its header"
        assert not raw_html(markdown), f"{name}: {raw_html(markdown)}"
        methods = {shown(row[table[0].index("method")]) for table in tables if "method" in table[0] for row in table[1:]}
        assert expected <= methods, f"{name}: {sorted(expected - methods)} not shown as typed"
    refused = [row for table in tables_of(files["summary.md"]) for row in table if row[0].startswith("`")]
    assert [shown(row[1]) for row in refused] == [one_line(refusal["problems"][0])]


class Elements(HTMLParser):
    """The start tags an HTML parser (a browser's rules: a <script> element ends at its first '</script')
    finds, with their attributes."""

    def __init__(self):
        super().__init__()
        self.tags = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def test_params_text_in_the_report_cannot_close_its_script_element_and_reads_back_as_the_labels():
    from snakemake.iocontainers import Params
    from snakemake.logging import format_dict

    labels = script_safe({f"mine_{i}": label for i, label in enumerate(HOSTILE.values())})
    not_run = script_safe([{"target": "t", "problems": [HOSTILE["closer"]]}])
    params = Params(fromdict={"labels": labels, "not_run": not_run, "seed": 1234})
    # what Snakemake's report does with a job's params (snakemake/report/__init__.py, html_reporter's template)
    text = format_dict(params).replace("\n", r"\n").replace('"', r"\"")
    page = f'<script id="results">\n    var results = {json.dumps({"r": {"job_properties": {"params": text}}})};\n    </script>'
    parser = Elements()
    parser.feed(page)
    assert parser.tags == [("script", {"id": "results"})], "a label opened an element of its own"
    assert not re.search("[<>&]", text)
    # the text is still the literal of the labels as written; the job reads them, not the text
    assert ast.literal_eval(f"{labels}") == {f"mine_{i}": label for i, label in enumerate(HOSTILE.values())}
    assert ast.literal_eval(f"{not_run}") == [{"target": "t", "problems": [HOSTILE["closer"]]}]
    received = pickle.loads(pickle.dumps(labels))
    assert type(received) is dict and received == labels


def test_ordinary_params_keep_their_text_so_a_finished_study_reruns_nothing():
    # Snakemake compares a param by repr(): unchanged text, no rerun
    ordinary = {"full_cache": "Full cache", "mine": "Value norm", "n": [1, 0.5, None, True, ("a",)], "x": {"y": "z"}}
    assert repr(script_safe(ordinary)) == repr(ordinary)
    assert repr(script_safe([ordinary])) == repr([ordinary])


def render_caption(name: str, params: dict, workdir: Path) -> str:
    """A report caption as Snakemake renders it: Jinja (its environment's settings), then docutils' HTML body, run
    from the workflow's directory as `snakemake --report` is."""
    import os
    from types import SimpleNamespace

    from docutils.core import publish_parts
    from jinja2 import Environment

    # Snakemake appends these link targets to every caption (report/__init__.py): a label reading `Workflow`_ linked
    links = "\n\n.. _Workflow: javascript:show_panel('workflow')\n.. _Statistics: javascript:show_panel('statistics')\n"
    text = (REPO / "report" / f"{name}.rst").read_text() + links
    snakemake = SimpleNamespace(params=SimpleNamespace(**params), wildcards=SimpleNamespace())
    rst = Environment(trim_blocks=True, lstrip_blocks=True).from_string(text).render(snakemake=snakemake)
    here = os.getcwd()
    os.chdir(workdir)
    try:
        return publish_parts(rst, writer="html")["body"]
    finally:
        os.chdir(here)


@pytest.mark.parametrize(
    "caption", ["quality_vs_retention", "paired_scatter", "question_change", "quality_by_family", "multi_turn"]
)
def test_a_caption_names_hostile_labels_as_typed_and_reads_none_of_them_as_markup(caption, tmp_path):
    (tmp_path / "secret.txt").write_text("INCLUDED-FILE-CONTENT")
    labels = {
        "full_cache": "Full cache",
        "mine": HOSTILE["issue"],
        "marks": "*em* `cite` Workflow_ |sub| [1]_ see javascript:alert(5) or http://example.com",
        # a directive on a line of its own: the file's text went into the report
        "include": "x\n\n.. include:: secret.txt\n\n.. raw:: html\n\n   <b>raw</b>",
    }
    # the params a figure rule gives its job: the labels for the figure, and the caption's text
    params = {"highlight": script_safe(labels), "report_caption": highlight_caption(labels), "strongest": 3}
    body = render_caption(caption, params, tmp_path)
    parser = Elements()
    parser.feed(body)
    assert {tag for tag, _ in parser.tags} <= {"p", "tt"}, parser.tags  # no link, emphasis, image or raw HTML
    assert "INCLUDED-FILE-CONTENT" not in body
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", "", body)).split())
    assert ", ".join(one_line(label) for label in labels.values()) in text


def test_figures_draw_hostile_labels_as_typed_and_their_svg_holds_no_markup(tmp_path):
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    label = "$\\frac$ </script><script>alert(1)</script> & $1 and $2"
    rows = [summary_row("full_cache", 1.0, 50.0, "Full cache")]
    rows += [summary_row("mine", r, 40.0 + 10 * r, label) for r in (0.5, 0.25)]
    figures = {
        # mathtext once crashed this job on '$\frac$' (ParseSyntaxException) and drew '$1 and $2' as '1and2'
        "quality_vs_retention": quality_vs_retention(pd.DataFrame(rows), title="t", highlight=["full_cache", "mine"],
                                                     labels={"mine": label}),
        "needle": heatmap_figure([(label, [1024, 2048], [0, 50], np.full((2, 2), 0.5))], title="needle"),
    }
    for name, figure in figures.items():
        texts = [t for t in figure.findobj(Text) if label in t.get_text()]
        assert texts and not any(t.get_parse_math() for t in texts), f"{name}: the label is drawn as math"
        png, svg = tmp_path / f"{name}.png", tmp_path / f"{name}.svg"
        if name == "needle":
            figure.savefig(png), figure.savefig(svg), plt.close(figure)
        else:
            save_figure(figure, png, svg)
        root = ET.parse(svg).getroot()  # well-formed XML: '<' and '&' in the label were escaped
        names = {element.tag.rsplit("}", 1)[-1] for element in root.iter()}
        assert not names & {"script", "foreignObject", "iframe", "a", "img"}, f"{name}: {names}"
        assert not [a for element in root.iter() for a in element.attrib if a.lower().startswith("on")]


def test_a_blank_label_names_the_method_by_its_name_not_an_empty_cell():
    custom = {"mine": {"press": "presses/value_norm.py:ValueNormPress", "label": " \n\t "}}
    assert label_of("mine", custom) == "mine"  # what the rules give the jobs (rules/common.smk: custom_labels)
    # a table written with the blank label, as one made before this was: the name in its method cell
    summary = pd.DataFrame([summary_row("full_cache", 1.0, 50.0, "Full cache"), summary_row("mine", 0.5, 40.0, " \n ")])
    methods = [row[1] for table in tables_of(ranking_markdown(summary)) for row in table[1:]]
    assert methods == ["Full cache", "mine"]

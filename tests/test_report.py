"""The report a reader opens, and rebuilding one figure: both on a copy of the checkout, after the demo."""

import html
import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import copy_workflow, run_snakemake
from markdown_view import raw_html, shown, tables_of
from matplotlib.image import imread

FIGURES = ["quality_vs_retention", "paired_scatter", "batch_size"]
TABLES = ["summary.csv", "per_example.csv", "ranking.md"]
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--window-size=1400,1000", "--virtual-time-budget=15000",
]


@pytest.fixture(scope="session")
def demo_report(demo_run) -> Path:
    run_snakemake(demo_run, "--report", "results/report.html", "--configfile", "config/demo.yaml", check=True)
    return demo_run / "results" / "report.html"


def embedded_results(report_html: str) -> dict:
    match = re.search(r'<script id="results">\s*var results = (.*?);\s*</script>', report_html, re.S)
    assert match, "report has no embedded results"
    return json.loads(match.group(1))


@pytest.mark.slow
def test_report_embeds_every_figure_and_table_with_its_caption(demo_report):
    results = embedded_results(demo_report.read_text())
    for name in FIGURES:
        entry = results[f"results/figures/{name}.png"]
        assert entry["data_uri"].startswith("data:image/png;") and ";base64," in entry["data_uri"]
        assert entry["caption"].strip()
    for name in TABLES:
        assert results[f"results/tables/{name}"]["caption"].strip()
    categories = re.search(r'<script id="categories">\s*var categories = (.*?);\s*</script>', demo_report.read_text(), re.S)
    assert {"Figures", "Tables"} <= set(json.loads(categories.group(1)))


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        if shutil.which(name):
            return shutil.which(name)
    if os.environ.get("KVCACHE_BENCH_REQUIRE_CHROMIUM") == "1":
        pytest.fail("set-up reported chromium ready, but neither chromium nor chromium-browser is on PATH")
    pytest.skip("chromium is not installed: tools/bootstrap.sh installs it as root (apt-get install chromium)")


def rendered_dom(html: Path, profile: Path) -> str:
    return subprocess.run(
        [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", html.as_uri()],
        capture_output=True, text=True, timeout=180, check=True,
    ).stdout


def screenshot(html: Path, png: Path, profile: Path) -> np.ndarray:
    subprocess.run(
        [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={png}", html.as_uri()],
        capture_output=True, timeout=180, check=True,
    )
    return imread(png)[..., :3]


def opened(report_html: str, call: str) -> str:
    """The report, running ``call`` (JavaScript of its app) once it has loaded, as a click would."""
    script = (
        "<script>window.addEventListener('load', function () { setTimeout(function () {"
        f"{call}; }}, 200); }});</script>"
    )
    # only the page's own closing tag: the embedded JS libraries contain "</body>" in strings
    head, tag, tail = report_html.rpartition("</body>")
    assert tag, "report has no </body>"
    return head + script + tag + tail


def showing(report_html: str, figure_path: str) -> str:
    """The report, opened on one figure the way its eye button does (app.setView with the embedded data)."""
    return opened(
        report_html,
        f"app.setView({{content: 'img', contentPath: results[{json.dumps(figure_path)}].data_uri, "
        f"resultPath: {json.dumps(figure_path)}}})",
    )


@pytest.mark.slow
@pytest.mark.parametrize("figure", FIGURES)
def test_report_figures_render_in_headless_chromium(demo_report, figure, tmp_path):
    html = tmp_path / f"{figure}.html"
    html.write_text(showing(demo_report.read_text(), f"results/figures/{figure}.png"))
    dom = rendered_dom(html, tmp_path / "profile-dom")
    shown = re.findall(r'<img src="(data:image/png;[^"]*)"', dom)
    assert any(f"filename={figure}.png;" in uri for uri in shown), f"{figure}: the report did not display it"
    home = screenshot(demo_report, tmp_path / "home.png", tmp_path / "profile-home")
    shot = screenshot(html, tmp_path / f"{figure}.png", tmp_path / "profile")
    content = shot[:, 300:]  # right of the report's navigation bar
    non_white = (content < 0.95).any(axis=-1).mean()
    colours = len(np.unique((content * 255).astype(np.uint8).reshape(-1, 3), axis=0))
    assert non_white > 0.01, f"{figure}: the report shows an (almost) blank page"
    assert colours > 50, f"{figure}: only {colours} colours on screen: no figure rendered"
    assert np.abs(shot - home).mean() > 0.005, f"{figure}: the view did not change from the report's home page"


def copy_with_results(demo_run: Path, destination: Path) -> Path:
    """A copy of a finished demo, outputs and Snakemake's records included, timestamps kept."""
    shutil.copytree(demo_run, destination, symlinks=True)
    return destination


def jobs_planned(workdir: Path) -> dict[str, int]:
    result = run_snakemake(workdir, "-n", "--configfile", "config/demo.yaml", "--quiet", "rules", check=True)
    table = re.search(r"job\s+count\n[-\s]+\n(.*?)\n\s*total", result.stdout + result.stderr, re.S)
    if table is None:
        return {}
    return {line.split()[0]: int(line.split()[1]) for line in table.group(1).splitlines() if line.strip()}


@pytest.mark.slow
def test_finished_demo_plans_nothing(demo_run, tmp_path):
    assert jobs_planned(copy_with_results(demo_run, tmp_path / "copy")) == {}


@pytest.mark.slow
def test_editing_one_figure_script_reruns_only_that_figure(demo_run, tmp_path):
    workdir = copy_with_results(demo_run, tmp_path / "copy")
    script = workdir / "scripts" / "figure_paired_scatter.py"
    # a real edit (the syntax tree changes); a comment alone reruns nothing (tests/test_rerun.py)
    script.write_text(script.read_text() + "\nREADERS_TWEAK = 1\n")
    assert jobs_planned(workdir) == {"figure_paired_scatter": 1, "all": 1}


@pytest.mark.slow
def test_changing_one_figure_param_reruns_only_that_figure(demo_run, tmp_path):
    workdir = copy_with_results(demo_run, tmp_path / "copy")
    rules = workdir / "rules" / "figures.smk"
    text = rules.read_text()
    assert "band_alpha=0.15," in text
    rules.write_text(text.replace("band_alpha=0.15,", "band_alpha=0.3,", 1))  # the first: figure_quality_vs_retention's
    assert jobs_planned(workdir) == {"figure_quality_vs_retention": 1, "all": 1}


def test_refused_cells_never_reach_the_table(tmp_path):
    workdir = copy_workflow(tmp_path / "copy")
    config = yaml.safe_load((workdir / "config" / "demo.yaml").read_text())
    config["batch_sizes"] = [1, 2]  # SnapKV at batch 2 is refused by the config check
    config["methods"] = ["full_cache", "snapkv"]
    config.pop("batch_size_overrides", None)
    (workdir / "config" / "refused.yaml").write_text(yaml.safe_dump(config))
    result = run_snakemake(workdir, "results/tables/summary.csv", "-n", "--configfile", "config/refused.yaml", check=True)
    aggregate = re.search(r"rule aggregate:\n\s+input: (.*?)\n", result.stdout + result.stderr)
    assert aggregate, result.stdout[-2000:]
    table_inputs = aggregate.group(1).split(", ")
    assert "results/scores/synthetic/synthetic_qa/canary/full_cache/question_aware/retention-1.00_batch-2_decode-1.jsonl" in table_inputs
    assert not [path for path in table_inputs if "/snapkv/" in path and path.endswith("_batch-2_decode-1.jsonl")]
    assert [path for path in table_inputs if "/snapkv/" in path and path.endswith("_batch-1_decode-1.jsonl")]


# Issue 51: a custom press's label went raw into report.html's <script id="results"> (its jobs' params); its
# '</script>' ended that element and both payloads ran in headless Chromium. This one also carries what a caption
# (reStructuredText) and a Markdown table read as syntax, and a directive that once put a file into the report.
INCLUDED = "INCLUDED-FILE-CONTENT-7f3a"


def one_line(label: str) -> str:
    """The label as a table or caption shows it: each run of whitespace one space (as kvcache_bench.escaping.one_line
    writes it; this test's label holds no other control character). Written here, not imported, so that this module
    imports on a checkout without the package's escaping and the tests below fail there by what they see."""
    return " ".join(label.split())


def hostile_label(secret: Path) -> str:
    return (
        "</script><script>document.documentElement.dataset.pwnedScript=1</script>"
        "<img src=x onerror=document.documentElement.dataset.pwnedImg=1> a|b `c` *d* $x$ {w} "
        f"[x](javascript:alert(3)) & javascript:alert(4)\n\n.. include:: {secret}\n\n_e_"
    )


@pytest.fixture(scope="module")
def hostile_report(demo_run, tmp_path_factory) -> tuple[Path, str]:
    """The finished demo plus one custom press under a hostile label (one cell: SnapKV and the full cache are the
    demo's), run and reported as a user would; the report and the label."""
    workdir = copy_with_results(demo_run, tmp_path_factory.mktemp("hostile") / "workflow")
    secret = workdir.parent / "secret.txt"
    secret.write_text(INCLUDED + "\n")
    label = hostile_label(secret)
    config = yaml.safe_load((workdir / "config" / "demo.yaml").read_text())
    config.update(
        methods=["full_cache", "snapkv", "mine"],
        retentions=[0.5],
        question_modes=["question_aware"],
        custom_methods={"mine": {"press": "presses/value_norm.py:ValueNormPress", "kwargs": {"n_sink": 2}, "label": label}},
    )
    (workdir / "config" / "hostile.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    # the outputs whose jobs' params and captions carry the label (the aggregate's, ranking's and a highlighting
    # figure's); the other figures' jobs would add time, not cases
    targets = ["results/tables/ranking.md", "results/figures/quality_vs_retention.png"]
    run_snakemake(workdir, *targets, "--cores", "2", "--configfile", "config/hostile.yaml", check=True)
    run_snakemake(workdir, *targets, "--report", "results/report.html", "--configfile", "config/hostile.yaml", check=True)
    return workdir / "results" / "report.html", label


@pytest.mark.slow
def test_a_hostile_label_runs_no_script_and_adds_no_element_to_the_report_in_chromium(hostile_report, tmp_path):
    report, label = hostile_report
    text = report.read_text()
    views = {
        "home": "void 0",  # where the payloads ran: the page's own parse
        # the figure's caption (HTML the app sets as innerHTML) and its job's params, as its info button shows them
        "figure info": "app.showResultInfo('results/figures/quality_vs_retention.png')",
    }
    for name, call in views.items():
        page = tmp_path / f"{name.replace(' ', '-')}.html"
        page.write_text(opened(text, call))
        dom = rendered_dom(page, tmp_path / f"profile-{name.replace(' ', '-')}")
        root = re.search(r"<html[^>]*>", dom).group(0)
        assert "data-pwned" not in root, f"{name}: the label's script ran ({root})"
        assert '<img src="x"' not in dom, f"{name}: the label's <img> is an element of the page"
        assert INCLUDED not in dom, f"{name}: a file the label named is in the report"
        assert 'href="javascript:alert' not in dom, f"{name}: the label made a javascript: link"
        if name == "figure info":
            # the caption names the highlighted methods, the label as typed on one line
            assert f"Drawn bold: Full cache, {html.escape(one_line(label), quote=False)} (" in dom
    results = embedded_results(text)  # its <script id="results"> is whole: the label closed nothing
    params = {path: result["job_properties"]["params"] for path, result in results.items()}
    assert "labels={'mine': " in params["results/tables/summary.csv"]  # the aggregate job's, as the issue found it
    assert [path for path, text in params.items() if re.search("[<>&]", text)] == []


@pytest.mark.slow
def test_a_hostile_label_keeps_the_tables_columns_and_the_figures_svg_plain(hostile_report):
    report, label = hostile_report
    tables = report.parent / "tables"
    for name in ("summary.md", "ranking.md"):
        markdown = (tables / name).read_text()
        for table in tables_of(markdown):
            assert {len(row) for row in table} == {len(table[0])}, f"{name}: a row with other columns than its header"
        assert not raw_html(markdown), f"{name}: HTML that GitHub would render: {raw_html(markdown)}"
        shown_methods = [shown(row[table[0].index("method")]) for table in tables_of(markdown) for row in table[1:]]
        assert one_line(label) in shown_methods, f"{name}: the label is not shown as typed"
    # the CSV, which the ranking and figures read back, holds the label as written
    assert label in set(pd.read_csv(tables / "summary.csv")["label"])
    # the figure's SVG is well-formed XML ('<' and '&' escaped) and holds no element the label spelled out
    root = ET.parse(report.parent / "figures" / "quality_vs_retention.svg").getroot()
    names = {element.tag.rsplit("}", 1)[-1] for element in root.iter()}
    assert not names & {"script", "foreignObject", "iframe", "a", "img"}, names

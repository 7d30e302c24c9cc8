"""How GitHub reads a Markdown table, for the tests of what the workflow writes into one (tests/test_escaping.py,
tests/test_report.py). Test code only, importing nothing of the package: a test module that uses these still
imports, and fails by what it asserts, on a checkout that predates the package's escaping (issue 51)."""

import re


def gfm_cells(row: str) -> list[str]:
    """A table row's cells as GitHub splits them: at each '|' not escaped by a backslash."""
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", row.strip())[1:-1]]


def shown(markdown: str) -> str:
    """What GitHub displays of escaped inline text: '\\|' is a bar in a table cell, then a backslash before ASCII
    punctuation shows that character."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown.replace("\\|", "|"))


def raw_html(markdown: str) -> list[str]:
    """What GitHub would read as raw HTML or an autolink: '<' not escaped, then a letter, '/', '!' or '?' (a '<'
    before a space, as in our own "small n (< 30)", is text). Code spans (a refused cell's target) left out."""
    return re.findall(r"(?<!\\)<[A-Za-z/!?]", re.sub(r"`[^`|]*`", "", markdown))


def markup_left(markdown: str) -> list[str]:
    """Characters GitHub would read as syntax: any of these not escaped, and '_' not between two letters or digits."""
    bare = re.sub(r"\\.", "", markdown)
    return re.findall(r"[\\`*\[\]<>&$~|]|(?<![^\W_])_|_(?![^\W_])", bare)


def tables_of(markdown: str) -> list[list[list[str]]]:
    """Every table of a Markdown file, as rows of cells (the header row first, the rule row left out)."""
    tables, current = [], []
    for line in markdown.splitlines() + [""]:
        if line.startswith("|"):
            if not re.fullmatch(r"\|[-:| ]+\|", line):
                current.append(gfm_cells(line))
        elif current:
            tables.append(current)
            current = []
    return tables

"""A user's text escaped for the format it lands in: Markdown, the report's captions, the params the report embeds.

The text is a custom press's ``label``, a comparison's title, a refusal that quotes them; the formats are Markdown
(tables and prose), the reStructuredText of the report's captions, and the text of a job's params that
``snakemake --report`` writes inside a ``<script>`` element.

Each escape leaves ordinary text as it is (every built-in label, "Value norm", a method name such as
``value_norm``), so a table, caption or job of ordinary labels is byte for byte what it was before the escape
existed. A label ``</script><img src=x onerror=alert(2)>`` once closed the report's ``<script id="results">``
block and both payloads ran in Chromium; ``|`` and a newline broke ``summary.md``'s tables; a label holding
``.. include:: /etc/hostname`` on a line of its own put that file into the report (docs/hostile-cases.md).

Figures need no escape here: matplotlib's SVG writer escapes ``<`` and ``&`` itself, and the figures' style turns
off mathtext (``text.parse_math``, analysis.figures.style), so ``$x$`` is drawn as typed and ``$\\frac$`` no
longer crashes the figure job.

Light on purpose (no import of the package or a third-party module): the workflow imports it when it is parsed.
"""

from __future__ import annotations

import re

# Every run of whitespace or control characters: a newline ends a Markdown table row and starts a new
# reStructuredText block (a directive); ESC and the other C0/C1 controls would reach a terminal that shows the file.
_BREAKS = re.compile(r"[\s\x00-\x1f\x7f-\x9f]+")


def one_line(text) -> str:
    """``text`` on one line: each run of whitespace and control characters (newlines, tabs, ESC) one space,
    none at either end."""
    return _BREAKS.sub(" ", str(text)).strip()


# ----------------------------------------------------------------------------- Markdown

# What GitHub's Markdown reads as syntax inside a line: the backslash itself, code spans, emphasis and
# strikethrough, links and images, raw HTML and autolinks, entities, a table's column bar, and math ($x$).
# '_' only where it can open or close emphasis (not between two letters or digits, as in `value_norm`), so a
# method name stays as typed. Parentheses, '!', '#', '+' and '-' mean something only after these or at the
# start of a line, where no user text stands. A backslash before any ASCII punctuation is a literal in
# CommonMark, and GitHub's tables read an escaped '|' as part of the cell.
_MARKDOWN_SPECIAL = re.compile(r"[\\`*\[\]<>|~&$]|(?<![^\W_])_|_(?![^\W_])")


def markdown_text(text) -> str:
    """User text as literal text on one line of Markdown, a table cell included: no HTML element, link, code span
    or emphasis can start in it, and no '|' or newline in it can end the cell or the row."""
    return _MARKDOWN_SPECIAL.sub(lambda match: "\\" + match.group(0), one_line(text))


# ----------------------------------------------------------------------------- reStructuredText (report captions)

# Every ASCII punctuation character: docutils reads a backslash before any of them as that character, literally.
# Inline markup (*emphasis*, `role`, name_ references, |substitutions|, [footnotes]_), a standalone URI
# (javascript:...), and with one_line's single line no directive (.. include::, .. raw::) can start.
_RST_SPECIAL = re.compile(r"[!-/:-@\[-`{-~]")


def rst_text(text) -> str:
    """User text as literal text inside a reStructuredText paragraph (a report caption)."""
    return _RST_SPECIAL.sub(lambda match: "\\" + match.group(0), one_line(text))


# ----------------------------------------------------------------------------- a job's params in the report

# Snakemake's report writes each job's params as text, f"{name}={value}", into a JSON string inside
# <script id="results">; json.dumps leaves '<' as it is, so a '</script>' in a param closed the element there.
# Inside a Python string literal '\x3c' is '<': a param's text written with these escapes is still the literal of
# the same value, and holds no '<', '>' or '&' at all.
_SCRIPT_ESCAPES = str.maketrans({"<": "\\x3c", ">": "\\x3e", "&": "\\x26"})


def _literal(value) -> str:
    """``repr(value)``, with '<', '>' and '&' in its strings written as escapes (the same literal for ordinary
    text: ``repr`` itself)."""
    if isinstance(value, str):
        return repr(value).translate(_SCRIPT_ESCAPES)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(key)}: {_literal(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_literal(item) for item in value) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(_literal(item) for item in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


class ScriptSafeDict(dict):
    """A param's value whose text cannot close the report's ``<script>`` element, with the user's text intact.

    Why a dict with its own text and not an escaped copy of the labels: the job, its manifest, its legends and
    tables all need the label as the user wrote it; only the text Snakemake shows of it in the report must not
    hold '<'. Snakemake takes that text from ``str()`` (the report) and ``repr()`` (whether params changed:
    unchanged for ordinary labels, so a finished study reruns nothing). Pickled to a job's script, or copied, it
    is a plain dict: a job never needs this module to read it.
    """

    def __repr__(self) -> str:
        return _literal(self)

    __str__ = __repr__

    def __reduce__(self):
        return dict, (dict(self),)


def script_safe(value):
    """``value`` (a param: a dict or list of dicts of labels, names, messages) with every dict in it a
    ``ScriptSafeDict``. A list stays a list (Snakemake rebuilds list params), so its items must be dicts."""
    if isinstance(value, dict):
        return ScriptSafeDict({key: script_safe(item) for key, item in value.items()})
    if isinstance(value, list):
        return [script_safe(item) for item in value]
    return value

"""Figures from the study's tables. Each figure is its own function, module, rule and script; what they share is
``style`` (the 8 pt style, the canvas and its caption, legends, saving), ``palette`` (each method's colour and
marker), ``cells`` (which cells a figure draws, and their labels) and ``panels`` (a panel's lines and axes).

What a figure draws in colour is the "versus" view (``analysis.versus``): the highlighted methods (your
press; by default every custom press and the full cache) on the same axes as the study's strongest and the
classic baselines, the other methods faint behind them; ``quality_by_family`` is the appendix that draws
every method in colour, one panel per method family (a family is never split across panels).

Every method keeps one colour and marker in every figure, whatever else the study contains: its marker is
its family's (and part of a family, ten methods a part), its colour its place among that part's methods in the
catalogue (Okabe-Ito for a family's first ten, Paul Tol's muted colours for the next ten: distinguishable with
the common colour-vision deficiencies, and markers so the lines survive greyscale). Full cache is black; a custom
press takes one of four colours kept for custom presses (``palette.CUSTOM_COLOURS``).
Incomplete cells (fewer examples than asked for) are never drawn.

Every figure keeps the layout rules of ``analysis.layout`` (no text over text, at most 2,400 px wide, no text
under 8 pt): panels and legends are placed by matplotlib's constrained layout, captions are wrapped to the
figure's width, and a panel that would show no variation is replaced by a sentence in the caption.
"""

import matplotlib

# before any figure module imports pyplot: figures are files, never windows (a job has no display)
matplotlib.use("Agg")

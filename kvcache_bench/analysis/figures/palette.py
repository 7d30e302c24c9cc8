"""Each method's colour and marker, the same in every figure whatever else the study contains, and each question
mode's: the palettes, the catalogue's families and parts they follow, and the order methods are drawn in."""

from __future__ import annotations

import zlib

from kvcache_bench.analysis.aggregate import BASELINE_METHOD
from kvcache_bench.methods.catalogue import CUSTOM
from kvcache_bench.methods.registry import METHODS

# Okabe & Ito (2008), without black, which is kept for the full cache, then Paul Tol's wine and indigo.
OKABE_ITO = ["#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#999999"]
# A family's second ten: Paul Tol's muted scheme (without its pale grey), his dark brown and medium blue.
# Ordered so that the demo's eight (token scorers of both parts) are eight clearly different colours.
TOL_MUTED = [
    "#CC6677",
    "#117733",
    "#EE8866",
    "#DDCC77",
    "#AA4499",
    "#44AA99",
    "#999933",
    "#88CCEE",
    "#661100",
    "#6699CC",
]
PALETTES = (OKABE_ITO + ["#882255", "#332288"], TOL_MUTED)
METHOD_COLOURS = PALETTES[0] + PALETTES[1]
PART_SIZE = 10  # methods per family part: each of one palette's ten colours once
FULL_CACHE_COLOUR = "#000000"
FAINT_COLOUR = "#B8B8B8"
# Your own presses: colours none of the twenty above is close to (deep pink, dark turquoise, crimson, brown), so
# a custom press drawn against the field never shares a built-in method's colour.
CUSTOM_COLOURS = ["#FF1493", "#00CED1", "#DC143C", "#8C510A"]
# One marker per family part, in the catalogue's order of parts; custom methods take the last two.
PART_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "h", "*", "p", "<", ">", "d", "H"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "h", "*", "p"]  # retentions in the paired scatter
RETENTION_COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"]
COMPRESSED_METHODS = [name for name in METHODS if name != BASELINE_METHOD]
QUESTION_MODE_STYLES = {
    "question_aware": {"color": "#0072B2", "marker": "o"},
    "question_agnostic": {"color": "#7F7F7F", "marker": "s"},
    "other_question": {"color": "#D55E00", "marker": "^"},
    "same_question": {"color": "#009E73", "marker": "D"},
    "multi_turn": {"color": "#CC79A7", "marker": "v"},
}


def _catalogue_slots() -> dict[str, tuple[str, int, int]]:
    """Each built-in method's (family, part of the family, place in the part), in the catalogue's order."""
    slots, seen = {}, {}
    for name in COMPRESSED_METHODS:
        family = METHODS[name].family
        place = seen.get(family, 0)
        seen[family] = place + 1
        slots[name] = (family, place // PART_SIZE, place % PART_SIZE)
    return slots


METHOD_SLOTS = _catalogue_slots()
FAMILIES = list(dict.fromkeys(family for family, _, _ in METHOD_SLOTS.values())) + [CUSTOM]
# Parts family by family (the catalogue's order of families): the order of markers.
PARTS = sorted(
    set((family, part) for family, part, _ in METHOD_SLOTS.values()), key=lambda fp: (FAMILIES.index(fp[0]), fp[1])
)
PARTS += [(CUSTOM, 0), (CUSTOM, 1)]


def method_slot(name: str) -> tuple[str, int, int]:
    """(family, part, place) of a method. A name the catalogue does not know (a custom method) is placed by a
    hash of its name among the custom family's eight styles (four colours, two markers): stable across studies,
    not always distinct from another custom press's."""
    if name in METHOD_SLOTS:
        return METHOD_SLOTS[name]
    digest = zlib.crc32(name.encode())
    return CUSTOM, (digest // PART_SIZE) % 2, digest % PART_SIZE


def method_family(name: str) -> str:
    """The panel a method is drawn in by ``quality_by_family``: its whole family, never a part of it."""
    return method_slot(name)[0]


def method_style(name: str) -> dict:
    """The same colour and marker for a method in every figure, whatever else the study contains.

    The marker is its family part's; the colour its place in that part (shifted per family, so that the first
    methods of two families differ in colour too): the (colour, marker) pair is the method's own.
    """
    if name == BASELINE_METHOD:
        return {"color": FULL_CACHE_COLOUR, "marker": None}
    family, part, place = method_slot(name)
    if family == CUSTOM:
        colour = CUSTOM_COLOURS[place % len(CUSTOM_COLOURS)]
    else:
        colour = PALETTES[part % 2][(place + 3 * FAMILIES.index(family)) % PART_SIZE]
    return {"color": colour, "marker": PART_MARKERS[PARTS.index((family, part))]}


def methods_in_order(names) -> list[str]:
    """Compressed methods in the catalogue's order, then unknown names sorted."""
    names = set(names) - {BASELINE_METHOD}
    return [m for m in COMPRESSED_METHODS if m in names] + sorted(names - set(METHODS))


def families_of(methods: list[str]) -> list[tuple[str, list[str]]]:
    """[(family, its methods)] in the catalogue's order of families, each family whole."""
    by_family: dict[str, list[str]] = {}
    for method in methods:
        by_family.setdefault(method_family(method), []).append(method)
    return [(family, by_family[family]) for family in FAMILIES if family in by_family]

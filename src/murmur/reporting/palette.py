"""One colour per method in every figure, whatever else a report holds.

A line's colour is its method's (:data:`METHOD_COLOURS`, keyed by algorithm), so DSGD
is blue in every report; a method murmur does not ship (a plugin's) gets a colour
drawn from its name (:data:`OTHER_COLOURS`), the same in every report too. Several
lines of one method (DSGD on Laplacian and on Metropolis weights, CHOCO-SGD with two
compressors) share its colour and differ in line style (:data:`LINE_STYLES`), in the
order the comparison lists them; the line whose label is the method's name, or else
the first, is solid.

``murmur report --colour NAME=COLOUR`` overrides the colour of a label or of an
algorithm (a label's wins); a colour is anything matplotlib reads: a name ("teal"),
"#1f77b4" or "C3".
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from matplotlib.colors import is_color_like

from murmur.errors import UsageError

__all__ = [
    "METHOD_COLOURS",
    "OTHER_COLOURS",
    "LINE_STYLES",
    "Look",
    "PlotStyle",
    "looks",
    "parse_colours",
]

METHOD_COLOURS: dict[str, str] = {
    "dsgd": "C0",
    "detsgrad": "C1",
    "detsgrad-gt": "C2",
    "choco-sgd": "C3",
    "beer": "C4",
    "sparq-sgd": "C5",
    "centralized": "black",
    "asysg-con": "C6",
    "sync-ps": "C7",
    "asysg-incon": "C8",
    "hogwild": "C9",
    "ssfn": "navy",
    "dssfn": "teal",
    "dssfn-async": "maroon",
    "motef": "darkviolet",
    "lead": "darkgoldenrod",
}
"""Each shipped method's colour (matplotlib's ten, then named ones)."""
OTHER_COLOURS = ("gold", "lime", "magenta", "sienna", "slategray", "indigo", "olive", "coral")
"""The colours of other methods, one drawn from each name (CRC-32)."""
LINE_STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)))
"""The line styles of the lines of one colour, in order; cycled beyond six."""


@dataclass(frozen=True)
class Look:
    """How one line, its band and its points are drawn."""

    colour: str
    line_style: str | tuple[int, tuple[int, ...]] = "-"


@dataclass(frozen=True)
class PlotStyle:
    """What a user chooses of the figures: colours by label or algorithm, and the
    evaluations a curve is smoothed over (1: not smoothed)."""

    colours: Mapping[str, str] = field(default_factory=dict)
    smooth: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.smooth, bool) or not isinstance(self.smooth, int) or self.smooth < 1:
            raise UsageError(f"--smooth is a number of evaluations, at least 1, not {self.smooth}")


def _method_colour(algorithm: str) -> str:
    known = METHOD_COLOURS.get(algorithm)
    if known is not None:
        return known
    return OTHER_COLOURS[zlib.crc32(algorithm.encode()) % len(OTHER_COLOURS)]


def looks(lines: Sequence[tuple[str, str]], style: PlotStyle = PlotStyle()) -> dict[str, Look]:
    """The look of each line, by label, from (label, algorithm) pairs in the comparison's
    order (a label listed twice keeps its first look)."""
    by_colour: dict[str, list[str]] = {}
    colours: dict[str, str] = {}
    for label, algorithm in lines:
        if label in colours:
            continue
        colour = style.colours.get(label) or style.colours.get(algorithm)
        colours[label] = colour or _method_colour(algorithm or label)
        by_colour.setdefault(colours[label], []).append(label)
    algorithms = dict(lines)
    result = {}
    for colour, labels in by_colour.items():
        # The line named after its method is solid; the others follow in order.
        solid = [label for label in labels if label == algorithms[label]][:1] or labels[:1]
        ordered = solid + [label for label in labels if label not in solid]
        for number, label in enumerate(ordered):
            result[label] = Look(colour, LINE_STYLES[number % len(LINE_STYLES)])
    return result


def parse_colours(items: Sequence[str]) -> dict[str, str]:
    """``--colour NAME=COLOUR`` items as a mapping; a UsageError for an item without
    ``=`` or with a colour matplotlib cannot draw."""
    colours = {}
    for item in items:
        name, equals, colour = item.partition("=")
        if not equals or not name.strip():
            raise UsageError(f"--colour takes NAME=COLOUR (a label or an algorithm), not {item!r}")
        if not is_color_like(colour.strip()):
            raise UsageError(
                f"--colour {item!r}: {colour.strip()!r} is no colour; give a name (teal), "
                "#rrggbb or C0 to C9"
            )
        colours[name.strip()] = colour.strip()
    return colours

"""The figures of ``murmur report``: one axes on the Agg canvas, its legend outside
the data and the file written as PNG, PDF or SVG.

Figures are drawn on the Agg canvas directly, without pyplot, so plotting never
opens a window, never changes the caller's matplotlib backend and leaves no figure
behind. The axes are :data:`FIGURE_SIZE`; the legend stands to the right of them,
in as many columns as it takes to keep :data:`LEGEND_ROWS` rows or fewer, and the
file is cropped to what is drawn (``bbox_inches="tight"``), so a long legend widens
the file instead of covering lines. The format is the file's suffix; PDF and SVG
files carry no date, so the same runs give the same file.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = [
    "DPI",
    "FIGURE_SIZE",
    "FORMATS",
    "LEGEND_ROWS",
    "colour",
    "finish",
    "new_figure",
    "save",
]

FORMATS = ("png", "pdf", "svg")
"""The file formats a figure can be written in; the first is the default."""
DPI = 150
"""Dots per inch of a PNG (PDF and SVG are vector files)."""
FIGURE_SIZE = (7.0, 4.2)
"""Inches of the figure before its legend is added to the right."""
LEGEND_ROWS = 16
"""A legend with more entries gets another column."""
_LABEL_WIDTH = 40
"""Characters of a legend entry's line; longer entries wrap."""
_NO_DATE = {"pdf": {"CreationDate": None}, "svg": {"Date": None}}


def new_figure() -> tuple[Figure, Axes]:
    figure = Figure(figsize=FIGURE_SIZE)
    FigureCanvasAgg(figure)
    return figure, figure.add_subplot()


_MORE_COLOURS = (
    "black",
    "gold",
    "navy",
    "maroon",
    "teal",
    "lime",
    "magenta",
    "sienna",
    "slategray",
    "indigo",
)
"""Ten more colours, unlike matplotlib's ten, for plots of more than ten groups."""


def colour(index: int) -> str:
    """The colour of the line, bar or point at ``index``: matplotlib's ten, then ten more,
    cycled every twenty."""
    index %= 20
    return f"C{index}" if index < 10 else _MORE_COLOURS[index - 10]


def finish(axes: Axes, drawn: bool, empty_note: str, xlabel: str, ylabel: str, title: str) -> None:
    """Title and labels; the legend outside the axes, or ``empty_note`` where nothing
    was drawn."""
    axes.set_title(title, fontsize="medium")
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    if drawn:
        axes.grid(alpha=0.3)
        legend_outside(axes)
    else:
        axes.text(0.5, 0.5, empty_note, ha="center", va="center", transform=axes.transAxes)
        axes.set_xticks([])
        axes.set_yticks([])


def legend_outside(axes: Axes) -> None:
    """The axes' legend to the right of them, long entries wrapped."""
    handles, labels = axes.get_legend_handles_labels()
    if not handles:
        return
    axes.legend(
        handles,
        [textwrap.fill(label, _LABEL_WIDTH, subsequent_indent="  ") for label in labels],
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        borderaxespad=0.0,
        fontsize="small",
        ncols=math.ceil(len(handles) / LEGEND_ROWS),
        frameon=False,
    )


def save(figure: Figure, path: str | Path, dpi: float = DPI) -> None:
    """Write ``figure`` to ``path`` in the format of its suffix (one of :data:`FORMATS`)."""
    path = Path(path)
    kind = path.suffix.removeprefix(".").lower() or FORMATS[0]
    if kind not in FORMATS:
        raise ValueError(f"cannot write {path}: the formats are {', '.join(FORMATS)}")
    figure.savefig(
        path,
        dpi=dpi,
        format=kind,
        bbox_inches="tight",
        pad_inches=0.1,
        metadata=_NO_DATE.get(kind),
    )

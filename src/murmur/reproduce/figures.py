"""Drawing a reproduction's PNG plots on the Agg canvas (no pyplot, no window)."""

from __future__ import annotations

from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

DPI = 110


def new_figure(columns: int = 1, width: float = 6.4) -> tuple[Figure, list[Axes]]:
    """A figure of ``columns`` side-by-side axes."""
    figure = Figure(figsize=(width * columns, 4.2))
    FigureCanvasAgg(figure)
    return figure, [figure.add_subplot(1, columns, column + 1) for column in range(columns)]


def save(figure: Figure, path: Path) -> str:
    """Write ``figure`` as PNG; returns the file name, for the report."""
    figure.tight_layout()
    figure.savefig(path, dpi=DPI, format="png")
    return path.name

"""Mean and spread of a figure across seeds: what a results table reports.

``spread(values)`` gives the mean, the sample standard deviation (n - 1) and a
95 % confidence interval of the mean from Student's t distribution with n - 1
degrees of freedom (``scipy.stats.t``); with one value the deviation and the
interval are None: one seed says nothing of the spread.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats

CONFIDENCE = 0.95
"""The level of the interval around a mean."""


@dataclass(frozen=True)
class Spread:
    """A figure over n seeds: its mean, standard deviation and 95 % interval."""

    n: int
    mean: float
    sd: float | None
    """Sample standard deviation (n - 1); None for one value."""
    low: float | None
    high: float | None
    """The 95 % confidence interval of the mean; None for one value."""

    def text(self, scale: float = 1.0, digits: int = 2) -> str:
        """``mean +- sd`` (``mean`` alone for one value), times ``scale``."""
        if self.sd is None:
            return f"{self.mean * scale:.{digits}f}"
        return f"{self.mean * scale:.{digits}f} +- {self.sd * scale:.{digits}f}"


def spread(values: Sequence[float]) -> Spread:
    """The mean, sd and 95 % interval of ``values`` (at least one, all finite)."""
    if not values:
        raise ValueError("spread() needs at least one value")
    n = len(values)
    mean = math.fsum(values) / n
    if n == 1:
        return Spread(1, mean, None, None, None)
    sd = math.sqrt(math.fsum((value - mean) ** 2 for value in values) / (n - 1))
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * sd / math.sqrt(n)
    return Spread(n, mean, sd, mean - half, mean + half)

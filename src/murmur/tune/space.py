"""What ``murmur tune`` searches for one member of an experiment.

Each algorithm declares the keys of its steps and their ranges in the registry
(:attr:`murmur.registry.Capabilities.tuned`, :class:`~murmur.registry.SearchRange`);
under a local optimizer the step ``a`` takes that optimizer's range instead
(:data:`murmur.registry.OPTIMIZER_STEPS`); ``--range algorithm.KEY=LOW:HIGH`` sets a
key's range for every member that tunes it, keeping its scale and its number of grid
points.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from murmur.algorithms.schedules import SgdConfig
from murmur.config import Config
from murmur.errors import UsageError
from murmur.registry import ALGORITHMS, OPTIMIZER_STEPS, SearchRange

Point = Mapping[str, float]
"""A value for each tuned key of ``[algorithm]``: ``{"a": 0.1, "v0": 5.0}``."""


@dataclass(frozen=True)
class RangeSetting:
    """``--range algorithm.KEY=LOW:HIGH``: the range the user gives a key."""

    key: str
    low: float
    high: float

    def __str__(self) -> str:
        return f"algorithm.{self.key}={self.low:g}:{self.high:g}"


def parse_range(text: str) -> RangeSetting:
    """``algorithm.a=0.01:0.5`` as a :class:`RangeSetting`; UsageError, in one line, for
    anything else, an empty or inverted range among them."""
    shape = f"--range {text!r} must look like algorithm.KEY=LOW:HIGH, e.g. algorithm.a=0.01:0.5"
    name, equals, bounds = text.partition("=")
    low_text, colon, high_text = bounds.partition(":")
    if not equals or not colon:
        raise UsageError(shape)
    section, dot, key = name.strip().partition(".")
    if section != "algorithm" or not dot or not key:
        raise UsageError(f"--range {text!r}: murmur tune searches keys of [algorithm] only")
    try:
        low, high = float(low_text), float(high_text)
    except ValueError:
        raise UsageError(shape) from None
    if not (math.isfinite(low) and math.isfinite(high)):
        raise UsageError(f"--range {text!r}: the ends must be finite numbers")
    if not low < high:
        raise UsageError(f"--range {text!r} is empty: its low end must be below its high end")
    return RangeSetting(key, low, high)


def search_space(config: Config) -> tuple[SearchRange, ...]:
    """The ranges the algorithm of ``config`` declares, ``a``'s replaced by its local
    optimizer's; UsageError where it declares none."""
    member = ALGORITHMS[config.algorithm.name]
    tuned = member.capabilities.tuned
    declared = tuned.allowed
    if not declared:
        raise UsageError(f"{member.name} has nothing murmur tune searches: {tuned.why_not}")
    algorithm = config.algorithm
    if not isinstance(algorithm, SgdConfig) or algorithm.optimizer == "sgd":
        return declared
    own = OPTIMIZER_STEPS[algorithm.optimizer]
    return tuple(own if searched.key == own.key else searched for searched in declared)


def narrowed(
    space: Sequence[SearchRange], settings: Sequence[RangeSetting]
) -> tuple[SearchRange, ...]:
    """``space`` with each key that ``settings`` names over the range it gives (its scale
    and grid points kept); UsageError for a range the key's scale cannot take."""
    given = {setting.key: setting for setting in settings}
    out = []
    for searched in space:
        setting = given.get(searched.key)
        if setting is None:
            out.append(searched)
            continue
        if searched.log and setting.low <= 0:
            raise UsageError(
                f"--range {setting}: algorithm.{searched.key} is searched on a log scale, "
                "so its low end must be above 0"
            )
        out.append(dataclasses.replace(searched, low=setting.low, high=setting.high))
    return tuple(out)


def with_point(config: Config, point: Point) -> Config:
    """``config`` with the algorithm keys of ``point`` set; UsageError where the algorithm
    refuses a value."""
    algorithm = dataclasses.replace(config.algorithm, **point)
    return dataclasses.replace(config, algorithm=algorithm)


def check_ends(config: Config, space: Sequence[SearchRange]) -> None:
    """Build ``config`` at each end of each range (UsageError where the algorithm refuses
    one), so that no trial meets a value it cannot run."""
    for searched in space:
        for end in (searched.low, searched.high):
            try:
                with_point(config, {searched.key: end})
            except UsageError as error:
                raise UsageError(
                    f"algorithm.{searched.key} = {end:g}, an end of its range, is refused: {error}"
                ) from None


def describe(searched: SearchRange) -> str:
    """One range in words: ``algorithm.a log-uniform in [0.01, 1]``."""
    scale = "log-uniform" if searched.log else "uniform"
    return f"algorithm.{searched.key} {scale} in [{searched.low:g}, {searched.high:g}]"


def as_record(space: Sequence[SearchRange]) -> list[dict[str, object]]:
    """``space`` as plain values (what a study stores and checks on resuming)."""
    return [dataclasses.asdict(searched) for searched in space]

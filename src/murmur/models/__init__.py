"""Networks and flat-parameter helpers."""

from murmur.models.flat import ParamLayout
from murmur.models.networks import build_model

__all__ = ["ParamLayout", "build_model"]

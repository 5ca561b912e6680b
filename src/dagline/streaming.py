"""Deprecated path of `dagline.sdk.streaming` (kept so jobs written before 0.2 keep working)."""

import warnings

from dagline.sdk.streaming import *  # noqa: F403
from dagline.sdk.streaming import __all__  # noqa: F401

warnings.warn("dagline.streaming moved to dagline.sdk.streaming; import it from there", DeprecationWarning,
              stacklevel=2)

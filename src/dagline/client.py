"""Deprecated path of `dagline.sdk.client` (kept so jobs written before 0.2 keep working)."""

import warnings

from dagline.sdk.client import *  # noqa: F403
from dagline.sdk.client import __all__  # noqa: F401

warnings.warn("dagline.client moved to dagline.sdk.client; import it from there", DeprecationWarning, stacklevel=2)

"""The `dagline` command (contract: shared/CLI.md). Thin: parse, call the core, print.

`base` holds the root group and shared options; each command group lives in its own module and
registers itself on import.
"""

from dagline.cli import api, dags, scheduling, signals, state, system, testing  # noqa: F401  (register the commands)
from dagline.cli.base import main

__all__ = ["main"]

"""The `dagline` command (contract: shared/CLI.md). Thin: parse, call the core, print.

`base` holds the root group and shared options; each command group lives in its own module and
registers itself on import.
"""

# importing a command group registers its commands
from dagline.cli import api, callbacks, dags, retention, scheduling, signals, state, system, testing  # noqa: F401
from dagline.cli.base import main

__all__ = ["main"]

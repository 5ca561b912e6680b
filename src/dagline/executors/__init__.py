"""Executors: turn queued task instance tries into jobs and report their state (see `base`).

`make_executor` builds one by name. The noop executor also reads `DAGLINE_NOOP_DURATION` (seconds a
try lasts: `0.2`, or a range `0.05-0.5` drawn per try) and `DAGLINE_NOOP_SEED` (makes the drawn
durations reproducible) from the environment, so `dagline scheduler --executor noop` can rehearse
tasks that take time; options passed in explicitly win over the environment.
"""

from __future__ import annotations

import os

from dagline.executors.base import Executor


def resolve_log_folder(value: str | None) -> str:
    """Where task logs go: `value`, else `$DAGLINE_LOG_FOLDER`, else `./logs` (absolute)."""
    return os.path.abspath(value or os.environ.get("DAGLINE_LOG_FOLDER") or "logs")


def make_executor(name: str, *, parallelism: int, log_folder: str, clock=None, **options) -> Executor:
    """Build an executor by name: `local`, `noop` (and, in the Kubernetes layer, `spark-k8s`)."""
    if name == "noop":
        from dagline.executors.noop import NoopExecutor, options_from_env

        return NoopExecutor(parallelism=parallelism, clock=clock, **{**options_from_env(), **options})
    if name == "local":
        from dagline.executors.local import LocalExecutor

        return LocalExecutor(parallelism=parallelism, log_folder=log_folder, clock=clock)
    from dagline.errors import InvalidInput

    raise InvalidInput(f"unknown executor {name!r} (choose local or noop; spark-k8s is built by dagline.k8s)",
                       field="--executor")

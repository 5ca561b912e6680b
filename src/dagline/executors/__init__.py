"""Executors: turn queued task instance tries into jobs and report their state (see `base`)."""

from __future__ import annotations

from dagline.executors.base import Executor


def make_executor(name: str, *, parallelism: int, log_folder: str, clock=None, **options) -> Executor:
    """Build an executor by name: `local`, `noop` (and, in the Kubernetes layer, `spark-k8s`)."""
    if name == "noop":
        from dagline.executors.noop import NoopExecutor

        return NoopExecutor(parallelism=parallelism, clock=clock, **options)
    if name == "local":
        from dagline.executors.local import LocalExecutor

        return LocalExecutor(parallelism=parallelism, log_folder=log_folder, clock=clock)
    from dagline.errors import InvalidInput

    raise InvalidInput(f"unknown executor {name!r} (choose local or noop)", field="--executor")

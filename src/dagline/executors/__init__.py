"""Executors: turn queued task instance tries into jobs and report their state (see `base`).

Each kind (`local`, `noop`, and `spark-k8s` in `dagline.k8s`) is chosen by name through `registry`,
which builds it from checked settings and reads its tries' logs (`try_logs`). The noop executor also
reads `DAGLINE_NOOP_DURATION` (seconds a try lasts: `0.2`, or a range `0.05-0.5` drawn per try) and
`DAGLINE_NOOP_SEED` (makes the drawn durations reproducible) from the environment, so `dagline
scheduler --executor noop` can rehearse tasks that take time; options passed in explicitly win over
the environment.
"""

from __future__ import annotations

from dagline.executors.registry import make_executor, resolve_log_folder

__all__ = ["make_executor", "resolve_log_folder"]

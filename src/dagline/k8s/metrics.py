"""The operator replica's `/metrics` page: every `dagline.metrics` figure plus the operator's own.

The scheduler, executor and database figures are `dagline.metrics` (defined and documented there,
the same as `dagline scheduler --metrics-port` serves); this module adds what only an operator
replica has: its status sync (database -> DAG and DagRun objects) and the age of its last loop.
The database gauges are the same in every replica: aggregate them with `max`, not `sum`.
"""

from __future__ import annotations

import time

from dagline import metrics


def _family(name: str, kind: str, help_text: str, value: float) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {float(value)!r}"]


def render(runtime) -> str:
    """Every metric of a replica, as one text page (Prometheus text format 0.0.4)."""
    lines: list[str] = []
    health = runtime.health
    if runtime.scheduler is not None and health.scheduler_beat is not None:
        lines += _family("dagline_scheduler_last_loop_age_seconds", "gauge",
                         "Seconds since the scheduler loop's last iteration ended.",
                         round(time.monotonic() - health.scheduler_beat, 3))
    stats = runtime.sync.stats
    lines += _family("dagline_status_syncs_total", "counter", "Status syncs (database -> objects) done.", stats.syncs)
    lines += _family("dagline_status_sync_failures_total", "counter", "Status syncs ended by an outage.",
                     stats.failed_syncs)
    lines += _family("dagline_status_patches_total", "counter", "Object statuses written by the status sync.",
                     stats.status_patches)
    lines += _family("dagline_dagrun_objects_created_total", "counter", "DagRun objects created for runs.",
                     stats.dagruns_created)
    lines += _family("dagline_dagrun_objects_deleted_total", "counter",
                     "DagRun objects deleted by the history limit.", stats.dagruns_deleted)
    return metrics.render().decode() + "\n".join(lines) + "\n"

"""The operator replica's `/metrics` page: every `dagline.metrics` figure plus the operator's own.

The scheduler, executor and database figures are `dagline.metrics` (defined and documented there,
the same as `dagline scheduler --metrics-port` serves); this module adds what only an operator
replica has: its status sync (database -> DAG and DagRun objects), the age of its last loop, the
Spark preflight's verdict (`dagline_spark_ready`, `dagline.k8s.preflight`) and its listing
(`k8s.listing`: objects the watches owe, deletions they missed, DAGs swept).
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
    verdict = runtime.preflight.verdict if getattr(runtime, "preflight", None) is not None else None
    if verdict is not None:
        value = {True: "1.0", False: "0.0"}.get(verdict.ready, "NaN")
        lines += ["# HELP dagline_spark_ready 1 when a spark-operator watches the Spark namespace, 0 when the "
                  "preflight found it does not (or no SparkApplication CRD), NaN while unknown; the label says why.",
                  "# TYPE dagline_spark_ready gauge",
                  f'dagline_spark_ready{{reason="{verdict.reason}"}} {value}']
    listing = getattr(runtime, "listing", None)
    if listing is None:  # a replica still starting
        return metrics.render().decode() + "\n".join(lines) + "\n"
    lines += _family("dagline_object_listings_total", "counter", "Listings of the served objects done.",
                     listing.stats.listings)
    lines += _family("dagline_object_listing_failures_total", "counter", "Listings ended by an outage.",
                     listing.stats.failed_listings)
    lines += _family("dagline_watch_owed_objects", "gauge",
                     "Objects the API listed that the watches have not brought yet.", listing.owed_count())
    lines += _family("dagline_watch_missed_deletions_total", "counter",
                     "Deleted objects the watches did not report, found by a listing.", listing.stats.missed_deletions)
    lines += _family("dagline_dags_swept_total", "counter",
                     "DAGs deactivated by a listing because their object was gone.", listing.stats.dags_swept)
    lines += _family("dagline_pools_swept_total", "counter",
                     "Pools removed by a listing because their Pool object was gone.", listing.stats.pools_swept)
    return metrics.render().decode() + "\n".join(lines) + "\n"

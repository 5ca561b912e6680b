"""Scheduler settings: loop batch sizes and intervals, passed in (never read at import time)."""

from __future__ import annotations

import dataclasses
import os


@dataclasses.dataclass(frozen=True)
class SchedulerSettings:
    dags_per_loop: int = 50            # DAGs examined for new runs per loop (Airflow: max_dagruns_to_create_per_loop)
    runs_created_per_dag: int = 16     # at most this many runs of one DAG created per loop
    runs_per_loop: int = 200           # running runs examined per loop (Airflow: max_dagruns_per_loop_to_schedule)
    tis_per_loop: int = 512            # scheduled TIs considered per critical section (Airflow: max_tis_per_query)
    poll_interval_s: float = 0.5       # sleep when a loop did nothing but jobs are still running
    heartbeat_interval_s: float = 5.0
    housekeeping_interval_s: float = 10.0

    @classmethod
    def from_env(cls) -> SchedulerSettings:
        """Overrides from `DAGLINE_SCHEDULER_<FIELD>` environment variables (e.g. ..._TIS_PER_LOOP=256)."""
        values = {}
        for field in dataclasses.fields(cls):
            raw = os.environ.get(f"DAGLINE_SCHEDULER_{field.name.upper()}")
            if raw is not None:
                values[field.name] = type(field.default)(raw)
        return cls(**values)

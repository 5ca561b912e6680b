"""Scheduler settings: loop batch sizes and intervals, passed in (never read at import time).

Each field can be set from the environment as `DAGLINE_SCHEDULER_<FIELD>` (e.g.
`DAGLINE_SCHEDULER_REPLICA_TIMEOUT_S=60`); a bad value is an error naming the variable. One is the
platform's, not only the scheduler's, and has its own name: `DAGLINE_SIGNAL_EXPORTS`, which namespaces'
signal keys other namespaces' DAGs may react to (`domain.signal_exports`; read by `exports_from_env`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from dagline.domain.signal_exports import NO_EXPORTS, SignalExports, parse_exports
from dagline.domain.signal_exports import VARIABLE as EXPORTS_VARIABLE
from dagline.errors import InvalidInput
from dagline.limits import MAX_SETTING_COUNT, MAX_SETTING_SECONDS, TEMPLATE_TIME_BUDGET_S


@dataclasses.dataclass(frozen=True)
class SchedulerSettings:
    dags_per_loop: int = 50            # DAGs claimed per run-creation batch (Airflow: max_dagruns_to_create_per_loop)
    runs_created_per_dag: int = 16     # at most this many runs of one DAG created per loop
    runs_per_loop: int = 200           # running runs examined per loop (Airflow: max_dagruns_per_loop_to_schedule)
    tis_per_loop: int = 512            # scheduled TIs considered per critical section (Airflow: max_tis_per_query)
    signals_per_loop: int = 200        # signals reacted to per loop (one transaction)
    poll_interval_s: float = 0.5       # idle wait; on PostgreSQL a NOTIFY from any state change ends it at once
    idle_poll_stretch: float = 4.0     # PostgreSQL, idle for a while: poll up to this many times slower (1: never)
    heartbeat_interval_s: float = 5.0  # how often a replica records that it is alive (database clock)
    housekeeping_interval_s: float = 10.0  # timeouts, adoption of orphaned tries, reconciling own jobs
    follow_up_s: float = 1.0           # longest an iteration keeps queueing what its own reports made runnable
    peer_at_work_s: float = 0.25       # a replica whose ordinary changes came this recently is at work
    runs_left_to_peer_s: float = 0.25  # how long new runs are left to the replica at work for longest
    replica_timeout_s: float = 30.0    # a replica silent this long (database clock) is declared dead by a peer
    backoff_max_s: float = 5.0         # longest wait after a database error (the wait doubles from 0.1 s)
    retry_wait_max_s: float = 60.0     # `--until-idle` waiting for a retry time looks again at least this often
    template_time_budget_s: float = TEMPLATE_TIME_BUDGET_S  # a template rendering longer fails its try
    stop_grace_s: float = 25.0         # still busy this long after SIGTERM: exit at once (below Kubernetes' 30 s kill)
    # retention (`dagline db clean` run by the replicas, one at a time): finished history older than this
    # ISO-8601 duration is deleted every `clean_interval_s`; "" (the default): never
    clean_older_than: str = ""
    clean_interval_s: float = 3600.0
    clean_keep_last: int = 1           # each DAG's latest runs kept however old (at least 1)
    # which signal keys of a namespace other namespaces' DAGs react to (`DAGLINE_SIGNAL_EXPORTS`, parsed)
    signal_exports: SignalExports = dataclasses.field(default=NO_EXPORTS, metadata={"env": EXPORTS_VARIABLE})

    def __post_init__(self):
        for field in dataclasses.fields(self):
            if "env" in field.metadata:
                continue  # its own variable, checked as it is parsed
            value = getattr(self, field.name)
            if isinstance(field.default, str):
                self._check_duration(field.name, value)
                continue
            limit = MAX_SETTING_SECONDS if isinstance(field.default, float) else MAX_SETTING_COUNT
            # `not 0 < value` also refuses NaN, which compares false with everything (a busy loop)
            if not 0 < value <= limit:
                raise InvalidInput(f"must be a positive number no larger than {limit:,.0f}, got {value!r}",
                                   field=_env_name(field.name))
        if self.idle_poll_stretch < 1:
            raise InvalidInput(f"must be at least 1 (1: the poll is never stretched), got {self.idle_poll_stretch:g}",
                               field=_env_name("idle_poll_stretch"))
        if self.heartbeat_interval_s * 2 > self.replica_timeout_s:
            raise InvalidInput(
                f"must be at least twice heartbeat_interval_s ({self.heartbeat_interval_s:g}), got "
                f"{self.replica_timeout_s:g}: a live replica would be declared dead between two heartbeats",
                field=_env_name("replica_timeout_s"))

    @staticmethod
    def _check_duration(name: str, value: str) -> None:
        from dagline.times import parse_duration

        if value:
            try:
                parse_duration(value)
            except ValueError as exc:
                raise InvalidInput(str(exc), field=_env_name(name)) from None

    @classmethod
    def from_env(cls) -> SchedulerSettings:
        """Overrides from `DAGLINE_SCHEDULER_<FIELD>` environment variables (e.g. ..._TIS_PER_LOOP=256)."""
        return cls(**env_overrides(cls, "DAGLINE_SCHEDULER_"), signal_exports=exports_from_env())


def exports_from_env(environ: Mapping[str, str] | None = None) -> SignalExports:
    """The platform's signal export rules, `DAGLINE_SIGNAL_EXPORTS` (unset: none); an error names it."""
    environ = os.environ if environ is None else environ
    return parse_exports(environ.get(EXPORTS_VARIABLE))


def env_overrides(cls: type, prefix: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The fields of settings dataclass `cls` set by `<prefix><FIELD>` environment variables, each read as
    its default's type; a value of another type is an error naming the variable."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if "env" in field.metadata:
            continue  # read under its own name
        name = f"{prefix}{field.name.upper()}"
        raw = environ.get(name)
        if raw is not None:
            kind = type(field.default)
            if kind is str:
                values[field.name] = raw.strip()
                continue
            try:
                values[field.name] = kind(raw)
            except ValueError:
                raise InvalidInput(f"must be {'an integer' if kind is int else 'a number'}, got {raw!r}",
                                   field=name) from None
    return values


def _env_name(field: str) -> str:
    return f"DAGLINE_SCHEDULER_{field.upper()}"

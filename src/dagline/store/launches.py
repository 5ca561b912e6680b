"""What launching queued tries reads: each try's run (its id, dates and conf), the folder of its DAG
version, the signal that started it and the signal that created its run, if any
(`dagline.scheduler.launches`); and what each try was launched with (`try_launch`: its rendered Spark
job, or why it could not launch), written by the replica that launched it and read by the run page,
which never renders (ADR 60)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence

from sqlalchemy import and_, bindparam, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

from dagline.db.models import dag_run_t, dag_version_t, signal_action_t, signal_t, ti_t, try_launch_t
from dagline.domain.states import SignalAction

# Built once with bind parameters: SQLAlchemy then neither rebuilds it nor computes its cache key at each
# launch (see `db.claims`).
_trigger = signal_action_t.alias("trigger_action")  # the action of a signal that created the run
_trigger_signal = signal_t.alias("trigger_signal")
_RUNS_AND_SIGNALS = (
    select(ti_t.c.id.label("ti_id"), dag_run_t.c.run_id, dag_run_t.c.logical_date, dag_run_t.c.data_interval_start,
           dag_run_t.c.data_interval_end, dag_run_t.c.conf, dag_version_t.c.source_dir, signal_t.c.seq,
           signal_t.c.key, signal_t.c.value, signal_t.c.source, _trigger_signal.c.seq.label("trigger_seq"),
           _trigger_signal.c.key.label("trigger_key"), _trigger_signal.c.value.label("trigger_value"),
           _trigger_signal.c.source.label("trigger_source"))
    .join(dag_run_t, dag_run_t.c.id == ti_t.c.dag_run_id)
    .outerjoin(dag_version_t, dag_version_t.c.id == dag_run_t.c.dag_version_id)
    .outerjoin(signal_t, signal_t.c.seq == ti_t.c.signal_seq)
    .outerjoin(_trigger, and_(_trigger.c.dag_run_id == dag_run_t.c.id, _trigger.c.task_id == "",
                              _trigger.c.action == SignalAction.TRIGGER))
    .outerjoin(_trigger_signal, _trigger_signal.c.seq == _trigger.c.signal_seq)
    .where(ti_t.c.id.in_(bindparam("ti_ids", expanding=True))))


def runs_and_signals_of_tries(conn: Connection, ti_ids: Sequence[int]) -> list:
    """Per task instance of `ti_ids`: ti_id, its run's run_id, logical_date, data interval and conf, its
    version's source_dir, the seq, key, value and source of the signal that started it (None when
    none did, or it was pruned), and the same of the signal that created its run as `trigger_*`
    (a DAG's `triggers:`). One read."""
    return conn.execute(_RUNS_AND_SIGNALS, {"ti_ids": list(ti_ids)}).all()


@dataclasses.dataclass(frozen=True)
class LaunchRecord:
    """What one try was launched with (`error` set: it could not be launched, and why)."""

    ti_id: int
    try_number: int
    launched_at: dt.datetime
    main_application_file: str | None = None
    arguments: list[str] | None = None
    conf: dict[str, str] | None = None
    error: str | None = None


_L = try_launch_t.c
_RECORD_COLUMNS = ("ti_id", "try_number", "launched_at", "main_application_file", "arguments", "conf", "error")


def _record_statement(dialect_insert):
    return (dialect_insert(try_launch_t).values({c: bindparam(c, type_=_L[c].type) for c in _RECORD_COLUMNS})
            .on_conflict_do_nothing(index_elements=["ti_id", "try_number"]))


_RECORD = {"postgresql": _record_statement(pg_insert), "sqlite": _record_statement(sqlite_insert)}
_LAUNCHES_OF_TASK = (
    select(try_launch_t).join(ti_t, ti_t.c.id == _L.ti_id)
    .where(ti_t.c.dag_run_id == bindparam("run"), ti_t.c.task_id == bindparam("task")))


def record_launches(conn: Connection, records: Sequence[LaunchRecord]) -> None:
    """Store what tries were launched with, one statement; a try recorded before keeps its first record
    (a try adopted and launched again by another replica renders the same job)."""
    if records:
        stmt = _RECORD["postgresql" if conn.dialect.name == "postgresql" else "sqlite"]
        conn.execute(stmt, [dataclasses.asdict(r) for r in records])


def launches_of_task(conn: Connection, run_pk: int, task_id: str) -> dict[int, LaunchRecord]:
    """The launch records of a run's task, by try number (a try without a record is absent)."""
    rows = conn.execute(_LAUNCHES_OF_TASK, {"run": run_pk, "task": task_id}).all()
    return {r.try_number: LaunchRecord(r.ti_id, r.try_number, r.launched_at, r.main_application_file,
                                       r.arguments, r.conf, r.error) for r in rows}

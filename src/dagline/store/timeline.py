"""The timeline: inserting runs in logical-date order and keeping every run's `previous` link true.

Scheduled, manual and backfill runs all live on one timeline per DAG. Inserting or replacing runs
(always with the DAG row locked by the caller) creates their task instances and then relinks the
live runs from the earliest inserted date on, so `previous` is always "the latest earlier run that is
not overridden". `dependsOnPast` follows `previous`, so it holds across inserted backfills.

`refresh_next_dagrun` recomputes where the schedule stands (`next_scheduled_run`): after the latest
scheduled or backfill run (fast-forwarding beyond backfills; gaps they left are not filled), or,
with `catchup: false`, at the latest complete interval when the DAG is behind. Manual runs sit on the
timeline but do not move the schedule (as in Airflow 2): a run triggered by hand mid-interval does
not take the place of that interval's scheduled run.

Test runs (`dagline dags test`, `dag_run.is_test`) are not on the timeline (`on_timeline`): nothing
points to them, they hold no logical date (a scheduled run of the same date is still created), and
they count neither for `maxActiveRuns` nor for where the schedule stands.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Collection, Iterator, Sequence

from sqlalchemy import BigInteger, bindparam, cast, column, func, insert, select, update, values
from sqlalchemy.engine import Connection

from dagline import metrics
from dagline.db.models import dag_run_t, dag_t, pool_t, ti_t
from dagline.db.observe import at_commit
from dagline.db.transitions import change_runs, record_events
from dagline.domain import names
from dagline.domain.deadlines import deadline_at
from dagline.domain.states import RunState, RunType, TIState
from dagline.domain.timetable import DagRunInfo, DataInterval, Timetable, make_timetable
from dagline.spec import Dag
from dagline.times import isoformat

SCHEDULE_DRIVING_TYPES = (RunType.SCHEDULED, RunType.BACKFILL)


def platform_pool_names(conn: Connection) -> frozenset[str]:
    """The names of the platform's pools (one small query: what `names.resolve_pool` needs, once per
    transaction; `dagline.store.pools` keeps the pools)."""
    return frozenset(conn.execute(select(pool_t.c.name).where(pool_t.c.namespace.is_(None))).scalars())


def on_timeline():
    """The runs on a timeline: not `overridden` and not a test run (`dagline dags test` makes runs that
    no other run points to, that hold no logical date and that the scheduler leaves alone)."""
    return (dag_run_t.c.state != RunState.OVERRIDDEN) & ~dag_run_t.c.is_test

_timetables: dict[str, Timetable] = {}


def timetable_for(dag: Dag) -> Timetable:
    """The (cached) timetable of a DAG version."""
    key = f"{dag.dag_id}@{dag.version}"
    table = _timetables.get(key)
    if table is None:
        table = make_timetable(dag.spec.schedule, dag.timezone, dag.start_date, dag.end_date, dag_id=dag.dag_id)
        _timetables[key] = table
    return table


@dataclasses.dataclass(frozen=True)
class NewRun:
    logical_date: dt.datetime
    data_interval: DataInterval
    run_after: dt.datetime
    conf: dict | None = None
    replaces: int | None = None  # id of the live run at this date that the new one overrides
    run_id: str | None = None  # chosen by the caller (unused in the DAG); else `<type>__<logical date>`


def make_run_id(run_type: str, logical_date: dt.datetime) -> str:
    return f"{run_type}__{isoformat(logical_date)}"


def insert_runs(
    conn: Connection,
    *,
    dag: Dag,
    version_id: int,
    run_type: str,
    runs: Sequence[NewRun],
    now: dt.datetime,
    who: str,
    backfill_id: int | None = None,
    is_test: bool = False,
) -> list[int]:
    """Create queued runs with their task instances and link them into the timeline.
    The caller holds the DAG row lock (or is the one SQLite writer). Returns the new run ids in order.
    Test runs (`is_test`) get their task instances but stay off the timeline: no `previous`, no relinking."""
    if not runs:
        return []
    replaced = [r.replaces for r in runs if r.replaces is not None]
    if replaced:
        done = change_runs(conn, replaced, expected=RunState.SUCCESS, to=RunState.OVERRIDDEN, at=now, who=who,
                           detail=f"replaced by a {run_type} run")
        done += change_runs(conn, replaced, expected=RunState.FAILED, to=RunState.OVERRIDDEN, at=now, who=who,
                            detail=f"replaced by a {run_type} run")
        if len(done) != len(replaced):
            raise RuntimeError("a run chosen for replacement changed state meanwhile; nothing was written")
    generated = iter(_unique_run_ids(conn, dag.dag_id, [make_run_id("test" if is_test else run_type, r.logical_date)
                                                         for r in runs if r.run_id is None]))
    run_ids = [r.run_id if r.run_id is not None else next(generated) for r in runs]
    rows = [run_row(dag, version_id, run_type, r, run_id, now=now, backfill_id=backfill_id, is_test=is_test)
            for r, run_id in zip(runs, run_ids, strict=True)]
    _without_unset_deadlines(rows)
    ids = [row.id for row in conn.execute(
        insert(dag_run_t).returning(dag_run_t.c.id, sort_by_parameter_order=True), rows)]
    platform = platform_pool_names(conn)
    ti_rows = [ti for run_pk, r in zip(ids, runs, strict=True)
               for ti in ti_rows_of(dag, run_type, run_pk, r, now=now, is_test=is_test, platform_pools=platform)]
    if ti_rows:
        _without_unset_deadlines(ti_rows)
        conn.execute(insert(ti_t), ti_rows)
    record_events(conn, [
        {"at": now, "who": who, "entity": "dag_run", "dag_id": dag.dag_id, "dag_run_id": run_pk,
         "from_state": None, "to_state": RunState.QUEUED,
         "detail": f"{'test ' if is_test else ''}{run_type} run created"
                   + (f", overrides run {r.replaces}" if r.replaces else "")}
        for run_pk, r in zip(ids, runs, strict=True)
    ])
    if not is_test:
        relink(conn, dag.dag_id, min(r.logical_date for r in runs))
    delays = [(now - r.run_after).total_seconds() for r in runs] if run_type == RunType.SCHEDULED else []
    at_commit(conn, lambda: count_created(run_type, len(ids), delays))
    return ids


def run_row(dag: Dag, version_id: int, run_type: str, r: NewRun, run_id: str, *, now: dt.datetime,
            backfill_id: int | None = None, is_test: bool = False) -> dict:
    """The `dag_run` row of a new queued run (its `previous` is the caller's to set)."""
    return {
        "dag_id": dag.dag_id, "run_id": run_id, "logical_date": r.logical_date,
        "data_interval_start": r.data_interval.start, "data_interval_end": r.data_interval.end,
        "run_after": r.run_after, "run_type": run_type, "state": RunState.QUEUED,
        "dag_version_id": version_id, "backfill_id": backfill_id, "conf": r.conf,
        "created_at": now, "queued_at": now, "is_test": is_test,
        # a backfill reprocesses the past (its deadlines passed long ago); a test run is a rehearsal
        "deadline_at": None if run_type == RunType.BACKFILL or is_test else deadline_at(
            dag.spec.deadline, logical_date=r.logical_date, data_interval_end=r.data_interval.end, queued_at=now),
    }


def ti_rows_of(dag: Dag, run_type: str, run_pk: int, r: NewRun, *, now: dt.datetime, platform_pools: Collection[str],
               is_test: bool = False) -> list[dict]:
    """The `task_instance` rows of a new run: one per task that existed at its logical date. Each takes
    the pool its `pool:` resolves to in the DAG's namespace (`names.resolve_pool`: the platform's
    pool of that name if one exists, else the namespace's own), `platform_pools` being the names of the
    platform's pools (`platform_pool_names`, read once per transaction)."""
    rows = []
    for task in dag.tasks.values():
        if task.start_date is not None and task.start_date > r.logical_date:
            continue  # the task did not exist yet at this logical date
        rows.append({
            "dag_run_id": run_pk, "dag_id": dag.dag_id, "task_id": task.task_id, "state": TIState.NONE,
            "try_number": 0, "max_tries": task.retries + 1,
            "pool": names.resolve_pool(dag.namespace, task.pool, platform_pools),
            "pool_slots": task.pool_slots, "priority_weight": task.priority_weight,
            "deadline_at": None if run_type == RunType.BACKFILL or is_test else deadline_at(
                task.deadline, logical_date=r.logical_date, data_interval_end=r.data_interval.end, queued_at=now),
        })
    return rows


def count_created(run_type: str, count: int, delays: list[float]) -> None:
    metrics.RUNS_CREATED.labels(run_type=run_type).inc(count)
    for delay in delays:
        metrics.RUN_SCHEDULE_DELAY.observe(max(delay, 0.0))


def _without_unset_deadlines(rows: list[dict]) -> None:
    """Leave `deadline_at` out of an insert where no row has one (the column defaults to NULL), so a DAG
    without deadlines writes exactly the columns it always wrote."""
    if all(row.get("deadline_at") is None for row in rows):
        for row in rows:
            row.pop("deadline_at", None)


def relink(conn: Connection, dag_id: str, from_date: dt.datetime) -> int:
    """Set `previous` of every live run at or after `from_date` to the live run just before it.
    Returns how many links changed."""
    found = conn.execute(_LIVE_FROM_LATEST_BEFORE, {"dag_id": dag_id, "from_date": from_date}).all()
    earlier = [row for row in found if row.logical_date < from_date]
    previous = earlier[-1].id if earlier else None
    rows = found[len(earlier):]
    changes = []
    for row in rows:
        if row.previous_run_id != previous:
            changes.append({"b_id": row.id, "b_prev": previous})
        previous = row.id
    set_previous(conn, changes)
    return len(changes)


def _live_from_latest_before():
    """The live runs of DAG `dag_id` from the latest one before `from_date` on (that one first, when there
    is one), in timeline order: one query, built once."""
    live = on_timeline()
    dag_id = bindparam("dag_id", type_=dag_run_t.c.dag_id.type)
    from_date = bindparam("from_date", type_=dag_run_t.c.logical_date.type)
    latest_before = (select(func.max(dag_run_t.c.logical_date))
                     .where(dag_run_t.c.dag_id == dag_id, live, dag_run_t.c.logical_date < from_date)
                     .scalar_subquery())
    return (select(dag_run_t.c.id, dag_run_t.c.previous_run_id, dag_run_t.c.logical_date)
            .where(dag_run_t.c.dag_id == dag_id, live,
                   dag_run_t.c.logical_date >= func.coalesce(latest_before, from_date))
            .order_by(dag_run_t.c.logical_date, dag_run_t.c.id))


_LIVE_FROM_LATEST_BEFORE = _live_from_latest_before()


def set_previous(conn: Connection, changes: list[dict]) -> None:
    """Write new `previous` links. PostgreSQL gets one `UPDATE ... FROM (VALUES ...)` per thousand
    links (psycopg2 would send an executemany UPDATE row by row); SQLite's executemany is fast."""
    if not changes:
        return
    if conn.dialect.name != "postgresql":
        conn.execute(
            update(dag_run_t).where(dag_run_t.c.id == bindparam("b_id")).values(previous_run_id=bindparam("b_prev")),
            changes,
        )
        return
    for start in range(0, len(changes), 1000):
        chunk = changes[start:start + 1000]
        links = values(column("b_id", BigInteger), column("b_prev", BigInteger), name="links").data(
            [(c["b_id"], c["b_prev"]) for c in chunk])
        conn.execute(update(dag_run_t).where(dag_run_t.c.id == links.c.b_id)
                     .values(previous_run_id=cast(links.c.b_prev, BigInteger)))


def _unique_run_ids(conn: Connection, dag_id: str, wanted: list[str]) -> list[str]:
    taken: set[str] = set()
    for start in range(0, len(wanted), 500):
        chunk = wanted[start:start + 500]
        taken.update(conn.execute(
            select(dag_run_t.c.run_id).where(dag_run_t.c.dag_id == dag_id, dag_run_t.c.run_id.in_(chunk))
        ).scalars())
    result = []
    for run_id in wanted:
        candidate, n = run_id, 1
        if candidate in taken:  # taken before: so may be its numbered successors (`<run id>.2`, ...)
            taken.update(conn.execute(select(dag_run_t.c.run_id).where(
                dag_run_t.c.dag_id == dag_id, dag_run_t.c.run_id.startswith(f"{run_id}.", autoescape=True))).scalars())
        while candidate in taken:
            n += 1
            candidate = f"{run_id}.{n}"
        taken.add(candidate)
        result.append(candidate)
    return result


def live_run_at(conn: Connection, dag_id: str, logical_date: dt.datetime):
    return conn.execute(
        select(dag_run_t).where(dag_run_t.c.dag_id == dag_id, dag_run_t.c.logical_date == logical_date,
                                on_timeline())
    ).first()


def first_live_run_between(conn: Connection, dag_id: str, start: dt.datetime, end: dt.datetime):
    """The earliest run on the timeline whose logical date lies in [start, end): the run of a day."""
    return conn.execute(
        select(dag_run_t).where(dag_run_t.c.dag_id == dag_id, dag_run_t.c.logical_date >= start,
                                dag_run_t.c.logical_date < end, on_timeline())
        .order_by(dag_run_t.c.logical_date, dag_run_t.c.id).limit(1)
    ).first()


def latest_schedule_end(conn: Connection, dag_id: str) -> dt.datetime | None:
    """End of the data interval of the latest scheduled or backfill run: the schedule continues after it."""
    return conn.execute(
        select(dag_run_t.c.data_interval_end)
        .where(dag_run_t.c.dag_id == dag_id, on_timeline(), dag_run_t.c.run_type.in_(SCHEDULE_DRIVING_TYPES))
        .order_by(dag_run_t.c.logical_date.desc(), dag_run_t.c.id.desc()).limit(1)
    ).scalar()


def active_scheduled_runs(conn: Connection, dag_id: str) -> int:
    """Queued or running runs that count against creating new scheduled runs (backfills do not)."""
    return conn.execute(
        select(func.count()).select_from(dag_run_t)
        .where(dag_run_t.c.dag_id == dag_id, dag_run_t.c.state.in_(RunState.ACTIVE),
               dag_run_t.c.run_type != RunType.BACKFILL, ~dag_run_t.c.is_test)
    ).scalar_one()


_UNKNOWN = object()


def upcoming_scheduled_runs(conn: Connection, dag_id: str, dag: Dag, *, now: dt.datetime,
                            schedule_end=_UNKNOWN) -> Iterator[DagRunInfo]:
    """The runs the scheduler would create for a DAG from `now` on, in order: after the latest
    scheduled or backfill run (`schedule_end`, its interval's end, when the caller knows it), skipping
    dates a manual run holds; with `catchup: false`, from the latest complete interval when the DAG is
    behind. Run creation, `next_dagrun` and `dags next-runs` all walk this."""
    after = latest_schedule_end(conn, dag_id) if schedule_end is _UNKNOWN else schedule_end
    for info in timetable_for(dag).upcoming(after, catchup=dag.spec.catchup, now=now):
        if live_run_at(conn, dag_id, info.logical_date) is None:  # a manual run may hold the date
            yield info


def next_scheduled_run(conn: Connection, dag_id: str, dag: Dag, *, now: dt.datetime,
                       schedule_end=_UNKNOWN) -> DagRunInfo | None:
    return next(upcoming_scheduled_runs(conn, dag_id, dag, now=now, schedule_end=schedule_end), None)


def refresh_next_dagrun(conn: Connection, dag_id: str, dag: Dag, *, now: dt.datetime, schedule_end=_UNKNOWN,
                        active: int | None = None) -> None:
    """Recompute the DAG row's next interval. `next_dagrun_create_after` is left empty while the DAG
    is at `maxActiveRuns` (it is refreshed when one of its runs finishes), so the run-creation step
    only ever claims DAGs it can act on. Run creation passes what it knows (`schedule_end`, the
    `active` scheduled runs) so they are not read again."""
    info = next_scheduled_run(conn, dag_id, dag, now=now, schedule_end=schedule_end)
    create_after = None
    if active is None and info is not None:
        active = active_scheduled_runs(conn, dag_id)
    if info is not None and active < dag.spec.max_active_runs:
        create_after = info.run_after
    conn.execute(update(dag_t).where(dag_t.c.dag_id == dag_id).values(
        next_dagrun=info.logical_date if info else None,
        next_dagrun_data_interval_start=info.data_interval.start if info else None,
        next_dagrun_data_interval_end=info.data_interval.end if info else None,
        next_dagrun_create_after=create_after,
    ))

"""Read models for people and programs: the rows behind `dags list`, `runs list`, `tasks list`,
`backfill list`, as dicts whose keys are the CLI's JSON contract (see shared/CLI.md)."""

from __future__ import annotations

from sqlalchemy import bindparam, func, select, text
from sqlalchemy.engine import Connection

from dagline.db.engine import Database
from dagline.db.models import RUN_STATES, TI_STATES, backfill_t, dag_run_t, dag_t, dag_version_t, event_t, pool_t, ti_t
from dagline.domain import names
from dagline.domain.states import BackfillState, RunState, RunType, TIState
from dagline.metrics import DatabaseCollector, DatabaseFigures
from dagline.store.backfills import request_id_of
from dagline.store.timeline import on_timeline
from dagline.times import isoformat


def list_dags(conn: Connection, *, namespace: str | None = None) -> list[dict]:
    """Active DAGs by id (only those `namespace` owns, if given), each with its owner `namespace`."""
    last_state = {dag_id: row.state for dag_id, row in latest_runs(conn).items()}
    rows = conn.execute(
        select(dag_t, dag_version_t.c.version)
        .join(dag_version_t, dag_version_t.c.id == dag_t.c.current_version_id, isouter=True)
        .where(dag_t.c.is_active.is_(True), *([dag_t.c.namespace == namespace] if namespace else []))
        .order_by(dag_t.c.dag_id)).all()
    return [{
        "dag_id": r.dag_id, "paused": r.is_paused, "schedule": r.schedule, "timezone": r.timezone,
        "version": r.version,
        "next_run_after": isoformat(r.next_dagrun_create_after or r.next_dagrun_data_interval_end),
        "last_run_state": last_state.get(r.dag_id),
        "import_error": r.import_error,
        "namespace": r.namespace,  # the namespace owning it; null for a DAG applied from a file
    } for r in rows]


def run_dict(r) -> dict:
    return {
        "id": r.id, "dag_id": r.dag_id, "run_id": r.run_id, "logical_date": isoformat(r.logical_date),
        "data_interval_start": isoformat(r.data_interval_start), "data_interval_end": isoformat(r.data_interval_end),
        "run_type": r.run_type, "state": r.state, "previous_run_id": r.previous_run_id, "dag_version": r.version,
        "backfill_id": r.backfill_id, "start_date": isoformat(r.start_date), "end_date": isoformat(r.end_date),
        "is_test": bool(r.is_test), "duration_s": _seconds(r.start_date, r.end_date),
        "deadline": isoformat(r.deadline_at), "deadline_missed_at": isoformat(r.deadline_missed_at),
    }


def _seconds(start, end) -> float | None:
    """Seconds from start to end, once both are known (a run or try that has finished)."""
    if start is None or end is None:
        return None
    return round((end - start).total_seconds(), 3)


def run_with_version(conn: Connection, run_pk: int):
    """A run's row with its DAG version's `version`, as `run_dict` takes it (the run must exist)."""
    return conn.execute(select(dag_run_t, dag_version_t.c.version)
                        .join(dag_version_t, dag_version_t.c.id == dag_run_t.c.dag_version_id)
                        .where(dag_run_t.c.id == run_pk)).one()


def list_runs(conn: Connection, dag_id: str | None = None, state: str | None = None,
              backfill_id: int | None = None, limit: int | None = None, *, live: bool = False,
              namespace: str | None = None) -> list[dict]:
    """Runs in (dag_id, logical date, id) order (of the DAGs `namespace` owns, if given), each with its DAG's
    `namespace`; with `limit`, the latest `limit` of that order, read newest first through the
    (dag_id, logical_date, id) index so only those rows are touched. `live`: only runs on the timeline
    (neither overridden nor test runs)."""
    stmt = select(dag_run_t, dag_version_t.c.version, dag_t.c.namespace).join(
        dag_version_t, dag_version_t.c.id == dag_run_t.c.dag_version_id).join(
        dag_t, dag_t.c.dag_id == dag_run_t.c.dag_id, isouter=True)
    if namespace is not None:
        stmt = stmt.where(dag_t.c.namespace == namespace)
    if dag_id is not None:
        stmt = stmt.where(dag_run_t.c.dag_id == dag_id)
    if state is not None:
        stmt = stmt.where(dag_run_t.c.state == state)
    if backfill_id is not None:
        stmt = stmt.where(dag_run_t.c.backfill_id == backfill_id)
    if live:
        stmt = stmt.where(on_timeline())
    order = (dag_run_t.c.dag_id, dag_run_t.c.logical_date, dag_run_t.c.id)
    if not limit:
        return [{**run_dict(r), "namespace": r.namespace} for r in conn.execute(stmt.order_by(*order))]
    rows = conn.execute(stmt.order_by(*(c.desc() for c in order)).limit(limit)).all()
    return [{**run_dict(r), "namespace": r.namespace} for r in reversed(rows)]


def run_detail(conn: Connection, run) -> dict:
    """One run as `dagline runs show` prints it: its fields, conf and times, its task instances with
    durations, and its neighbours on the timeline (`previous`: the run it follows; `next`: the live
    run that follows it). A test run is on no timeline: both are null."""
    row = conn.execute(select(dag_run_t, dag_version_t.c.version)
                       .join(dag_version_t, dag_version_t.c.id == dag_run_t.c.dag_version_id)
                       .where(dag_run_t.c.id == run.id)).one()
    data = run_dict(row)
    data.update(conf=row.conf, created_at=isoformat(row.created_at), queued_at=isoformat(row.queued_at),
                run_after=isoformat(row.run_after))

    def neighbour(r) -> dict | None:
        if r is None:
            return None
        return {"id": r.id, "run_id": r.run_id, "logical_date": isoformat(r.logical_date), "run_type": r.run_type,
                "state": r.state}

    brief = select(dag_run_t.c.id, dag_run_t.c.run_id, dag_run_t.c.logical_date, dag_run_t.c.run_type,
                   dag_run_t.c.state)
    previous = None if row.previous_run_id is None else conn.execute(
        brief.where(dag_run_t.c.id == row.previous_run_id)).first()
    following = None if row.is_test else conn.execute(
        brief.where(dag_run_t.c.previous_run_id == row.id, on_timeline())
        .order_by(dag_run_t.c.logical_date, dag_run_t.c.id).limit(1)).first()
    data["previous"] = neighbour(previous)
    data["next"] = neighbour(following)
    data["tasks"] = list_tasks(conn, row.id)
    return data


def task_states(conn: Connection, run_pks: list[int]) -> dict[int, dict[str, str]]:
    """run id -> task id -> state of its task instance (for grids)."""
    states: dict[int, dict[str, str]] = {}
    for start in range(0, len(run_pks), 500):
        for row in conn.execute(select(ti_t.c.dag_run_id, ti_t.c.task_id, ti_t.c.state)
                                .where(ti_t.c.dag_run_id.in_(run_pks[start:start + 500]))):
            states.setdefault(row.dag_run_id, {})[row.task_id] = row.state
    return states


def list_tasks(conn: Connection, run_pk: int) -> list[dict]:
    """Task instances of a run; `message` is why its latest state change happened, when one was given
    (a failure's exit code and last log line, a timeout, a cancelled backfill...); `signal_seq` the
    signal that started its latest try (if one did); `stop_requested_at` when its try was asked to stop."""
    c = ti_t.c  # only the columns shown: fewer conversions on a page of 1,000 tasks
    rows = conn.execute(select(c.id, c.task_id, c.state, c.try_number, c.max_tries, c.pool, c.start_date, c.end_date,
                               c.external_id, c.deadline_at, c.deadline_missed_at, c.signal_seq, c.stop_requested_at)
                        .where(c.dag_run_id == run_pk).order_by(c.id)).all()
    latest: dict[int, str | None] = {}
    for ev in conn.execute(select(event_t.c.ti_id, event_t.c.detail)
                           .where(event_t.c.entity == "task_instance", event_t.c.dag_run_id == run_pk)
                           .order_by(event_t.c.id)):
        latest[ev.ti_id] = ev.detail
    return [{
        "task_id": r.task_id, "state": r.state, "try_number": r.try_number, "max_tries": r.max_tries,
        "pool": r.pool, "start_date": isoformat(r.start_date), "end_date": isoformat(r.end_date),
        "external_id": r.external_id, "message": latest.get(r.id), "duration_s": _seconds(r.start_date, r.end_date),
        "deadline": isoformat(r.deadline_at), "deadline_missed_at": isoformat(r.deadline_missed_at),
        "signal_seq": r.signal_seq, "stop_requested_at": isoformat(r.stop_requested_at),
    } for r in rows]


def pending_retries(conn: Connection, backfill_id: int | None = None, limit: int = 5) -> list:
    """Task instances waiting for their retry time (`up_for_retry`) in running runs of unpaused DAGs,
    soonest first: work that is pending although nothing is runnable yet. Rows: dag_id, run_id,
    task_id, try_number, next_retry_at (None: due at once)."""
    stmt = (
        select(ti_t.c.dag_id, dag_run_t.c.run_id, ti_t.c.task_id, ti_t.c.try_number, ti_t.c.next_retry_at)
        .join(dag_run_t, dag_run_t.c.id == ti_t.c.dag_run_id)
        .join(dag_t, dag_t.c.dag_id == ti_t.c.dag_id)
        .where(ti_t.c.state == TIState.UP_FOR_RETRY, dag_run_t.c.state == RunState.RUNNING,
               dag_t.c.is_paused.is_(False))
        .order_by(ti_t.c.next_retry_at.asc().nulls_first(), ti_t.c.id)
        .limit(limit)
    )
    if backfill_id is not None:
        stmt = stmt.where(dag_run_t.c.backfill_id == backfill_id)
    return conn.execute(stmt).all()


def run_failures(conn: Connection, *, backfill_id: int | None = None, run_pks: list[int] | None = None,
                 limit: int = 5) -> list[str]:
    """Why runs failed, one line per failed task instance: `run_id task_id (try n): message`, for the
    failed runs of a backfill or the given runs."""
    stmt = (select(dag_run_t.c.run_id, ti_t.c.id, ti_t.c.task_id, ti_t.c.try_number)
            .join(dag_run_t, dag_run_t.c.id == ti_t.c.dag_run_id)
            .where(dag_run_t.c.state == RunState.FAILED, ti_t.c.state == TIState.FAILED)
            .order_by(dag_run_t.c.logical_date, ti_t.c.id).limit(limit))
    if backfill_id is not None:
        stmt = stmt.where(dag_run_t.c.backfill_id == backfill_id)
    if run_pks is not None:
        stmt = stmt.where(dag_run_t.c.id.in_(run_pks))
    rows = conn.execute(stmt).all()
    lines = []
    for r in rows:
        detail = conn.execute(select(event_t.c.detail).where(
            event_t.c.ti_id == r.id, event_t.c.to_state == TIState.FAILED)
            .order_by(event_t.c.id.desc()).limit(1)).scalar()
        lines.append(f"{r.run_id} {r.task_id} (try {r.try_number}): {detail or TIState.FAILED}")
    if run_pks is not None and len(lines) < limit:  # a run failed with no failed task: stopped, cancelled
        named = {r.run_id for r in rows}
        for run in conn.execute(select(dag_run_t.c.id, dag_run_t.c.run_id).where(
                dag_run_t.c.id.in_(run_pks), dag_run_t.c.state == RunState.FAILED)
                .order_by(dag_run_t.c.logical_date).limit(limit - len(lines))):
            if run.run_id in named:
                continue
            detail = conn.execute(select(event_t.c.detail).where(
                event_t.c.dag_run_id == run.id, event_t.c.entity == "dag_run", event_t.c.to_state == RunState.FAILED)
                .order_by(event_t.c.id.desc()).limit(1)).scalar()
            lines.append(f"{run.run_id}: {detail or RunState.FAILED}")
    return lines


def runs_failed_by(conn: Connection, who: str) -> list[int]:
    """The ids of the runs whose change to `failed` the event log credits to `who` (a scheduler
    replica), ascending: `scheduler --until-idle` reports them."""
    return sorted(set(conn.execute(select(event_t.c.dag_run_id).where(
        event_t.c.entity == "dag_run", event_t.c.to_state == RunState.FAILED, event_t.c.who == who)).scalars()))


def backfill_dict(conn: Connection, b, counts: dict[str, int] | None = None) -> dict:
    """A backfill as the CLI's JSON shows it; `counts` (runs per state) when the caller has them."""
    if counts is None:
        counts = backfill_run_counts(conn, [b.id]).get(b.id, {})
    return {
        "id": b.id, "dag_id": b.dag_id, "from_date": isoformat(b.from_date), "to_date": isoformat(b.to_date),
        "reprocess": b.reprocess, "max_active_runs": b.max_active_runs, "run_backwards": b.run_backwards,
        "state": b.state, "total": b.total,
        "queued": counts.get(RunState.QUEUED, 0), "running": counts.get(RunState.RUNNING, 0),
        "succeeded": counts.get(RunState.SUCCESS, 0), "failed": counts.get(RunState.FAILED, 0),
        "skipped_existing": b.skipped_existing, "overridden": b.overridden, "request_id": request_id_of(b.request_id),
        "created_at": isoformat(b.created_at), "completed_at": isoformat(b.completed_at),
    }


def backfill_task_counts(conn: Connection, backfill_id: int) -> dict[str, int]:
    """Task instances of a backfill's live runs by state (for progress bars)."""
    return dict(conn.execute(
        select(ti_t.c.state, func.count()).join(dag_run_t, dag_run_t.c.id == ti_t.c.dag_run_id)
        .where(dag_run_t.c.backfill_id == backfill_id, dag_run_t.c.state != RunState.OVERRIDDEN)
        .group_by(ti_t.c.state)).all())


def list_backfills(conn: Connection, dag_id: str | None = None, *, namespace: str | None = None) -> list[dict]:
    """Backfills oldest first (of `dag_id`, of the DAGs `namespace` owns, if given)."""
    stmt = select(backfill_t).order_by(backfill_t.c.id)
    if dag_id is not None:
        stmt = stmt.where(backfill_t.c.dag_id == dag_id)
    if namespace is not None:
        stmt = stmt.where(backfill_t.c.dag_id.in_(select(dag_t.c.dag_id).where(dag_t.c.namespace == namespace)))
    backfills = conn.execute(stmt).all()
    counts = backfill_run_counts(conn, [b.id for b in backfills])
    return [backfill_dict(conn, b, counts.get(b.id, {})) for b in backfills]


def task_counts(conn: Connection, run_pks: list[int]) -> dict[int, dict[str, int]]:
    """Task instances per state of each run (runs without task instances are absent)."""
    counts: dict[int, dict[str, int]] = {}
    for start in range(0, len(run_pks), 500):
        chunk = run_pks[start:start + 500]
        for row in conn.execute(select(ti_t.c.dag_run_id, ti_t.c.state, func.count())
                                .where(ti_t.c.dag_run_id.in_(chunk)).group_by(ti_t.c.dag_run_id, ti_t.c.state)):
            counts.setdefault(row[0], {})[row[1]] = row[2]
    return counts


def version_numbers(conn: Connection, dag_ids) -> dict[int, int]:
    """Version row id -> the version's number within its DAG (1 for the first spec applied, then 2...)."""
    numbers: dict[int, int] = {}
    seen: dict[str, int] = {}
    rows = conn.execute(select(dag_version_t.c.id, dag_version_t.c.dag_id)
                        .where(dag_version_t.c.dag_id.in_(list(dag_ids))).order_by(dag_version_t.c.id))
    for row in rows:
        seen[row.dag_id] = seen.get(row.dag_id, 0) + 1
        numbers[row.id] = seen[row.dag_id]
    return numbers


def latest_runs(conn: Connection, dag_ids=None) -> dict[str, object]:
    """Each DAG's latest live run (by logical date), as `dags list` shows its state; every active DAG's
    when `dag_ids` is None. One index lookup per DAG (a correlated top-1 over the live runs' unique index,
    whose predicate is repeated word for word so SQLite uses it too), never a scan of all runs."""
    live = dag_run_t.alias("live")
    newest = (select(live.c.id).where(live.c.dag_id == dag_t.c.dag_id, text(_LIVE_ALIAS_SQL))
              .order_by(live.c.logical_date.desc()).limit(1).scalar_subquery())
    stmt = select(dag_t.c.dag_id, newest.label("run_pk"))
    if dag_ids is None:
        stmt = stmt.where(dag_t.c.is_active.is_(True))
    else:
        dag_ids = list(dag_ids)
        if not dag_ids:
            return {}
        stmt = stmt.where(dag_t.c.dag_id.in_(dag_ids))
    pks = [pk for _, pk in conn.execute(stmt) if pk is not None]
    found: dict[str, object] = {}
    for start in range(0, len(pks), 500):
        for row in conn.execute(select(dag_run_t.c.id, dag_run_t.c.dag_id, dag_run_t.c.run_id, dag_run_t.c.state)
                                .where(dag_run_t.c.id.in_(pks[start:start + 500]))):
            found[row.dag_id] = row
    return found


# `LIVE_RUN_SQL` on the alias `live`: the text of the partial index's predicate, so both planners use it
_LIVE_ALIAS_SQL = f"live.state != '{RunState.OVERRIDDEN}' AND NOT live.is_test"


def backfill_run_counts(conn: Connection, backfill_ids: list[int]) -> dict[int, dict[str, int]]:
    """Runs per state of each backfill."""
    counts: dict[int, dict[str, int]] = {}
    if backfill_ids:
        for row in conn.execute(select(dag_run_t.c.backfill_id, dag_run_t.c.state, func.count())
                                .where(dag_run_t.c.backfill_id.in_(backfill_ids))
                                .group_by(dag_run_t.c.backfill_id, dag_run_t.c.state)):
            counts.setdefault(row[0], {})[row[1]] = row[2]
    return counts


def runs_to_show(conn: Connection, limits: dict[str, int]) -> dict[str, list]:
    """Per DAG, the runs worth an object in `kubectl get dagruns` (never test runs): every running run and every queued
    scheduled or manual one (queued backfill runs are counted by their Backfill instead), plus the
    `limits[dag_id]` most recently finished ones (success, failed or overridden), newest first."""
    if not limits:
        return {}
    dag_ids = list(limits)
    run = dag_run_t.c
    shown: dict[str, list] = {dag_id: [] for dag_id in dag_ids}
    active = conn.execute(select(dag_run_t).where(
        run.dag_id.in_(dag_ids), ~run.is_test,
        (run.state == RunState.RUNNING) | ((run.state == RunState.QUEUED) & (run.run_type != RunType.BACKFILL)),
    ).order_by(run.dag_id, run.logical_date, run.id))
    for row in active:
        shown[row.dag_id].append(row)
    deepest = max(limits.values())
    if deepest > 0:
        rank = func.row_number().over(partition_by=run.dag_id,
                                      order_by=(run.end_date.desc().nulls_last(), run.id.desc())).label("rank")
        finished = (select(dag_run_t, rank)
                    .where(run.dag_id.in_(dag_ids), ~run.is_test,
                           run.state.in_((RunState.SUCCESS, RunState.FAILED, RunState.OVERRIDDEN)))
                    .subquery())
        for row in conn.execute(select(finished).where(finished.c.rank <= deepest).order_by(finished.c.rank)):
            if row.rank <= limits[row.dag_id]:
                shown[row.dag_id].append(row)
    return shown


def runs_by_run_id(conn: Connection, keys: list[tuple[str, str]]) -> dict[tuple[str, str], object]:
    """Runs by (dag_id, run_id)."""
    found: dict[tuple[str, str], object] = {}
    wanted = set(keys)
    run_ids = sorted({run_id for _, run_id in wanted})
    for start in range(0, len(run_ids), 500):
        for row in conn.execute(select(dag_run_t).where(dag_run_t.c.run_id.in_(run_ids[start:start + 500]))):
            if (row.dag_id, row.run_id) in wanted:
                found[(row.dag_id, row.run_id)] = row
    return found


# The gauges count the states rows leave: finished rows only grow with history, so counting them at every
# scrape would read every row (ADR 0075); the (state, ...) indexes give these counts by range.
GAUGED_TI_STATES = tuple(s for s in TI_STATES if s not in TIState.FINISHED)
GAUGED_RUN_STATES = tuple(s for s in RUN_STATES if s not in RunState.FINISHED and s != RunState.OVERRIDDEN)


_BACKFILL_RUNS = (select(dag_run_t.c.state, func.count())
                  .where(dag_run_t.c.backfill_id.in_(bindparam("ids", expanding=True))).group_by(dag_run_t.c.state))
# SQLite's statistics count the runs without a backfill as one value of the index: named, it is used
_BACKFILL_RUNS_SQLITE = text("SELECT state, count(*) FROM dag_run INDEXED BY ix_dag_run_backfill_id "
                             "WHERE backfill_id IN :ids GROUP BY state").bindparams(bindparam("ids", expanding=True))


def metric_figures(conn: Connection) -> DatabaseFigures:
    """The database gauges of `dagline.metrics`: runs and task instances in unfinished states (one
    indexed range per state), backfills, the runs of running backfills and the pools' slots."""
    grouped = (select(ti_t.c.state, ti_t.c.pool, func.count(), func.sum(ti_t.c.pool_slots))
               .where(ti_t.c.state.in_(GAUGED_TI_STATES)).group_by(ti_t.c.state, ti_t.c.pool))
    tis: dict[str, int] = {}
    used: dict[str, int] = {}
    for state, pool, count, slots in conn.execute(grouped):
        tis[state] = tis.get(state, 0) + count
        if state in TIState.ACTIVE:
            used[pool] = used.get(pool, 0) + (slots or 0)
    runs = dict(conn.execute(select(dag_run_t.c.state, func.count())
                             .where(dag_run_t.c.state.in_(GAUGED_RUN_STATES)).group_by(dag_run_t.c.state)).all())
    backfills = dict(conn.execute(select(backfill_t.c.state, func.count()).group_by(backfill_t.c.state)).all())
    # the running backfills' ids first, not a join: SQLite's planner may walk every run to find theirs
    running = list(conn.execute(select(backfill_t.c.id).where(backfill_t.c.state == BackfillState.RUNNING))
                   .scalars())
    backfill_runs = dict(conn.execute(_BACKFILL_RUNS_SQLITE if conn.dialect.name == "sqlite" else _BACKFILL_RUNS,
                                      {"ids": running}).all()) if running else {}
    pools = {names.split_pool(key): (slots, used.get(key, 0))
             for key, slots in conn.execute(select(pool_t.c.name, pool_t.c.slots))}
    return DatabaseFigures(runs=runs, task_instances=tis, pools=pools, backfills=backfills,
                           backfill_runs=backfill_runs)


def database_collector(db: Database) -> DatabaseCollector:
    """A collector that reads `metric_figures` from `db` at every scrape (register with `metrics.watch_database`)."""

    def read() -> DatabaseFigures:
        with db.engine.connect() as conn:
            return metric_figures(conn)

    return DatabaseCollector(read, run_states=GAUGED_RUN_STATES, ti_states=GAUGED_TI_STATES,
                             backfill_states=tuple(BackfillState), backfill_run_states=RUN_STATES)


def _next_due_statement():
    """The soonest time of each thing that comes due unannounced, one index probe each."""
    creatable = (select(func.min(dag_t.c.next_dagrun_create_after))
                 .where(dag_t.c.is_active.is_(True), dag_t.c.is_paused.is_(False)).scalar_subquery())
    retry = select(func.min(ti_t.c.next_retry_at)).where(ti_t.c.state == TIState.UP_FOR_RETRY).scalar_subquery()
    queued = select(func.min(dag_run_t.c.run_after)).where(dag_run_t.c.state == RunState.QUEUED).scalar_subquery()
    return select(creatable.label("creatable"), retry.label("retry"), queued.label("startable"))


_NEXT_DUE = _next_due_statement()  # built once: an idle replica asks before each stretched wait


def next_due_at(conn: Connection):
    """The soonest moment something comes due that no writer announces: a DAG's next run may be
    created, a retry's time, a queued run's run-after. None when nothing is waiting for a time. A
    time in the past means something is due now (or held by a peer)."""
    row = conn.execute(_NEXT_DUE).one()
    times = [at for at in (row.creatable, row.retry, row.startable) if at is not None]
    return min(times) if times else None

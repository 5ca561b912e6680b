"""Backfills: plan the schedule's intervals in a range, then insert them into the timeline.

`plan_backfill` is pure: given the timetable, the live runs already in the range and `reprocess`, it
says for each logical date whether to create a run, replace one (the old run becomes `overridden`
and is kept for audit), or leave it (it exists, it is still queued or running, or its interval has
not ended yet). `create_backfill` writes a plan in one transaction with the DAG row locked, and is
idempotent per request id. The scheduler loop then runs the backfill's runs like any other.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Any

from sqlalchemy import and_, exists, insert, select, update
from sqlalchemy.engine import Connection

from dagline.db.claims import lock_dag
from dagline.db.engine import Database
from dagline.db.models import backfill_t, dag_run_t
from dagline.db.transitions import fail_queued_runs, record_events
from dagline.domain import names
from dagline.domain.states import BackfillState, Reprocess, RunState, RunType
from dagline.domain.timetable import DataInterval, Timetable
from dagline.errors import InvalidInput, NotFound, OperationFailed
from dagline.limits import MAX_ACTIVE_LIMIT, MAX_BACKFILL_RUNS, MAX_ID_LENGTH
from dagline.store.dags import DagCache, require_dag
from dagline.store.timeline import NewRun, insert_runs, on_timeline, refresh_next_dagrun, timetable_for
from dagline.times import parse_instant, to_utc

REPROCESS = tuple(Reprocess)


def resolve_range(start: str, end: str, timezone: str, *, start_field: str = "--start",
                  end_field: str = "--end") -> tuple[dt.datetime, dt.datetime]:
    """The UTC bounds of `[start, end]` as people write them: dates or date-times, read in the DAG's
    time zone when they have no offset; a plain date as the end includes that whole day."""
    bounds = []
    for text, field in ((start, start_field), (end, end_field)):
        try:
            bounds.append(parse_instant(text, timezone))
        except ValueError as exc:
            raise InvalidInput(str(exc), field=field) from None
    first, last = bounds
    if _is_plain_date(end):
        try:
            last = parse_instant((dt.date.fromisoformat(end.strip()) + dt.timedelta(days=1)).isoformat(), timezone)
        except (ValueError, OverflowError) as exc:  # the day after the last one dagline accepts
            raise InvalidInput(str(exc), field=end_field) from None
        last -= dt.timedelta(microseconds=1)
    if first > last:
        raise InvalidInput(f"the start {start} is after the end {end}", field=start_field)
    return first, last


def _is_plain_date(text: str) -> bool:
    try:
        dt.date.fromisoformat(text.strip())
    except ValueError:
        return False
    return len(text.strip()) == 10


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    logical_date: dt.datetime
    data_interval: DataInterval
    run_after: dt.datetime
    action: str  # create | replace | keep_existing | keep_active | not_due
    existing_run_id: int | None = None
    existing_state: str | None = None


@dataclasses.dataclass
class BackfillPlan:
    dag_id: str
    entries: list[PlannedRun]

    def count(self, action: str) -> int:
        return sum(1 for e in self.entries if e.action == action)

    @property
    def to_run(self) -> list[PlannedRun]:
        return [e for e in self.entries if e.action in ("create", "replace")]


def _refuse_too_many_intervals(timetable: Timetable, start: dt.datetime, end: dt.datetime) -> None:
    """Count the intervals of [start, end] in growing windows, stopping soon after MAX_BACKFILL_RUNS: an
    hourly backfill over centuries would otherwise list millions of intervals (minutes and gigabytes)
    before anything is said. Once a thousand are counted, a range whose intervals at that rate would be
    more than twice the limit is refused at once; closer to the limit, counting goes on to the exact bound."""
    count, cursor, span, first = 0, start, dt.timedelta(hours=1), None

    def refuse(how_many: str) -> InvalidInput:
        return InvalidInput(f"[{start.isoformat()}, {end.isoformat()}] holds {how_many} intervals (the limit is "
                            f"{MAX_BACKFILL_RUNS:,} per backfill): split the range into several backfills",
                            field="--end")

    while cursor <= end:
        window_end = end if span >= end - cursor else cursor + span
        found = len(timetable.runs_between(cursor, window_end))
        if found and first is None:
            first = cursor
        count += found
        if count > MAX_BACKFILL_RUNS:
            raise refuse(f"more than {MAX_BACKFILL_RUNS:,}")
        if window_end >= end:
            return
        if count >= 1_000 and first is not None and window_end > first:
            estimate = count * ((end - first) / (window_end - first))
            if estimate > 2 * MAX_BACKFILL_RUNS:
                raise refuse(f"about {estimate:,.0f}")
        cursor = window_end + dt.timedelta(microseconds=1)
        if found < 1_000:
            span *= 4


def plan_backfill(
    timetable: Timetable, existing: dict[dt.datetime, tuple[int, str]], *, start: dt.datetime, end: dt.datetime,
    reprocess: str, now: dt.datetime, dag_id: str = "",
) -> BackfillPlan:
    """Decide every interval whose logical date lies in [start, end]. `existing` maps logical dates
    to (run id, state) of live runs. A range of more than MAX_BACKFILL_RUNS intervals is refused before
    they are listed."""
    _refuse_too_many_intervals(timetable, start, end)
    entries = []
    for info in timetable.runs_between(start, end):
        found = existing.get(info.logical_date)
        common = dict(logical_date=info.logical_date, data_interval=info.data_interval, run_after=info.run_after)
        if info.run_after > now:
            entries.append(PlannedRun(**common, action="not_due"))
        elif found is None:
            entries.append(PlannedRun(**common, action="create"))
        else:
            run_id, state = found
            if state in RunState.ACTIVE:
                action = "keep_active"  # never replace a run that is queued or running
            elif (state == RunState.FAILED and reprocess in (Reprocess.FAILED, Reprocess.COMPLETED)) or (
                    state == RunState.SUCCESS and reprocess == Reprocess.COMPLETED):
                action = "replace"
            else:
                action = "keep_existing"
            entries.append(PlannedRun(**common, action=action, existing_run_id=run_id, existing_state=state))
    return BackfillPlan(dag_id, entries)


@dataclasses.dataclass
class BackfillResult:
    backfill_id: int | None
    plan: BackfillPlan
    created: bool  # False for a dry run or a request id seen before


def create_backfill(
    db: Database, dag_id: str, *, start: dt.datetime, end: dt.datetime, now: dt.datetime,
    reprocess: str = Reprocess.NONE, max_active_runs: int | None = None, run_backwards: bool = False,
    dry_run: bool = False, request_id: str | None = None, conf: dict | None = None, who: str = "cli",
    paused: bool = False,
) -> BackfillResult:
    """Plan and insert a backfill's runs in one transaction with the DAG row locked (see the module's
    docstring). `paused` creates it paused: none of its runs starts until it is resumed."""
    if reprocess not in REPROCESS:
        raise InvalidInput(f"unknown reprocess mode {reprocess!r} (choose none, failed or completed)",
                           field="--reprocess")
    if start > end:
        raise InvalidInput(f"the start {start.isoformat()} is after the end {end.isoformat()}", field="--start")
    if conf is not None and not isinstance(conf, dict):
        raise InvalidInput("must be a JSON object", field="--conf")
    if max_active_runs is not None and not 1 <= max_active_runs <= MAX_ACTIVE_LIMIT:
        raise InvalidInput(f"must be 1 to {MAX_ACTIVE_LIMIT:,}, got {max_active_runs:,}", field="--max-active-runs")
    if request_id is not None and not 1 <= len(request_id) <= MAX_ID_LENGTH:
        raise InvalidInput(f"must be 1 to {MAX_ID_LENGTH} characters, got {len(request_id):,}", field="--request-id")
    cache = DagCache()
    request = {"dag": dag_id, "--start": start, "--end": end, "--reprocess": reprocess,
               "--max-active-runs": max_active_runs, "--run-backwards": run_backwards, "--conf": conf or {}}
    scoped = None if request_id is None else scoped_request_id(names.namespace_of(dag_id), request_id)
    with db.begin() as conn:
        if request_id is not None:
            seen = find_backfill(conn, scoped)
            if seen is not None:
                _refuse_other_arguments(conn, seen, request)
                return BackfillResult(seen.id, _plan_of_existing(conn, seen), created=False)
        require_dag(conn, dag_id)
        row = lock_dag(conn, dag_id)
        if request_id is not None:
            # Look again holding the DAG lock: a concurrent request with this id (another replica
            # handling the same Backfill object) that held the lock first has committed by now.
            seen = find_backfill(conn, scoped)
            if seen is not None:
                _refuse_other_arguments(conn, seen, request)
                return BackfillResult(seen.id, _plan_of_existing(conn, seen), created=False)
        if row.is_paused:
            raise OperationFailed(f"DAG {dag_id!r} is paused: unpause it (`dagline dags unpause {dag_id}`) to backfill")
        version_id, dag = cache.current(conn, dag_id)
        if dag.spec.schedule is None:
            raise InvalidInput(f"DAG {dag_id!r} has no schedule, so it has no intervals to backfill; "
                               "trigger runs with `dagline dags trigger` instead", field="spec.schedule")
        if run_backwards and any(t.depends_on_past for t in dag.tasks.values()):
            raise InvalidInput(f"DAG {dag_id!r} has tasks with dependsOnPast: running backwards would make each "
                               "run wait for the one after it", field="--run-backwards")
        existing = {
            r.logical_date: (r.id, r.state) for r in conn.execute(
                select(dag_run_t.c.id, dag_run_t.c.logical_date, dag_run_t.c.state)
                .where(dag_run_t.c.dag_id == dag_id, on_timeline(),
                       dag_run_t.c.logical_date >= start, dag_run_t.c.logical_date <= end))
        }
        plan = plan_backfill(timetable_for(dag), existing, start=start, end=end, reprocess=reprocess, now=now,
                             dag_id=dag_id)
        if dry_run:
            return BackfillResult(None, plan, created=False)
        backfill_id = conn.execute(insert(backfill_t).values(
            dag_id=dag_id, request_id=scoped, from_date=start, to_date=end, reprocess=reprocess,
            max_active_runs=max_active_runs, run_backwards=run_backwards, state=BackfillState.RUNNING, is_paused=paused,
            total=len(plan.to_run), skipped_existing=plan.count("keep_existing") + plan.count("keep_active"),
            overridden=plan.count("replace"), created_at=now,
        ).returning(backfill_t.c.id)).scalar_one()
        new_runs = [NewRun(e.logical_date, e.data_interval, e.run_after, conf=conf, replaces=e.existing_run_id
                           if e.action == "replace" else None) for e in plan.to_run]
        insert_runs(conn, dag=dag, version_id=version_id, run_type=RunType.BACKFILL, runs=new_runs, now=now, who=who,
                    backfill_id=backfill_id)
        if not new_runs:
            conn.execute(update(backfill_t).where(backfill_t.c.id == backfill_id)
                         .values(state=BackfillState.COMPLETED, completed_at=now))
        record_events(conn, [{"at": now, "who": who, "entity": "backfill", "dag_id": dag_id,
                              "detail": f"backfill {backfill_id}: {len(new_runs)} runs",
                              "to_state": BackfillState.RUNNING}])
        refresh_next_dagrun(conn, dag_id, dag, now=now)
    return BackfillResult(backfill_id, plan, created=True)


def _refuse_other_arguments(conn: Connection, backfill, request: dict) -> None:
    """The same request id with other arguments is a conflict: the id names one request (repeating it
    with the same arguments is idempotent)."""
    first_conf = conn.execute(select(dag_run_t.c.conf).where(dag_run_t.c.backfill_id == backfill.id)
                              .order_by(dag_run_t.c.id).limit(1)).scalar()
    stored = {"dag": backfill.dag_id, "--start": to_utc(backfill.from_date), "--end": to_utc(backfill.to_date),
              "--reprocess": backfill.reprocess, "--max-active-runs": backfill.max_active_runs,
              "--run-backwards": backfill.run_backwards, "--conf": first_conf or {}}
    if backfill.total == 0:
        del stored["--conf"]  # no run keeps it
    differences = [f"{name} {_say(request[name])}, not {_say(value)}"
                   for name, value in stored.items() if request[name] != value]
    if differences:
        raise InvalidInput(f"request id {request_id_of(backfill.request_id)!r} was used by backfill {backfill.id} "
                           f"with other arguments ({'; '.join(differences)}): a request id names one request; "
                           "use a new one",
                           field="--request-id")


def _say(value) -> str:
    return value.isoformat() if isinstance(value, dt.datetime) else json.dumps(value)


def _plan_of_existing(conn: Connection, backfill) -> BackfillPlan:
    """The runs a backfill created, as a plan (for a repeated request)."""
    rows = conn.execute(
        select(dag_run_t.c.id, dag_run_t.c.logical_date, dag_run_t.c.data_interval_start,
               dag_run_t.c.data_interval_end, dag_run_t.c.run_after, dag_run_t.c.state)
        .where(dag_run_t.c.backfill_id == backfill.id).order_by(dag_run_t.c.logical_date)
    ).all()
    return BackfillPlan(backfill.dag_id, [
        PlannedRun(r.logical_date, DataInterval(r.data_interval_start, r.data_interval_end), r.run_after,
                   action="already_created", existing_run_id=r.id, existing_state=r.state)
        for r in rows
    ])


def cancel_backfill(db: Database, backfill_id: int, *, now: dt.datetime, who: str = "cli") -> int:
    """Cancel a backfill: its runs that have not started are failed (their task instances skipped, so
    `dependsOnPast` of later runs is not blocked by them); running ones finish. Returns runs cancelled."""
    with db.begin() as conn:
        row = conn.execute(select(backfill_t).where(backfill_t.c.id == backfill_id)).first()
        if row is None:
            raise NotFound(f"unknown backfill {backfill_id} (see `dagline backfill list`)")
        if row.state != BackfillState.RUNNING:
            return 0
        lock_dag(conn, row.dag_id)
        queued = list(conn.execute(select(dag_run_t.c.id).where(
            dag_run_t.c.backfill_id == backfill_id, dag_run_t.c.state == RunState.QUEUED)).scalars())
        detail = f"backfill {backfill_id} cancelled"
        cancelled = fail_queued_runs(conn, queued, now=now, who=who, detail=detail)
        conn.execute(update(backfill_t).where(backfill_t.c.id == backfill_id)
                     .values(state=BackfillState.CANCELLED, completed_at=now))
        record_events(conn, [{"at": now, "who": who, "entity": "backfill", "dag_id": row.dag_id,
                              "detail": detail, "from_state": BackfillState.RUNNING,
                              "to_state": BackfillState.CANCELLED}])
    return len(cancelled)


def backfill_row(conn: Connection, backfill_id: int):
    """A backfill's row by its id, or None."""
    return conn.execute(select(backfill_t).where(backfill_t.c.id == backfill_id)).first()


def scoped_request_id(namespace: str, request_id: str) -> str:
    """How a request id is stored: within its DAG's namespace (`<namespace>/<request id>`), so that one
    namespace's request ids never answer for another's (ADR 92)."""
    return f"{namespace}/{request_id}"


def request_id_of(stored: str | None) -> str | None:
    """The request id as its requester gave it (the stored one without its namespace)."""
    return None if stored is None else stored.split("/", 1)[1]


def find_backfill(conn: Connection, scoped: str):
    """The backfill created for this scoped request id (`scoped_request_id`), or None."""
    return conn.execute(select(backfill_t).where(backfill_t.c.request_id == scoped)).first()


def set_backfill_paused(db: Database, backfill_id: int, paused: bool, *, now: dt.datetime, who: str = "cli") -> bool:
    """Pause (no more of its runs start; running ones finish) or resume a backfill; returns whether
    anything changed. A finished or cancelled backfill is left as it is."""
    with db.begin() as conn:
        row = conn.execute(update(backfill_t).where(
            backfill_t.c.id == backfill_id, backfill_t.c.state == BackfillState.RUNNING,
            backfill_t.c.is_paused.is_(not paused))
            .values(is_paused=paused).returning(backfill_t.c.dag_id)).first()
        if row is None:
            return False
        before, after = (BackfillState.RUNNING, "paused") if paused else ("paused", BackfillState.RUNNING)
        record_events(conn, [{"at": now, "who": who, "entity": "backfill", "dag_id": row.dag_id,
                              "detail": f"backfill {backfill_id}", "from_state": before, "to_state": after}])
    return True


def complete_finished_backfills(conn: Connection, *, now: dt.datetime) -> list:
    """Mark the running backfills none of whose runs is active any more as completed at `now`; returns
    their (id, dag_id). The WHERE keeps the invariant: a backfill with an active run stays running."""
    unfinished = exists().where(and_(dag_run_t.c.backfill_id == backfill_t.c.id,
                                     dag_run_t.c.state.in_(RunState.ACTIVE)))
    return conn.execute(
        update(backfill_t).where(backfill_t.c.state == BackfillState.RUNNING, ~unfinished)
        .values(state=BackfillState.COMPLETED, completed_at=now).returning(backfill_t.c.id, backfill_t.c.dag_id)
    ).all()


def backfills_by_request_id(conn: Connection, requests: list[tuple[str, str]]) -> dict[tuple[str, str], Any]:
    """(namespace, request id) -> every column of the backfill created for it, for those of `requests`
    (e.g. Backfill objects' namespaces and uids) created."""
    wanted = {scoped_request_id(namespace, request_id): (namespace, request_id) for namespace, request_id in requests}
    rows = conn.execute(select(backfill_t).where(backfill_t.c.request_id.in_(list(wanted))))
    return {wanted[r.request_id]: r for r in rows}

"""The web pages' read models: what each page shows, read in the request's one transaction. Listings the
CLI already has come from `dagline.store.read_models` (the same fields as its JSON); what only the pages need
(the grid, the timeline, a run's tries, a task's durations, a stop's confirmation) is read here. A DAG is
shown by its key (`a-team/etl`: `dagline.domain.names`), the `dag_id` of its rows."""

from __future__ import annotations

import dataclasses
import datetime as dt
import statistics

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from dagline.db.models import dag_run_t, event_t, signal_action_t, signal_t, ti_t
from dagline.domain import names
from dagline.domain.states import RunState, SignalAction, TIState
from dagline.store import read_models
from dagline.store.dags import DagCache, require_dag
from dagline.times import isoformat

MAX_GRID_RUNS = 1000
TRY_ENDS = TIState.FINISHED | {TIState.UP_FOR_RETRY, TIState.NONE}  # the states a try's event ends it with


def dag_key(row: dict) -> str:
    """The key (`dag_id` column) of a listed DAG's row, which gives its `namespace` and its `dag_id` (the
    key, or the name as the command line's JSON says it)."""
    return names.qualify(row.get("namespace") or names.namespace_of(row["dag_id"]), names.name_of(row["dag_id"]))


def dag_list(conn: Connection, *, namespace: str | None = None) -> list[dict]:
    """`dags list` with each DAG's latest run (id and state) and its import error (of `namespace`, if given);
    each with `dag_id` its key, `name` and `namespace`."""
    rows = read_models.list_dags(conn, namespace=namespace)
    for r in rows:
        r["dag_id"] = dag_key(r)
        r["name"], r["namespace"] = names.name_of(r["dag_id"]), names.namespace_of(r["dag_id"])
    latest = read_models.latest_runs(conn, [r["dag_id"] for r in rows])
    for r in rows:
        run = latest.get(r["dag_id"])
        r["last_run"] = None if run is None else {"run_id": run.run_id, "state": run.state, "id": run.id}
    return rows


def dag_header(conn: Connection, dag_id: str) -> dict:
    """The DAG row a DAG page starts with (raises OperationFailed for an unknown DAG)."""
    row = require_dag(conn, dag_id, active=False)
    return {"dag_id": row.dag_id, "paused": row.is_paused, "active": row.is_active, "schedule": row.schedule,
            "timezone": row.timezone, "import_error": row.import_error,
            "next_run_after": isoformat(row.next_dagrun_create_after)}


def version(conn: Connection, version_id: int):
    """A DAG version (read per request: version ids are per database, and a page reads one or two)."""
    return DagCache().get(conn, version_id)


def current_dag(conn: Connection, dag_id: str):
    """The DAG's current version as a `Dag`, None when it cannot be read (the page shows the import error)."""
    try:
        return DagCache().current(conn, dag_id)[1]
    except Exception:  # noqa: BLE001 - an unreadable version: the page shows the import error instead
        return None


@dataclasses.dataclass
class Grid:
    """What the grid page shows: the tasks as rows, the runs as columns, each cell a task instance's state."""

    tasks: list[str]
    runs: list[dict]          # live runs, oldest first
    overridden: list[dict]    # runs a backfill replaced, within the shown range
    states: dict[int, dict[str, str]]

    def rows(self, runs: list[dict]) -> dict[str, list[str | None]]:
        """task id -> its state in each run (None: no task instance there)."""
        per_run = [self.states.get(r["id"], {}) for r in runs]
        return {task: [m.get(task) for m in per_run] for task in self.tasks}


def _brief_runs(conn: Connection, dag_id: str, *, overridden: bool, limit: int | None = None,
                since: dt.datetime | None = None, before: dt.datetime | None = None) -> list[dict]:
    """A DAG's runs other than test runs, either the live ones or the overridden ones (from `since` on,
    before `before`), the latest `limit` by logical date, oldest first, with the few fields the pages show.
    Read newest first through the (dag_id, logical_date, id) index: the rows shown, not the history."""
    run = dag_run_t.c
    stmt = (select(run.id, run.run_id, run.logical_date, run.run_type, run.state, run.backfill_id,
                   run.previous_run_id, run.start_date, run.end_date)
            .where(run.dag_id == dag_id, ~run.is_test))
    stmt = stmt.where(run.state == RunState.OVERRIDDEN) if overridden else stmt.where(run.state != RunState.OVERRIDDEN)
    if since is not None:
        stmt = stmt.where(run.logical_date >= since)
    if before is not None:
        stmt = stmt.where(run.logical_date < before)
    stmt = stmt.order_by(run.logical_date.desc(), run.id.desc())
    if limit:
        stmt = stmt.limit(limit)
    rows = conn.execute(stmt).all()
    return [{"id": r.id, "run_id": r.run_id, "logical_date": isoformat(r.logical_date), "run_type": r.run_type,
             "state": r.state, "backfill_id": r.backfill_id, "previous_run_id": r.previous_run_id,
             "start_date": isoformat(r.start_date), "end_date": isoformat(r.end_date),
             "_ld": r.logical_date} for r in reversed(rows)]


@dataclasses.dataclass(frozen=True)
class Window:
    """Where a page of runs sits on the timeline, for its links: `older` is the `before` of the page of
    older runs (None: none are older), `newer` whether newer runs exist than those shown. A page's URL
    names its window by `before` (a logical date), so it shows the same runs whenever it is opened."""

    older: str | None
    newer: bool


def window(conn: Connection, dag_id: str, runs: list[dict], before: dt.datetime | None) -> Window:
    """The window of `runs` (oldest first, as `_brief_runs` returns them) asked with `before`."""
    run = dag_run_t.c
    older = None
    if runs:
        earlier = conn.execute(select(run.id).where(run.dag_id == dag_id, ~run.is_test,
                                                    run.state != RunState.OVERRIDDEN,
                                                    run.logical_date < runs[0]["_ld"]).limit(1)).first()
        older = runs[0]["logical_date"] if earlier else None
    newer = before is not None and conn.execute(select(run.id).where(
        run.dag_id == dag_id, ~run.is_test, run.state != RunState.OVERRIDDEN,
        run.logical_date >= before).limit(1)).first() is not None
    return Window(older, newer)


def recent_runs(conn: Connection, dag_id: str, limit: int) -> list[dict]:
    """The latest live runs, newest first, and the overridden ones among them (for choosing a run)."""
    live = _brief_runs(conn, dag_id, overridden=False, limit=limit)
    replaced = _brief_runs(conn, dag_id, overridden=True, since=live[0]["_ld"]) if live else []
    return sorted(live + replaced, key=lambda r: (r["_ld"], r["state"] != RunState.OVERRIDDEN, r["id"]), reverse=True)


def grid(conn: Connection, dag_id: str, dag, limit: int, before: dt.datetime | None = None) -> Grid:
    """The latest `limit` live runs (before the logical date `before`, if given) as columns and the DAG's
    tasks as rows; overridden runs of the same range apart from them."""
    runs = _brief_runs(conn, dag_id, overridden=False, limit=limit, before=before)
    since = runs[0]["_ld"] if runs else None
    replaced = _brief_runs(conn, dag_id, overridden=True, since=since, before=before, limit=limit) if runs else []
    states = grid_states(conn, [r["id"] for r in runs + replaced])
    order = list(dag.tasks) if dag is not None else []
    extra = sorted({t for m in states.values() for t in m} - set(order))
    return Grid(order + extra, runs, replaced, states)


def grid_states(conn: Connection, run_pks: list[int]) -> dict[int, dict[str, str]]:
    """run id -> task id -> state, read as one row per run (`task:state,...` aggregated by the
    database: task ids hold no ':' nor ','), so 20,000 task instances cost 1,000 rows, not 20,000."""
    pair = ti_t.c.task_id + ":" + ti_t.c.state
    if conn.dialect.name == "postgresql":
        joined = func.string_agg(pair, ",")
    else:
        joined = func.group_concat(pair, ",")
    states: dict[int, dict[str, str]] = {}
    for start in range(0, len(run_pks), 500):
        for run_pk, text in conn.execute(select(ti_t.c.dag_run_id, joined)
                                         .where(ti_t.c.dag_run_id.in_(run_pks[start:start + 500]))
                                         .group_by(ti_t.c.dag_run_id)):
            states[run_pk] = dict(item.split(":", 1) for item in text.split(","))
    return states


def timeline(conn: Connection, dag_id: str, limit: int, before: dt.datetime | None = None) -> list[dict]:
    """The DAG's timeline, newest first: its latest `limit` live runs (before the logical date `before`,
    if given) each with its `previous` run, and under each the runs it replaced (overridden by a
    backfill) at the same logical date."""
    live = _brief_runs(conn, dag_id, overridden=False, limit=limit, before=before)
    since = live[0]["_ld"] if live else None
    replaced = _brief_runs(conn, dag_id, overridden=True, since=since, before=before) if live else []
    names = {r["id"]: r for r in live}
    missing = {r["previous_run_id"] for r in live if r["previous_run_id"] and r["previous_run_id"] not in names}
    if missing:
        for r in conn.execute(select(dag_run_t.c.id, dag_run_t.c.run_id, dag_run_t.c.logical_date)
                              .where(dag_run_t.c.id.in_(missing))):
            names[r.id] = {"id": r.id, "run_id": r.run_id, "logical_date": isoformat(r.logical_date)}
    by_date: dict[str, list[dict]] = {}
    for r in replaced:
        by_date.setdefault(r["logical_date"], []).append(r)
    out = []
    for r in reversed(live):
        previous = names.get(r["previous_run_id"]) if r["previous_run_id"] else None
        out.append({**r, "previous": previous, "replaced": by_date.get(r["logical_date"], [])})
    return out


def tries(conn: Connection, run_pk: int, tasks: list[dict], *, now: dt.datetime) -> list[dict]:
    """Every try of every task instance of a run, from the event log: when it was queued, started and
    ended, and how (`running` while it has not ended). Sorted by start."""
    found: dict[tuple[str, int], dict] = {}
    events = conn.execute(select(event_t.c.task_id, event_t.c.try_number, event_t.c.to_state, event_t.c.at,
                                 event_t.c.detail)
                          .where(event_t.c.entity == "task_instance", event_t.c.dag_run_id == run_pk)
                          .order_by(event_t.c.id))
    for ev in events:
        if not ev.try_number:
            continue
        key = (ev.task_id, ev.try_number)
        one = found.setdefault(key, {"task_id": ev.task_id, "try_number": ev.try_number, "queued_at": None,
                                     "start": None, "end": None, "state": TIState.QUEUED, "detail": None})
        if ev.to_state == TIState.QUEUED and one["queued_at"] is None:
            one["queued_at"] = ev.at
        elif ev.to_state == TIState.RUNNING:
            one["start"] = one["start"] or ev.at
            one["state"] = TIState.RUNNING
        elif ev.to_state in TRY_ENDS and one["end"] is None and (one["start"] or one["queued_at"]):
            one["end"] = ev.at
            one["state"] = ev.to_state
            one["detail"] = ev.detail
    current = {t["task_id"]: t for t in tasks}
    out = []
    for one in found.values():
        ti = current.get(one["task_id"])
        if ti and ti["try_number"] == one["try_number"] and one["end"] is None and ti["state"] in TIState.FINISHED:
            one["state"] = ti["state"]  # an end recorded without its own event (older rows)
        one["duration_s"] = (round(((one["end"] or now) - one["start"]).total_seconds(), 3)
                             if one["start"] else None)
        out.append(one)
    far = dt.datetime.max.replace(tzinfo=dt.UTC)
    out.sort(key=lambda t: (t["start"] or t["queued_at"] or far, t["task_id"], t["try_number"]))
    return out


def durations(conn: Connection, dag_id: str, task_id: str, limit: int = 200) -> dict:
    """A task's durations across the DAG's latest live runs (its latest try in each), and their median.
    A try that started and ended at the same instant (run under a frozen clock, `--now`) is not measured:
    its duration is None, and it counts for no median."""
    run = dag_run_t.c
    rows = conn.execute(
        select(run.id, run.run_id, run.logical_date, run.data_interval_start, run.data_interval_end, ti_t.c.state,
               ti_t.c.try_number, ti_t.c.start_date, ti_t.c.end_date)
        .join(ti_t, ti_t.c.dag_run_id == run.id)
        .where(run.dag_id == dag_id, ti_t.c.task_id == task_id, run.state != RunState.OVERRIDDEN, ~run.is_test)
        .order_by(run.logical_date.desc(), run.id.desc()).limit(limit)).all()
    points = []
    for r in reversed(rows):
        seconds = (r.end_date - r.start_date).total_seconds() if r.start_date and r.end_date else None
        points.append({"run_pk": r.id, "run_id": r.run_id, "logical_date": isoformat(r.logical_date),
                       "data_interval_start": isoformat(r.data_interval_start),
                       "data_interval_end": isoformat(r.data_interval_end),
                       "state": r.state, "try_number": r.try_number, "duration_s": seconds or None})
    known = [p["duration_s"] for p in points if p["duration_s"] is not None]
    return {"points": points, "median_s": statistics.median(known) if known else None,
            "max_s": max(known) if known else None}


def backfills(conn: Connection) -> list[dict]:
    """Backfills, newest first, each with its task instances per state (the progress bar) and its DAG's key."""
    rows = list(reversed(read_models.list_backfills(conn)))
    for b in rows:
        b["dag_id"] = dag_key(b)
        b["tasks"] = read_models.backfill_task_counts(conn, b["id"])
        done = b["succeeded"] + b["failed"]
        b["percent"] = round(100 * done / b["total"]) if b["total"] else 100
    return rows


def signal_log(conn: Connection, limit: int = 100, *, namespaces=None, **filters) -> tuple[list[dict], bool]:
    """One page of the signal log, newest first (`signals.signal_page_rows`: `filters` are its key and
    source prefixes, `internal` and `before`), each signal with its actions; every action names its run's
    numeric id. With `namespaces`, only the signals sent in them. Returns (signals, whether older
    ones match)."""
    from dagline.store.signals import signal_page_rows

    signals, more = signal_page_rows(conn, limit=limit, namespaces=namespaces, **filters)
    from dagline.domain.names import qualify

    keys = {(qualify(a["namespace"], a["dag_id"]), a["run_id"]) for s in signals for a in s["actions"]}
    pks = {k: r.id for k, r in read_models.runs_by_run_id(conn, sorted(keys)).items()} if keys else {}
    for s in signals:
        for a in s["actions"]:
            a["run_pk"] = pks.get((qualify(a["namespace"], a["dag_id"]), a["run_id"]))
    return signals, more


def starting_signal(conn: Connection, run_pk: int, task_id: str):
    """The `signal` row that started the latest try of a run's task instance (its `signal_seq`), else the
    one that created the run (a `trigger` signal action), or None: the signal a rendered job's templates see."""
    seq = conn.execute(select(ti_t.c.signal_seq).where(ti_t.c.dag_run_id == run_pk, ti_t.c.task_id == task_id)).scalar()
    if seq is None:
        seq = conn.execute(select(signal_action_t.c.signal_seq).where(
            signal_action_t.c.dag_run_id == run_pk, signal_action_t.c.task_id == "",
            signal_action_t.c.action == SignalAction.TRIGGER).limit(1)).scalar()
    if seq is None:
        return None
    return conn.execute(select(signal_t).where(signal_t.c.seq == seq)).first()


def task_instance_states(conn: Connection, run_pk: int) -> list:
    """A run's task instances as (task_id, state) rows, by task id (what stopping the run would touch)."""
    return conn.execute(select(ti_t.c.task_id, ti_t.c.state).where(ti_t.c.dag_run_id == run_pk)
                        .order_by(ti_t.c.task_id)).all()

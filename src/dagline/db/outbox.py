"""Writing callbacks into the outbox, in the transaction of the state change that fires them.

`transitions.record_events` calls `enqueue_for_events` with the event rows of every state change (so
no path that changes a state can skip it), and the deadline phase calls `enqueue_deadline_misses`;
each adds one `callback_outbox` row per callback of the run's DAG version that listens to the event,
with a fresh delivery id and the finished JSON body. A state change that rolls back takes its outbox
rows with it; one that commits cannot lose them. Delivery is someone else's job
(`dagline.scheduler.deliveries`), outside any transaction.

What a DAG version asks for never changes (versions are immutable), nor do a run's logical date and
DAG version, so both are cached per process and database (ids are only unique within one database):
a state change of a DAG without callbacks costs one small query the first time this process sees its
run, and nothing after that.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Connection

from dagline.db.models import callback_outbox_t, dag_run_t, dag_version_t
from dagline.domain import names
from dagline.domain.callbacks import CallbackEvent, CallbackSpec, event_of_state, listening, payload
from dagline.domain.states import OutboxState
from dagline.spec import DagSpec

_CACHE_LIMIT = 50_000


@dataclasses.dataclass(frozen=True)
class VersionCallbacks:
    run: tuple[CallbackSpec, ...]
    tasks: dict[str, tuple[CallbackSpec, ...]]

    @property
    def any(self) -> bool:
        return bool(self.run) or any(self.tasks.values())


@dataclasses.dataclass(frozen=True)
class RunFacts:
    dag_id: str
    run_id: str
    run_type: str
    logical_date: dt.datetime
    data_interval_start: dt.datetime
    data_interval_end: dt.datetime
    dag_version_id: int
    is_test: bool  # a run of `dagline dags test`: rehearsals tell nobody


_versions: dict[tuple[str, int], VersionCallbacks] = {}  # (database, dag_version id) ->
_runs: dict[tuple[str, int], RunFacts] = {}  # (database, dag_run id) ->
_lock = threading.Lock()


def version_callbacks(spec_json: dict[str, Any]) -> VersionCallbacks:
    """The callbacks a stored spec asks for: the DAG's (run events) and each task's (its own, else the
    defaults')."""
    if not spec_json.get("callbacks") and not spec_json.get("defaults", {}).get("callbacks") and not any(
            task.get("callbacks") for task in spec_json.get("tasks", [])):
        return VersionCallbacks((), {})
    spec = DagSpec.model_validate(spec_json)
    return VersionCallbacks(
        run=tuple(spec.callbacks),
        tasks={task.id: tuple(spec.defaults.callbacks if task.callbacks is None else task.callbacks)
               for task in spec.tasks})


def _database(conn: Connection) -> str:
    return conn.engine.url.render_as_string(hide_password=True)


def _facts(conn: Connection, run_ids: Iterable[int]) -> dict[int, RunFacts]:
    wanted = set(run_ids)
    db = _database(conn)
    with _lock:
        found = {i: _runs[(db, i)] for i in wanted if (db, i) in _runs}
    missing = wanted - found.keys()
    if missing:
        rows = conn.execute(select(
            dag_run_t.c.id, dag_run_t.c.dag_id, dag_run_t.c.run_id, dag_run_t.c.run_type, dag_run_t.c.logical_date,
            dag_run_t.c.data_interval_start, dag_run_t.c.data_interval_end, dag_run_t.c.dag_version_id,
            dag_run_t.c.is_test,
        ).where(dag_run_t.c.id.in_(missing))).all()
        fresh = {r.id: RunFacts(r.dag_id, r.run_id, r.run_type, r.logical_date, r.data_interval_start,
                                r.data_interval_end, r.dag_version_id, bool(r.is_test)) for r in rows}
        versions = {f.dag_version_id for f in fresh.values()}
        with _lock:
            versions = {v for v in versions if (db, v) not in _versions}
        new_versions = {}
        if versions:
            for row in conn.execute(select(dag_version_t.c.id, dag_version_t.c.spec)
                                    .where(dag_version_t.c.id.in_(versions))):
                new_versions[(db, row.id)] = version_callbacks(row.spec)
        with _lock:
            if len(_runs) > _CACHE_LIMIT:
                _runs.clear()
            _runs.update({(db, i): f for i, f in fresh.items()})
            _versions.update(new_versions)
        found.update(fresh)
    return found


def _callbacks_of(db: str, facts: RunFacts) -> VersionCallbacks:
    with _lock:
        return _versions[(db, facts.dag_version_id)]


_ENTITY_KIND = {"dag_run": "run", "task_instance": "task"}


def enqueue_for_events(conn: Connection, events: Sequence[Mapping[str, Any]]) -> int:
    """Outbox rows for the state changes these `event` rows record (`transitions.record_events` calls
    it for every event it writes, so no path that changes state can skip it): a run or task instance
    entering a state that is a callback event (`callbacks.event_of_state`). Returns how many rows."""
    wanted = []
    for ev in events:
        kind = _ENTITY_KIND.get(ev.get("entity"))
        event = event_of_state(kind, ev.get("to_state")) if kind else None
        if event is not None and ev.get("dag_run_id") is not None:
            wanted.append(_Change(kind, event, ev["dag_run_id"], ev.get("task_id"), ev.get("try_number"),
                                  ev["to_state"], ev["at"], ev.get("detail"), None))
    return _enqueue(conn, wanted) if wanted else 0


def enqueue_deadline_misses(conn: Connection, kind: str, rows: Sequence[Any], *, at: dt.datetime) -> int:
    """Outbox rows for runs (`kind` "run": rows have `id`) or task instances ("task": rows have
    `dag_run_id`, `task_id`, `try_number`) whose deadline was just found missed; rows also have `state`
    and `deadline_at`."""
    if not rows:
        return 0
    return _enqueue(conn, [
        _Change(kind, CallbackEvent.DEADLINE_MISS, row.id if kind == "run" else row.dag_run_id,
                None if kind == "run" else row.task_id, None if kind == "run" else row.try_number,
                row.state, at, None, row.deadline_at)
        for row in rows])


@dataclasses.dataclass(frozen=True)
class _Change:
    kind: str  # run | task
    event: CallbackEvent
    dag_run_id: int
    task_id: str | None
    try_number: int | None
    state: str
    at: dt.datetime
    message: str | None
    deadline: dt.datetime | None


def _enqueue(conn: Connection, changes: Sequence[_Change]) -> int:
    facts = _facts(conn, [change.dag_run_id for change in changes])
    db = _database(conn)
    outbox = []
    for change in changes:
        run = facts.get(change.dag_run_id)
        if run is None or run.is_test:
            continue
        wanted = _callbacks_of(db, run)
        if not wanted.any:
            continue
        callbacks = wanted.run if change.kind == "run" else wanted.tasks.get(change.task_id, ())
        for callback in listening(list(callbacks), change.event):
            delivery_id = str(uuid.uuid4())
            body = payload(
                delivery_id=delivery_id, event=change.event, kind=change.kind, dag_id=names.name_of(run.dag_id),
                namespace=names.namespace_of(run.dag_id), run_id=run.run_id,
                run_type=run.run_type, state=change.state, occurred_at=change.at, logical_date=run.logical_date,
                data_interval_start=run.data_interval_start, data_interval_end=run.data_interval_end,
                task_id=change.task_id if change.kind == "task" else None,
                try_number=change.try_number if change.kind == "task" else None,
                deadline=change.deadline, message=change.message)
            outbox.append({
                "delivery_id": delivery_id, "channel": callback.channel, "event": change.event.value,
                "dag_id": run.dag_id, "dag_run_id": change.dag_run_id, "task_id": body["task_id"],
                "target": callback.target(), "payload": body, "state": OutboxState.PENDING, "attempts": 0,
                "next_attempt_at": change.at, "created_at": change.at,
            })
    if outbox:
        conn.execute(insert(callback_outbox_t), outbox)
    return len(outbox)


# -- settling attempts (the deliverer, after sending outside any transaction) -------------------------

def settle_delivered(conn: Connection, outbox_id: int, *, at: dt.datetime) -> bool:
    """Mark a callback delivered (whichever attempt got through: a newer attempt still in flight
    elsewhere may deliver it once more, with the same delivery id). False if it was settled already."""
    box = callback_outbox_t.c
    done = conn.execute(update(callback_outbox_t).where(box.id == outbox_id, box.state == OutboxState.PENDING)
                        .values(state=OutboxState.DELIVERED, delivered_at=at, last_error=None)).rowcount
    return bool(done)


def settle_failed(conn: Connection, outbox_id: int, *, attempt: int, error: str,
                  retry_at: dt.datetime | None) -> bool:
    """Record a failed attempt: due again at `retry_at`, or `failed` for good when it is None. Only
    the latest attempt settles a failure (a late outcome of an expired lease changes nothing)."""
    box = callback_outbox_t.c
    values: dict[str, Any] = {"last_error": error[:2000]}
    if retry_at is None:
        values["state"] = OutboxState.FAILED
    else:
        values["next_attempt_at"] = retry_at
    done = conn.execute(update(callback_outbox_t).where(box.id == outbox_id, box.state == OutboxState.PENDING,
                                                        box.attempts == attempt).values(**values)).rowcount
    return bool(done)


def list_deliveries(conn: Connection, *, dag_run_id: int | None = None, state: str | None = None,
                    limit: int | None = None, dag_ids: Iterable[str] | None = None) -> list[Any]:
    """Outbox rows, oldest first (with `limit`, the newest `limit` of them); with `dag_ids`, only theirs."""
    stmt = select(callback_outbox_t)
    if dag_ids is not None:
        stmt = stmt.where(callback_outbox_t.c.dag_id.in_(list(dag_ids)))
    stmt = stmt.order_by(callback_outbox_t.c.id.desc() if limit else callback_outbox_t.c.id)
    if limit:
        stmt = stmt.limit(limit)
    if dag_run_id is not None:
        stmt = stmt.where(callback_outbox_t.c.dag_run_id == dag_run_id)
    if state is not None:
        stmt = stmt.where(callback_outbox_t.c.state == state)
    rows = conn.execute(stmt).all()
    return rows[::-1] if limit else rows


def prune(conn: Connection, *, before: dt.datetime) -> int:
    """Delete settled rows (delivered or failed) created before `before`; pending ones are kept."""
    box = callback_outbox_t.c
    return conn.execute(callback_outbox_t.delete().where(box.state.in_((OutboxState.DELIVERED, OutboxState.FAILED)),
                                                         box.created_at < before)).rowcount


def redeliver(conn: Connection, delivery_ids: Sequence[str], *, now: dt.datetime) -> list[str]:
    """Make failed (or delivered) callbacks due again at once, with fresh attempts and the same delivery
    id; returns the ids changed (pending ones are left as they are)."""
    box = callback_outbox_t.c
    rows = conn.execute(update(callback_outbox_t)
                        .where(box.delivery_id.in_(list(delivery_ids)),
                               box.state.in_((OutboxState.FAILED, OutboxState.DELIVERED)))
                        .values(state=OutboxState.PENDING, attempts=0, next_attempt_at=now, delivered_at=None)
                        .returning(box.delivery_id)).scalars().all()
    return list(rows)

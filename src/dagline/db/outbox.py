"""Writing callbacks into the outbox, in the transaction of the state change that fires them.

`transitions.change_tis` / `change_runs` call `enqueue_state_changes` for every row they changed, and
the deadline phase calls `enqueue_deadline_misses`; each adds one `callback_outbox` row per callback
of the run's DAG version that listens to the event, with a fresh delivery id and the finished JSON
body. A state change that rolls back takes its outbox rows with it; one that commits cannot lose
them. Delivery is someone else's job (`dagline.scheduler.deliveries`), outside any transaction.

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
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Connection

from dagline.callbacks import CallbackEvent, CallbackSpec, event_of_state, listening, payload
from dagline.db.models import callback_outbox_t, dag_run_t, dag_version_t
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
        ).where(dag_run_t.c.id.in_(missing))).all()
        fresh = {r.id: RunFacts(r.dag_id, r.run_id, r.run_type, r.logical_date, r.data_interval_start,
                                r.data_interval_end, r.dag_version_id) for r in rows}
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


def enqueue_state_changes(conn: Connection, kind: str, rows: Sequence[Any], *, to: str, at: dt.datetime,
                          detail: str | None = None) -> int:
    """Outbox rows for runs (`kind` "run": rows have `id`) or task instances ("task": rows have
    `dag_run_id`, `task_id`, `try_number`) that just entered `to`. Returns how many were written."""
    event = event_of_state(kind, to)
    if event is None or not rows:
        return 0
    return _enqueue(conn, kind, event, rows, at=at, state_of=lambda row: to, message=detail)


def enqueue_deadline_misses(conn: Connection, kind: str, rows: Sequence[Any], *, at: dt.datetime) -> int:
    """Outbox rows for runs or task instances whose deadline was just found missed (rows have `state`
    and `deadline_at` besides the fields `enqueue_state_changes` reads)."""
    if not rows:
        return 0
    return _enqueue(conn, kind, CallbackEvent.DEADLINE_MISS, rows, at=at, state_of=lambda row: row.state,
                    message=None)


def _enqueue(conn, kind: str, event: CallbackEvent, rows, *, at, state_of, message) -> int:
    facts = _facts(conn, [row.id if kind == "run" else row.dag_run_id for row in rows])
    db = _database(conn)
    outbox = []
    for row in rows:
        run = facts.get(row.id if kind == "run" else row.dag_run_id)
        if run is None:
            continue
        wanted = _callbacks_of(db, run)
        if not wanted.any:
            continue
        callbacks = wanted.run if kind == "run" else wanted.tasks.get(row.task_id, ())
        for callback in listening(list(callbacks), event):
            delivery_id = str(uuid.uuid4())
            body = payload(
                delivery_id=delivery_id, event=event, kind=kind, dag_id=run.dag_id, run_id=run.run_id,
                run_type=run.run_type, state=state_of(row), occurred_at=at, logical_date=run.logical_date,
                data_interval_start=run.data_interval_start, data_interval_end=run.data_interval_end,
                task_id=None if kind == "run" else row.task_id,
                try_number=None if kind == "run" else row.try_number,
                deadline=getattr(row, "deadline_at", None) if event == CallbackEvent.DEADLINE_MISS else None,
                message=message)
            outbox.append({
                "delivery_id": delivery_id, "channel": callback.channel, "event": event.value,
                "dag_id": run.dag_id, "dag_run_id": row.id if kind == "run" else row.dag_run_id,
                "task_id": body["task_id"], "target": callback.target(), "payload": body, "state": "pending",
                "attempts": 0, "next_attempt_at": at, "created_at": at,
            })
    if outbox:
        conn.execute(insert(callback_outbox_t), outbox)
    return len(outbox)


# -- settling attempts (the deliverer, after sending outside any transaction) -------------------------

def settle_delivered(conn: Connection, outbox_id: int, *, at: dt.datetime) -> bool:
    """Mark a callback delivered (whichever attempt got through: a newer attempt still in flight
    elsewhere may deliver it once more, with the same delivery id). False if it was settled already."""
    box = callback_outbox_t.c
    done = conn.execute(update(callback_outbox_t).where(box.id == outbox_id, box.state == "pending")
                        .values(state="delivered", delivered_at=at, last_error=None)).rowcount
    return bool(done)


def settle_failed(conn: Connection, outbox_id: int, *, attempt: int, error: str,
                  retry_at: dt.datetime | None) -> bool:
    """Record a failed attempt: due again at `retry_at`, or `failed` for good when it is None. Only
    the latest attempt settles a failure (a late outcome of an expired lease changes nothing)."""
    box = callback_outbox_t.c
    values: dict[str, Any] = {"last_error": error[:2000]}
    if retry_at is None:
        values["state"] = "failed"
    else:
        values["next_attempt_at"] = retry_at
    done = conn.execute(update(callback_outbox_t).where(box.id == outbox_id, box.state == "pending",
                                                        box.attempts == attempt).values(**values)).rowcount
    return bool(done)


def list_deliveries(conn: Connection, *, dag_run_id: int | None = None, state: str | None = None,
                    limit: int | None = None) -> list[Any]:
    """Outbox rows, oldest first (with `limit`, the newest `limit` of them)."""
    stmt = select(callback_outbox_t).order_by(callback_outbox_t.c.id.desc() if limit else callback_outbox_t.c.id)
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
    return conn.execute(callback_outbox_t.delete().where(box.state.in_(("delivered", "failed")),
                                                         box.created_at < before)).rowcount


def redeliver(conn: Connection, delivery_ids: Sequence[str], *, now: dt.datetime) -> list[str]:
    """Make failed (or delivered) callbacks due again at once, with fresh attempts and the same delivery
    id; returns the ids changed (pending ones are left as they are)."""
    box = callback_outbox_t.c
    rows = conn.execute(update(callback_outbox_t)
                        .where(box.delivery_id.in_(list(delivery_ids)), box.state.in_(("failed", "delivered")))
                        .values(state="pending", attempts=0, next_attempt_at=now, delivered_at=None)
                        .returning(box.delivery_id)).scalars().all()
    return list(rows)

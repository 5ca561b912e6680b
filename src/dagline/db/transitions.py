"""Every state change of a run or task instance: a compare-and-set plus its row in the `event` log.

`UPDATE ... WHERE id IN (...) AND state = <expected> RETURNING ...` changes only the rows still in the
expected state, so two replicas acting on the same row cannot both win, and replaying a report is a
no-op. The rows actually changed are what gets an event; callers learn which ids they won.
The callbacks a change fires are written to the outbox in the same transaction (`outbox`).
A transaction that records events also announces them (`notify.announce`: one NOTIFY per
transaction on PostgreSQL, delivered at commit), so idle replicas wake at once.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import case, insert, literal, select, tuple_, update
from sqlalchemy.engine import Connection

from dagline import metrics
from dagline.db import decisions
from dagline.db.models import dag_run_t, event_t, ti_t
from dagline.db.notify import announce
from dagline.db.outbox import enqueue_state_changes
from dagline.db.observe import at_commit
from dagline.deps import next_state_after_failure
from dagline.states import RunState, TIState


def record_events(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    """Append events (one executemany) and announce them; each row has at least at, who, entity."""
    if rows:
        conn.execute(insert(event_t), [dict(row) for row in rows])
        announce(conn, rows[0]["who"])
        decisions.note(conn, rows)


def change_tis(
    conn: Connection,
    ids: Iterable[int],
    *,
    expected: str,
    to: str,
    at: dt.datetime,
    who: str,
    values: Mapping[str, Any] | None = None,
    detail: str | None = None,
    tries: Mapping[int, int] | None = None,
) -> list[Any]:
    """Move task instances from `expected` to `to`; returns the changed rows (id, dag_id, dag_run_id,
    task_id, try_number, pool, pool_slots). `values` may hold column values or SQL expressions.
    With `tries` (ti id -> try number), a row changes only while it is still on that try: executor
    reports are per try, and a report about an old try must not touch the next one."""

    def match(chunk):
        if tries is None:
            return ti_t.c.id.in_(chunk)
        return tuple_(ti_t.c.id, ti_t.c.try_number).in_([(i, tries[i]) for i in chunk])

    changed = _compare_and_set(
        conn, ti_t, list(ids), match, expected, to, values,
        (ti_t.c.id, ti_t.c.dag_id, ti_t.c.dag_run_id, ti_t.c.task_id, ti_t.c.try_number, ti_t.c.pool,
         ti_t.c.pool_slots))
    record_events(conn, [
        {"at": at, "who": who, "entity": "task_instance", "dag_id": r.dag_id, "dag_run_id": r.dag_run_id,
         "ti_id": r.id, "task_id": r.task_id, "try_number": r.try_number, "from_state": expected,
         "to_state": to, "detail": detail}
        for r in changed
    ])
    enqueue_state_changes(conn, "task", changed, to=to, at=at, detail=detail)
    if changed:
        at_commit(conn, functools.partial(metrics.TI_TRANSITIONS.labels(state=to).inc, len(changed)))
    return changed


def change_runs(
    conn: Connection,
    ids: Iterable[int],
    *,
    expected: str,
    to: str,
    at: dt.datetime,
    who: str,
    values: Mapping[str, Any] | None = None,
    detail: str | None = None,
) -> list[Any]:
    """Move runs from `expected` to `to`; returns the changed rows (id, dag_id, run_type, backfill_id)."""
    changed = _compare_and_set(
        conn, dag_run_t, list(ids), dag_run_t.c.id.in_, expected, to, values,
        (dag_run_t.c.id, dag_run_t.c.dag_id, dag_run_t.c.run_type, dag_run_t.c.backfill_id))
    record_events(conn, [
        {"at": at, "who": who, "entity": "dag_run", "dag_id": r.dag_id, "dag_run_id": r.id,
         "from_state": expected, "to_state": to, "detail": detail}
        for r in changed
    ])
    enqueue_state_changes(conn, "run", changed, to=to, at=at, detail=detail)
    if changed and to in RunState.FINISHED:
        at_commit(conn, functools.partial(metrics.RUNS_FINISHED.labels(state=to).inc, len(changed)))
    return changed


def _compare_and_set(conn, table, ids: list[int], match, expected: str, to: str, values, returning) -> list[Any]:
    """`UPDATE table SET state = to ... WHERE <match> AND state = expected RETURNING ...`, in chunks;
    the changed rows come back in the order of `ids` (RETURNING has none), so events follow the
    order of the decision (priority, run order)."""
    changed: list[Any] = []
    for chunk in _chunks(ids, 500):
        stmt = (update(table).where(match(chunk), table.c.state == expected)
                .values(state=to, **dict(values or {})).returning(*returning))
        changed.extend(conn.execute(stmt).all())
    position = {pk: i for i, pk in enumerate(ids)}
    return sorted(changed, key=lambda row: position[row.id])


def per_id(column_type, values: Mapping[int, Any], id_column=ti_t.c.id):
    """A CASE expression giving each row (by id) its own value in one UPDATE."""
    return case({key: literal(value, column_type) for key, value in values.items()}, value=id_column)


def _chunks(items: list, size: int):
    for start in range(0, len(items), size):
        yield items[start:start + size]


def fail_running_tries(conn: Connection, rows: Sequence[Any], *, at: dt.datetime, who: str, detail: str) -> list[Any]:
    """End running tries that failed without a report (timed out, zombies): each becomes `up_for_retry`
    (retry at once) or `failed` per its tries left. `rows` have id, try_number and max_tries; a row
    changes only while it is still running that try. Returns the changed rows, as `change_tis`."""
    by_outcome: dict[str, list[Any]] = {}
    for row in rows:
        by_outcome.setdefault(next_state_after_failure(row.try_number, row.max_tries), []).append(row)
    changed = []
    for to, group in sorted(by_outcome.items()):
        values = {"end_date": at, "next_retry_at": at} if to == TIState.UP_FOR_RETRY else {"end_date": at}
        changed += change_tis(conn, [r.id for r in group], expected=TIState.RUNNING, to=to, at=at, who=who,
                              tries={r.id: r.try_number for r in group}, values=values, detail=detail)
    return changed


def fail_queued_runs(conn: Connection, run_ids: list[int], *, now: dt.datetime, who: str, detail: str) -> list:
    """Cancel runs that have not started: each still `queued` becomes `failed`, its task instances that
    never ran `skipped` (so `dependsOnPast` of later runs is not blocked by them). A run that started
    meanwhile is left to finish. Returns the runs changed."""
    cancelled = change_runs(conn, run_ids, expected=RunState.QUEUED, to=RunState.FAILED, at=now, who=who,
                            values={"end_date": now}, detail=detail)
    ti_ids = list(conn.execute(select(ti_t.c.id).where(
        ti_t.c.dag_run_id.in_([r.id for r in cancelled]), ti_t.c.state == TIState.NONE)).scalars())
    change_tis(conn, ti_ids, expected=TIState.NONE, to=TIState.SKIPPED, at=now, who=who, detail=detail)
    return cancelled

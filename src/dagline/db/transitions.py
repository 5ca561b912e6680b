"""Every state change of a run or task instance: a compare-and-set plus its row in the `event` log.

`UPDATE ... WHERE id IN (...) AND state = <expected> RETURNING ...` changes only the rows still in the
expected state, so two replicas acting on the same row cannot both win, and replaying a report is a
no-op. The rows actually changed are what gets an event; callers learn which ids they won.
The callbacks a change fires are written to the outbox in the same transaction (`outbox`).
A task instance entering a state in `signal_keys.TASK_SIGNAL_STATES` also sends dagline's own signal
`dagline.task.<dag_id>.<task_id>.<state>` in the same transaction (`signal_log`).
A transaction that records events also announces them (`notify.announce`: one NOTIFY per
transaction on PostgreSQL, delivered at commit), so idle replicas wake at once (a transaction that
only created runs announces `runs`: the woken replicas only try to start them); except when all it
did was queue task instances (`queued`, the critical section): that makes no work for any other
replica (the queuing replica launches them), and on PostgreSQL every notifying commit waits for the
previous one's flush, so a chain's every hop would otherwise serialise all writers once more.
(`running` still announces: it is one of the states dagline sends a signal for, see `signal_log`.)
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import String, bindparam, case, literal, literal_column, select, text, tuple_, update
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ClauseElement

from dagline import metrics
from dagline.db import decisions
from dagline.db.bulk import insert_rows, plain
from dagline.db.models import dag_run_t, event_t, ti_t
from dagline.db.notify import RUNS_ONLY, announce
from dagline.db.observe import at_commit
from dagline.db.outbox import enqueue_for_events
from dagline.db.signal_log import record_task_state_signals
from dagline.domain.deps import next_state_after_failure
from dagline.domain.states import RunState, TIState

_QUIET = frozenset({TIState.QUEUED})  # task instance states no other replica acts on (and no signal's)


def record_events(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    """Append events (one executemany), announce them unless every one is a task instance becoming
    `queued`, log the decisions among them and write the callbacks they fire to the outbox; each row has
    at least at, who, entity."""
    if rows:
        insert_rows(conn, event_t, rows)
        if all(row["entity"] == "dag_run" and row.get("from_state") is None for row in rows):
            announce(conn, RUNS_ONLY)  # runs created (queued): a woken replica need only try to start them
        elif any(row["entity"] != "task_instance" or row.get("to_state") not in _QUIET for row in rows):
            announce(conn, rows[0]["who"])
        decisions.note(conn, rows)
        enqueue_for_events(conn, rows)


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
        return tuple_(ti_t.c.id, ti_t.c.try_number).in_([(i, tries[i]) for i in chunk])

    changed = _compare_and_set(
        conn, ti_t, list(ids), None if tries is None else match, expected, to, values,
        (ti_t.c.id, ti_t.c.dag_id, ti_t.c.dag_run_id, ti_t.c.task_id, ti_t.c.try_number, ti_t.c.pool,
         ti_t.c.pool_slots))
    record_events(conn, ti_events(changed, expected=expected, to=to, at=at, who=who, detail=detail))
    count_transitions(conn, to, len(changed))
    record_task_state_signals(conn, changed, to=to, at=at)
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
        conn, dag_run_t, list(ids), None, expected, to, values,
        (dag_run_t.c.id, dag_run_t.c.dag_id, dag_run_t.c.run_type, dag_run_t.c.backfill_id))
    record_events(conn, [
        {"at": at, "who": who, "entity": "dag_run", "dag_id": r.dag_id, "dag_run_id": r.id,
         "from_state": expected, "to_state": to, "detail": detail}
        for r in changed
    ])
    if changed and to in RunState.FINISHED:
        at_commit(conn, functools.partial(metrics.RUNS_FINISHED.labels(state=to).inc, len(changed)))
    return changed


def _compare_and_set(conn, table, ids: list[int], match, expected: str, to: str, values, returning) -> list[Any]:
    """`UPDATE table SET state = to ... WHERE <match> AND state = expected RETURNING ...`, in chunks;
    the changed rows come back in the order of `ids` (RETURNING has none), so events follow the
    order of the decision (priority, run order). `match` None: by id alone; then, unless a value is an
    SQL expression other than the shared ones (`NEXT_TRY`), the statement is built once per table,
    dialect and set of columns (`_prebuilt_compare_and_set`) and only its parameters change."""
    changed: list[Any] = []
    values = dict(values or {})
    postgresql = conn.dialect.name == "postgresql"
    prebuilt = _prebuilt_compare_and_set(table, postgresql, values, returning) if match is None else None
    if prebuilt is not None:
        stmt, bound = prebuilt
        params = {"expected": expected, "to": to, **{f"value_{name}": values[name] for name in bound}}
        for chunk in _chunks(ids, 500):
            changed.extend(conn.execute(stmt, {**params, "ids": chunk}).all())
    else:
        state = _state_column(table, postgresql)
        for chunk in _chunks(ids, 500):
            where = table.c.id.in_(chunk) if match is None else match(chunk)
            stmt = (update(table).where(where, state == expected)
                    .values(state=to, **values).returning(*returning))
            changed.extend(conn.execute(stmt).all())
    position = {pk: i for i, pk in enumerate(ids)}
    return sorted(changed, key=lambda row: position[row.id])


def _state_column(table, postgresql: bool):
    # SQLite would search the state index and check every row in `expected` against the ids (all the
    # `none` task instances of a large backfill, for a hundred ids): `+state` keeps it on the primary key
    return table.c.state if postgresql else literal_column(f"+{table.name}.state", String)


NEXT_TRY = ti_t.c.try_number + 1  # `values={"try_number": NEXT_TRY}`: the next try, in a prebuilt statement
_SHARED_EXPRESSIONS = (NEXT_TRY,)
_PREBUILT_CAS: dict[tuple, tuple[Any, tuple[str, ...]]] = {}  # (table, dialect, columns) -> (statement, bound)


def _prebuilt_compare_and_set(table, postgresql: bool, values: Mapping[str, Any], returning):
    """The compare-and-set by id of `table` setting these columns, with bind parameters (`ids`
    expanding, `expected`, `to`, `value_<column>`), built at its first use and kept (callers set a
    few fixed sets of columns); None when a value is an SQL expression not in `_SHARED_EXPRESSIONS`."""
    shapes = []
    for name, value in sorted(values.items()):
        if isinstance(value, ClauseElement):
            shared = next((n for n, e in enumerate(_SHARED_EXPRESSIONS) if value is e), None)
            if shared is None:
                return None
            shapes.append((name, shared))
        else:
            shapes.append((name, None))
    key = (table.name, postgresql, tuple(shapes), tuple(column.key for column in returning))
    prebuilt = _PREBUILT_CAS.get(key)
    if prebuilt is None:
        sets = {name: bindparam(f"value_{name}", type_=table.c[name].type) if shared is None
                else _SHARED_EXPRESSIONS[shared] for name, shared in shapes}
        stmt = (update(table)
                .where(table.c.id.in_(bindparam("ids", expanding=True)),
                       _state_column(table, postgresql) == bindparam("expected", type_=table.c.state.type))
                .values(state=bindparam("to", type_=table.c.state.type), **sets).returning(*returning))
        prebuilt = _PREBUILT_CAS[key] = (stmt, tuple(name for name, shared in shapes if shared is None))
    return prebuilt


def change_tries_each(
    conn: Connection,
    tries: Mapping[int, int],
    row_values: Mapping[int, Mapping[str, Any]],
    *,
    expected: str,
    to: str,
    values: Mapping[str, Any] | None = None,
) -> list[Any]:
    """`change_tis` for many tries at once, each with values of its own (executor reports: each try its
    start, end and job id), as ONE statement whose text depends only on the column names, so it is
    compiled once: PostgreSQL joins `json_to_recordset` of one JSON document, SQLite `json_each` of
    one. `tries` is ti id -> try number (a row changes only while on that try and in `expected`);
    `row_values[ti id]` the per-row columns (the same names for every row); `values` plain constants.
    Returns the changed rows as `change_tis` does, in the order of `tries`; records no events (the
    caller does, as one try may pass through two states in this one statement)."""
    ids = list(tries)
    if not ids:
        return []
    names = sorted(row_values[ids[0]])
    columns = [ti_t.c[name] for name in names]
    dialect = conn.dialect
    constants = dict(values or {})
    assignments = ["state = :to", *(f"{name} = v.{name}" for name in names),
                   *(f"{name} = :const_{name}" for name in constants)]
    returning = "RETURNING task_instance.id, task_instance.dag_id, task_instance.dag_run_id, " \
                "task_instance.task_id, task_instance.try_number, task_instance.pool, task_instance.pool_slots"
    params: dict[str, Any] = {"to": to, "expected": expected}
    if dialect.name == "postgresql":  # one JSON document: psycopg2 would adapt arrays element by element
        types = ", ".join(f"{name} {column.type.compile(dialect=dialect)}"
                          for name, column in zip(names, columns, strict=True))
        source = f"json_to_recordset(CAST(:document AS json)) AS v(id BIGINT, try_number INTEGER, {types})"
        params["document"] = json.dumps([{"id": i, "try_number": tries[i],
                                          **{name: plain(row_values[i][name]) for name in names}} for i in ids])
    else:  # SQLite: each value as the column type stores it, read back with json_extract
        processors = [column.type._cached_bind_processor(dialect) for column in columns]
        document = []
        for i in ids:
            row = [i, tries[i]]
            for name, process in zip(names, processors, strict=True):
                value = row_values[i][name]
                row.append(process(value) if process is not None and value is not None else value)
            document.append(row)
        picks = ", ".join(f"json_extract(value, '$[{n}]') AS {name}"
                          for n, name in enumerate(["id", "try_number", *names]))
        source = f"(SELECT {picks} FROM json_each(:document)) AS v"
        params["document"] = json.dumps(document)
    # On SQLite `+` keeps the state index out of the plan: searched by state, every queued TI would scan
    # the whole document (json_each has no index); by primary key, each row of the document finds its TI
    state = "task_instance.state" if dialect.name == "postgresql" else "+task_instance.state"
    statement = text(
        f"UPDATE task_instance SET {', '.join(assignments)} FROM {source} "
        f"WHERE task_instance.id = v.id AND task_instance.try_number = v.try_number "
        f"AND {state} = :expected {returning}")
    for name, value in constants.items():
        statement = statement.bindparams(bindparam(f"const_{name}", value, type_=ti_t.c[name].type))
    changed = conn.execute(statement, params).all()
    position = {pk: n for n, pk in enumerate(ids)}
    return sorted(changed, key=lambda row: position[row.id])


def ti_events(changed: Sequence[Any], *, expected: str, to: str, at: dt.datetime, who: str,
              detail: str | None = None) -> list[dict]:
    """The event rows of task instances that moved from `expected` to `to` (rows as `change_tis` returns)."""
    return [{"at": at, "who": who, "entity": "task_instance", "dag_id": r.dag_id, "dag_run_id": r.dag_run_id,
             "ti_id": r.id, "task_id": r.task_id, "try_number": r.try_number, "from_state": expected,
             "to_state": to, "detail": detail} for r in changed]


def count_transitions(conn: Connection, to: str, count: int) -> None:
    """Count `count` task instances entering `to` once the transaction commits."""
    if count:
        at_commit(conn, functools.partial(metrics.TI_TRANSITIONS.labels(state=to).inc, count))


def per_id(column_type, values: Mapping[int, Any], id_column=ti_t.c.id):
    """A CASE expression giving each row (by id) its own value in one UPDATE."""
    return case({key: literal(value, column_type) for key, value in values.items()}, value=id_column)


def _chunks(items: list, size: int):
    for start in range(0, len(items), size):
        yield items[start:start + size]


def fail_running_tries(conn: Connection, rows: Sequence[Any], *, at: dt.datetime, who: str, detail: str,
                       streaming: set[int] | frozenset[int] = frozenset()) -> list[Any]:
    """End running tries that failed without a report (timed out, zombies): each becomes `up_for_retry`
    (retry at once) or `failed` per its tries left. `rows` have id, try_number and max_tries; a row
    changes only while it is still running that try. A try that was asked to stop is not retried: it
    ends `success` if its task is streaming (`streaming`: their ids; the stop it was asked for has
    happened), else `failed`. Returns the changed rows, as `change_tis`."""
    asked = set()
    if rows:
        asked = set(conn.execute(select(ti_t.c.id).where(ti_t.c.id.in_([r.id for r in rows]),
                                                          ti_t.c.stop_requested_at.is_not(None))).scalars())
    by_outcome: dict[str, list[Any]] = {}
    for row in rows:
        if row.id in asked:
            to = TIState.SUCCESS if row.id in streaming else TIState.FAILED
        else:
            to = next_state_after_failure(row.try_number, row.max_tries)
        by_outcome.setdefault(to, []).append(row)
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


def request_stop(conn: Connection, ids: Sequence[int], *, at: dt.datetime, who: str, detail: str) -> list[Any]:
    """Ask the queued or running tries of these task instances to stop (`stop_requested_at`; the
    replica running each try sees it and stops the job, see `scheduler.stops`). A try already asked
    keeps its first request. Returns the rows asked now (id, dag_id, dag_run_id, task_id, try_number);
    each gets an event (entity `stop_request`, the state unchanged)."""
    if not ids:
        return []
    rows = conn.execute(
        update(ti_t).where(ti_t.c.id.in_(list(ids)), ti_t.c.state.in_(list(TIState.ACTIVE)),
                           ti_t.c.stop_requested_at.is_(None))
        .values(stop_requested_at=at)
        .returning(ti_t.c.id, ti_t.c.dag_id, ti_t.c.dag_run_id, ti_t.c.task_id, ti_t.c.try_number, ti_t.c.state)).all()
    if rows:
        announce(conn, who, urgent=True)  # the replica running the try may be a peer of the asker: wake it
    record_events(conn, [
        {"at": at, "who": who, "entity": "stop_request", "dag_id": r.dag_id, "dag_run_id": r.dag_run_id,
         "ti_id": r.id, "task_id": r.task_id, "try_number": r.try_number, "from_state": r.state,
         "to_state": r.state, "detail": detail}
        for r in rows
    ])
    return rows

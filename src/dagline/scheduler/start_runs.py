"""Loop step 2: start queued runs whose time has come, within `maxActiveRuns` of the DAG and of their
backfill. Scheduled and manual runs go first, so a large backfill never delays the present.

Set-based: for the batch of claimed DAGs, one query reads their current versions, one counts their
running runs and one reads their backfills (the facts of `dagline.store.facts`), one the first queued
runs of each (DAG, backfill) in start order, and one compare-and-set starts every chosen run: a hundred
DAGs cost the same handful of statements as one. A DAG whose current version cannot be read starts
nothing (see `isolation`).
"""

from __future__ import annotations

import collections
import datetime as dt

from sqlalchemy.engine import Connection

from dagline.db.claims import lock_dags_with_startable_runs
from dagline.db.transitions import change_runs
from dagline.domain.admission import max_active_runs_reason
from dagline.domain.states import RunState
from dagline.scheduler.isolation import describe, is_dags_fault, record_import_error
from dagline.store.dags import DagCache
from dagline.store.facts import current_version_ids, first_queued_runs, running_backfills, running_run_counts
from dagline.store.runs import newest_run_id


def start_queued_runs(
    conn: Connection, *, now: dt.datetime, dags: DagCache, who: str, limit: int, backfill_id: int | None = None,
    waited_since: dt.datetime | None = None,
) -> list[int]:
    """Start what may start; returns the ids of the runs started. With `waited_since`, only runs due and
    queued since then at the latest are started (see `replica.left_to_peer`)."""
    dag_ids = lock_dags_with_startable_runs(conn, now, limit, backfill_id, waited_since)
    if not dag_ids:
        return []
    max_active = _max_active_runs(conn, dag_ids, dags, now=now, who=who)
    if not max_active:
        return []
    dag_ids = [dag_id for dag_id in dag_ids if dag_id in max_active]
    running = running_run_counts(conn, dag_ids)  # the facts `dagline tasks list` explains waits with
    backfills = running_backfills(conn, dag_ids, backfill_id)
    queued = _first_queued(conn, dag_ids, now, max(max_active.values()), backfill_id, waited_since)
    chosen: list[int] = []
    for dag_id in dag_ids:
        limit_runs, counts = max_active[dag_id], running[dag_id]
        if max_active_runs_reason(sum(counts.values()), limit_runs) is not None:
            continue  # `dagline tasks list` gives the same reason
        room = limit_runs - sum(counts.values())
        picked: list[int] = []
        if backfill_id is None:
            picked += queued[(dag_id, None)].forward[:room]
        for bf in backfills[dag_id]:
            if bf.is_paused:
                continue
            free = room - len(picked)
            if bf.max_active_runs is not None:
                free = min(free, bf.max_active_runs - counts.get(bf.id, 0))
            if free <= 0:
                continue
            runs = queued[(dag_id, bf.id)]
            picked += (runs.backward if bf.run_backwards else runs.forward)[:free]
        chosen += picked
    if not chosen:
        return []
    return [row.id for row in change_runs(conn, chosen, expected=RunState.QUEUED, to=RunState.RUNNING, at=now,
                                          who=who, values={"start_date": now})]


def _max_active_runs(conn: Connection, dag_ids: list[str], dags: DagCache, *, now: dt.datetime,
                     who: str) -> dict[str, int]:
    """dag_id -> `maxActiveRuns` of its current version; a DAG whose version cannot be read is left out
    (its runs wait) after recording its import error."""
    current = current_version_ids(conn, dag_ids)
    dags.prefetch(conn, current.values())
    found = {}
    for dag_id in dag_ids:
        try:
            version_id = current.get(dag_id)
            dag = dags.get(conn, version_id) if version_id is not None else dags.current(conn, dag_id)[1]
            found[dag_id] = dag.spec.max_active_runs
        except Exception as exc:  # its runs wait; the other DAGs' start (see `isolation`)
            if not is_dags_fault(exc):
                raise
            record_import_error(conn, dag_id, describe(exc, "starting runs"), at=now, who=who)
    return found


class _Queued:
    """The first due queued runs of one (DAG, backfill): oldest first, and newest first (`runBackwards`)."""

    def __init__(self):
        self.forward: list[int] = []
        self.backward: list[int] = []


def _first_queued(conn: Connection, dag_ids: list[str], now: dt.datetime, cap: int,
                  only: int | None, waited_since: dt.datetime | None) -> dict[tuple[str, int | None], _Queued]:
    """Up to `cap` due queued runs per (DAG, backfill) in each direction of logical date (ties by id), in
    one query (window functions, on both databases). Test runs are never queued, so never met here."""
    rows = first_queued_runs(conn, dag_ids, now, cap, only, waited_since)
    found: dict[tuple[str, int | None], _Queued] = collections.defaultdict(_Queued)
    for row in sorted(rows, key=lambda r: r.oldest):
        if row.oldest <= cap:
            found[(row.dag_id, row.backfill_id)].forward.append(row.id)
    for row in sorted(rows, key=lambda r: r.newest):
        if row.newest <= cap:
            found[(row.dag_id, row.backfill_id)].backward.append(row.id)
    return found


def newest_run(conn: Connection) -> int:
    """The newest run id (a primary-key lookup): compared with what a start step saw, whether runs came
    since, from another writer, where nothing announces them (SQLite; see `phases.take_in`).
    Only new ones count: a run that was already waiting for a `maxActiveRuns` place does not."""
    return newest_run_id(conn)

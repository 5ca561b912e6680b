"""Loop step 5: apply the executor's reports to task instances (compare-and-set on state and try).

A report names (ti id, try number). `running` moves a queued TI to running; `success` and `failed`
finish it (through `running`, so the event log always shows the try ran). A failed try becomes
`up_for_retry` with its `next_retry_at`, or `failed` when it was the last try. Reports about an old
try, or a TI that someone else already moved on, change nothing.

A try that was asked to stop (`stop_requested_at`: `tasks stop`, `runs stop`, a stop or restart
signal) ends `success` if its task is streaming (stopping is how a streaming task ends), whatever
its exit code; a stopped batch try ends `failed` without a retry (someone chose to stop it).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence

from sqlalchemy.engine import Connection

from dagline.db.replicas import HOSTNAME
from dagline.db.signal_log import record_task_state_passages, record_task_state_signals
from dagline.db.transitions import change_tis, change_tries_each, count_transitions, record_events, ti_events
from dagline.domain.deps import next_state_after_failure, retry_delay
from dagline.domain.states import TIState
from dagline.executors.base import TaskReport
from dagline.scheduler.isolation import is_dags_fault
from dagline.store.dags import DagCache
from dagline.store.tries import reported_tries


def apply_reports(
    conn: Connection, reports: Sequence[TaskReport], *, dags: DagCache, who: str
) -> set[int]:
    """Apply reports; returns the ids of runs in which a TI finished or failed (for the mini-scheduler).

    A few statements for any number of reports: a final report about a try still `queued` (a quick job
    that ended between two syncs) moves it to its end in one compare-and-set, with both events."""
    if not reports:
        return set()
    rows = {
        row.id: row for row in reported_tries(conn, {r.ti_id for r in reports})
    }
    current = [r for r in reports if r.ti_id in rows and rows[r.ti_id].try_number == r.try_number]
    started = {r.ti_id: r for r in current if r.state == TIState.RUNNING}
    finished = {r.ti_id: r for r in current if r.state in (TIState.SUCCESS, TIState.FAILED)}
    stopped: set[int] = set()  # batch tries asked to stop: failed, no retry
    for ti_id, report in list(finished.items()):
        row = rows[ti_id]
        if row.stop_requested_at is None:
            continue
        if dags.get(conn, row.dag_version_id).tasks[row.task_id].streaming:
            finished[ti_id] = dataclasses.replace(report, state=TIState.SUCCESS, message="stopped")
        else:
            stopped.add(ti_id)
            finished[ti_id] = dataclasses.replace(report, state=TIState.FAILED, message="stopped on request")
    affected: set[int] = set()

    # queued -> success at once, for quick tries that succeeded (the events still show they ran)
    quick = {i: r for i, r in finished.items() if r.state == TIState.SUCCESS and rows[i].state == TIState.QUEUED}
    if quick:
        done = change_tries_each(
            conn, {i: r.try_number for i, r in quick.items()},
            {i: {"start_date": r.started_at or r.at, "end_date": r.at, "external_id": r.external_id}
             for i, r in quick.items()},
            expected=TIState.QUEUED, to=TIState.SUCCESS, values={"hostname": HOSTNAME})
        record_events(conn, ti_events(done, expected=TIState.QUEUED, to=TIState.RUNNING,
                                      at=min(r.at for r in quick.values()), who=who)
                      + ti_events(done, expected=TIState.RUNNING, to=TIState.SUCCESS,
                                  at=max(r.at for r in quick.values()), who=who))
        count_transitions(conn, TIState.RUNNING, len(done))
        count_transitions(conn, TIState.SUCCESS, len(done))
        record_task_state_passages(conn, done, [(TIState.RUNNING, min(r.at for r in quick.values())),
                                                (TIState.SUCCESS, max(r.at for r in quick.values()))])
        affected.update(row.dag_run_id for row in done)
        finished = {i: r for i, r in finished.items() if i not in quick}

    # queued -> running, for every other try that started (a final report implies it ran)
    starting = {**finished, **started}
    if starting:
        moved = change_tries_each(
            conn, {i: r.try_number for i, r in starting.items()},
            {i: {"start_date": r.started_at or r.at, "external_id": r.external_id} for i, r in starting.items()},
            expected=TIState.QUEUED, to=TIState.RUNNING, values={"hostname": HOSTNAME})
        record_events(conn, ti_events(moved, expected=TIState.QUEUED, to=TIState.RUNNING,
                                      at=min(r.at for r in starting.values()), who=who))
        count_transitions(conn, TIState.RUNNING, len(moved))
        record_task_state_signals(conn, moved, to=TIState.RUNNING, at=min(r.at for r in starting.values()))
    succeeded = {i: r for i, r in finished.items() if r.state == TIState.SUCCESS}
    if succeeded:
        tries = {i: r.try_number for i, r in succeeded.items()}
        done = change_tries_each(
            conn, tries, {i: {"end_date": r.at} for i, r in succeeded.items()},
            expected=TIState.RUNNING, to=TIState.SUCCESS)
        record_events(conn, ti_events(done, expected=TIState.RUNNING, to=TIState.SUCCESS,
                                      at=max(r.at for r in succeeded.values()), who=who))
        count_transitions(conn, TIState.SUCCESS, len(done))
        record_task_state_signals(conn, done, to=TIState.SUCCESS, at=max(r.at for r in succeeded.values()))
        affected.update(row.dag_run_id for row in done)
    for ti_id, report in finished.items():
        if report.state != TIState.FAILED:
            continue
        row = rows[ti_id]
        affected.update(_fail_try(conn, row, report, dags=dags, who=who, retry=ti_id not in stopped))
    return affected


def _fail_try(conn: Connection, row, report: TaskReport, *, dags: DagCache, who: str, retry: bool = True) -> set[int]:
    max_tries = row.max_tries
    to = next_state_after_failure(report.try_number, max_tries) if retry else TIState.FAILED
    values = {"end_date": report.at}
    if to == TIState.UP_FOR_RETRY:
        try:
            task = dags.get(conn, row.dag_version_id).tasks[row.task_id]
            delay = retry_delay(report.try_number, task.retry_delay.as_timedelta(), task.retry_exponential_backoff)
        except Exception as exc:  # its version cannot be read (see `isolation`): retry at once
            if not is_dags_fault(exc):
                raise
            delay = dt.timedelta(0)
        values["next_retry_at"] = report.at + delay
    detail = report.message or "failed"
    if to == TIState.UP_FOR_RETRY:
        detail += f"; retry {report.try_number + 1} of {max_tries} at {values['next_retry_at'].isoformat()}"
    changed = change_tis(conn, [row.id], expected=TIState.RUNNING, to=to, at=report.at, who=who,
                         tries={row.id: report.try_number}, values=values, detail=detail)
    return {r.dag_run_id for r in changed}


def fail_unlaunchable(conn: Connection, failures, *, at: dt.datetime, dags: DagCache, who: str) -> set[int]:
    """Fail queued tries that could not be launched (e.g. a template that does not render): no retry
    can help them, so they go straight to `failed`."""
    affected: set[int] = set()
    for queued, message in failures:
        changed = change_tis(conn, [queued.ti_id], expected=TIState.QUEUED, to=TIState.FAILED, at=at, who=who,
                             tries={queued.ti_id: queued.try_number}, values={"end_date": at, "start_date": at},
                             detail=message)
        affected.update(r.dag_run_id for r in changed)
    return affected

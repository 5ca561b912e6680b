"""Backfill objects: one backfill per object (its uid is the request id), progress derived from the database.

Handling an object creates its backfill at most once, however many replicas handle it and however
often (`backfill.create_backfill(request_id=<uid>)`). `spec.paused` pauses and resumes it; other spec
changes after creation are ignored (the plan was made once: create another Backfill to change it).
`dryRun: true` writes nothing: the status shows the plan (phase `Pending`), and setting it to false runs it.
A spec that cannot be run is `Invalid` (condition and Warning Event): bad dates or options for good;
an unknown, deleted or paused DAG until it is there (the status sync tries again). Deleting the object
cancels the backfill: its runs that have not started fail, running ones finish.
A Backfill object names its DAG by name within its own namespace: `spec.dag: etl` in namespace `a-team`
is the DAG `a-team/etl` (`dagline.domain.names.qualify`), so it cannot reach another namespace's DAG.

Phases: `Pending` (no run started yet), `Running`, `Paused`, `Succeeded`, `Failed` (a run failed),
`Cancelled`, `Invalid`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from dagline.db.engine import Database
from dagline.domain import names
from dagline.domain.states import BackfillState, RunState
from dagline.errors import InvalidInput, OperationFailed
from dagline.k8s import conditions
from dagline.k8s.conditions import Outcome
from dagline.spec import BackfillSpec, format_path
from dagline.store.backfills import (
    cancel_backfill,
    create_backfill,
    find_backfill,
    resolve_range,
    scoped_request_id,
    set_backfill_paused,
)
from dagline.store.dags import dag_timezone_and_activity
from dagline.store.read_models import backfill_run_counts

WAITING_FOR_DAG = "DagNotReady"   # a reason the status sync tries again
_CLI_FIELDS = {"--start": "spec.start", "--end": "spec.end", "--reprocess": "spec.reprocess",
               "--max-active-runs": "spec.maxActiveRuns", "--run-backwards": "spec.runBackwards"}


def ensure_backfill(db: Database, body: Mapping[str, Any], *, now: dt.datetime, who: str) -> Outcome:
    """Create the object's backfill if it does not exist yet, apply `spec.paused`, derive the status."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    uid, previous = meta["uid"], status.get("conditions")
    request = scoped_request_id(meta.get("namespace") or "default", uid)  # the object's uid, in its namespace
    with db.begin() as conn:
        row = find_backfill(conn, request)
    if row is not None:
        paused = bool((body.get("spec") or {}).get("paused"))
        if row.is_paused != paused:
            set_backfill_paused(db, row.id, paused, now=now, who=who)
        return _created(db, request, now=now, previous=previous)
    try:
        spec = BackfillSpec.model_validate(body.get("spec") or {})
    except ValidationError as exc:
        error = exc.errors()[0]
        return _invalid("Invalid", f"{format_path(['spec', *error['loc']])}: {error['msg']}", now, previous)
    namespace = meta.get("namespace") or names.DEFAULT_NAMESPACE
    key = names.qualify(namespace, spec.dag)  # the DAG of that name in this object's namespace, no other
    with db.begin() as conn:
        dag = dag_timezone_and_activity(conn, key, with_paused=True)
    if dag is None or not dag.is_active or dag.is_paused:
        why = "is not applied" if dag is None else "was deleted" if not dag.is_active else "is paused"
        return _invalid(WAITING_FOR_DAG, f"spec.dag: DAG {spec.dag!r} {why} in namespace {namespace!r}; the "
                        "backfill starts once it is "
                        f"{'unpaused' if dag is not None and dag.is_active else 'applied'}", now, previous)
    try:
        start, end = resolve_range(spec.start, spec.end, dag.timezone, start_field="spec.start", end_field="spec.end")
        result = create_backfill(
            db, key, start=start, end=end, now=now, reprocess=spec.reprocess,
            max_active_runs=spec.max_active_runs, run_backwards=spec.run_backwards, dry_run=spec.dry_run,
            request_id=None if spec.dry_run else uid, who=who, paused=spec.paused)
    except InvalidInput as exc:
        field = _CLI_FIELDS.get(exc.field or "", exc.field)
        return _invalid("Invalid", f"{field}: {exc.reason}" if field else exc.reason, now, previous)
    except OperationFailed as exc:  # the DAG was paused or deleted meanwhile
        return _invalid(WAITING_FOR_DAG, str(exc), now, previous)
    if spec.dry_run:
        plan = result.plan
        message = (f"dry run: {plan.count('create')} runs to create, {plan.count('replace')} to replace, "
                   f"{plan.count('keep_existing') + plan.count('keep_active')} kept, {plan.count('not_due')} not "
                   "due yet; nothing written (set dryRun: false to run it)")
        return Outcome({"backfillId": None, "phase": "Pending", "total": len(plan.to_run), "queued": 0, "running": 0,
                        "succeeded": 0, "failed": 0, "skippedExisting": plan.count("keep_existing")
                        + plan.count("keep_active"), "overridden": plan.count("replace"), "message": message,
                        "conditions": conditions.ready("DryRun", message, now=now, previous=previous)})
    return _created(db, request, now=now, previous=previous)


def _created(db: Database, request: str, *, now: dt.datetime, previous) -> Outcome:
    with db.begin() as conn:
        row = find_backfill(conn, request)
        fields = progress(row, backfill_run_counts(conn, [row.id]).get(row.id, {}))
    return Outcome({**fields, "conditions": conditions.ready("Created", f"backfill {row.id}", now=now,
                                                             previous=previous)})


def _invalid(reason: str, message: str, now: dt.datetime, previous) -> Outcome:
    return conditions.refused(reason, message, now=now, previous=previous, phase="Invalid", message=message)


def progress(row, runs_by_state: Mapping[str, int]) -> dict[str, Any]:
    """A created backfill's progress fields, from its row and its runs counted by state."""
    queued, running = runs_by_state.get(RunState.QUEUED, 0), runs_by_state.get(RunState.RUNNING, 0)
    succeeded, failed = runs_by_state.get(RunState.SUCCESS, 0), runs_by_state.get(RunState.FAILED, 0)
    if row.state == BackfillState.CANCELLED:
        phase, message = "Cancelled", f"cancelled: {failed} runs failed or not started, {succeeded} succeeded"
    elif row.state == BackfillState.COMPLETED:
        phase = "Failed" if failed else "Succeeded"
        message = (f"{failed} of {row.total} runs failed" if failed else
                   f"all {row.total} runs succeeded" if row.total else "nothing to run: every date has a run")
    elif row.is_paused:
        phase, message = "Paused", f"paused: {queued} runs wait, {running} running finish"
    else:
        phase = "Running" if running or succeeded or failed else "Pending"
        message = f"{succeeded + failed} of {row.total} runs done, {running} running, {queued} queued"
    return {"backfillId": row.id, "phase": phase, "total": row.total, "queued": queued, "running": running,
            "succeeded": succeeded, "failed": failed, "skippedExisting": row.skipped_existing,
            "overridden": row.overridden, "message": message}


def cancel_backfill_object(db: Database, body: Mapping[str, Any], *, now: dt.datetime, who: str) -> int:
    """The object was deleted: cancel its backfill (runs not started fail, running ones finish)."""
    with db.begin() as conn:
        meta = body.get("metadata") or {}
        row = find_backfill(conn, scoped_request_id(meta.get("namespace") or "default", meta["uid"]))
    return 0 if row is None else cancel_backfill(db, row.id, now=now, who=who)

"""DagRun objects: a user's DagRun is a manual trigger; dagline's own DagRuns mirror scheduled and backfill runs.

A DagRun a user creates (no `spec.runId`, no `dagline.io/managed-by` label) triggers one manual run of
`spec.dag` with `spec.conf`, at `spec.logicalDate` (read in the DAG's time zone) or, without one, at
the object's `creationTimestamp`. The run's id is `manual__<object uid>`, so the trigger is idempotent:
a second replica, or the same one after a restart, finds the run and writes nothing. A trigger that
cannot be done (unknown or deleted DAG, another run at that logical date) is reported in the object's
status and a Warning Event; an unknown DAG is tried again by the status sync, so a DAG and its DagRun
applied together work whatever the order. The spec is read once, at creation; deleting the object
leaves the run (the database keeps every run's history).

A DagRun object names its DAG by name within its own namespace: `spec.dag: etl` in namespace `a-team`
is the DAG `a-team/etl` (`dagline.domain.names.qualify`), so no object can reach another namespace's
DAG, and `spec.runId` names a run of that DAG only: another namespace's run of that id is not found.

Objects dagline creates for the other runs carry the managed-by label, `spec.runId`, and an owner
reference to their DAG object (deleting the DAG collects them). Their name is `<dag>-<hash of run id>`,
so two replicas creating one conflict (409) instead of duplicating it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from dagline.db.engine import Database
from dagline.domain import names
from dagline.errors import InvalidInput, OperationFailed
from dagline.k8s import conditions
from dagline.k8s.conditions import Outcome
from dagline.k8s.resources import API_VERSION, DAG, DAG_RUN, LABEL_DAG, LABEL_MANAGED, LABEL_RUN
from dagline.k8s.sparkapp import MANAGED_BY, label_value
from dagline.spec import DagRunSpec, format_path
from dagline.store.dags import dag_timezone_and_activity
from dagline.store.read_models import runs_by_run_id, task_counts, version_numbers
from dagline.store.runs import trigger_run
from dagline.times import isoformat, parse_instant

UNKNOWN_DAG = "UnknownDag"   # a reason the status sync tries again
_OBJECT_RUN_ID = re.compile(r"manual__[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")  # fullmatch
def object_run_id(uid: str) -> str:
    """The run id of the manual run a user's DagRun object triggers."""
    return f"manual__{uid}"


def is_object_run(run_id: str) -> bool:
    """Whether a run was triggered by a user's DagRun object (which then mirrors it itself)."""
    return bool(_OBJECT_RUN_ID.fullmatch(run_id))


def is_managed(body: Mapping[str, Any]) -> bool:
    return ((body.get("metadata") or {}).get("labels") or {}).get(LABEL_MANAGED) == MANAGED_BY


def namespace_of(body: Mapping[str, Any]) -> str:
    return (body.get("metadata") or {}).get("namespace") or names.DEFAULT_NAMESPACE


def run_of_object(body: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(DAG key, run_id) of the run an object shows: `spec.runId`, else the run its creation triggered;
    the DAG is `spec.dag` of the object's own namespace."""
    spec = body.get("spec") or {}
    run_id = spec.get("runId") or object_run_id((body.get("metadata") or {}).get("uid", ""))
    dag = spec.get("dag")
    return (names.qualify(namespace_of(body), dag) if isinstance(dag, str) and dag else None), run_id


def trigger_from_object(db: Database, body: Mapping[str, Any], *, now: dt.datetime, who: str) -> Outcome:
    """Trigger the manual run a user's DagRun object asks for (once), and derive its status."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    previous = status.get("conditions")
    try:
        spec = DagRunSpec.model_validate(body.get("spec") or {})
    except ValidationError as exc:
        error = exc.errors()[0]
        return _refused("Invalid", f"{format_path(['spec', *error['loc']])}: {error['msg']}", now, previous)
    namespace = namespace_of(body)
    key = names.qualify(namespace, spec.dag)  # the DAG of that name in this object's namespace, no other
    run_id = spec.run_id or object_run_id(meta["uid"])
    with db.begin() as conn:
        run = runs_by_run_id(conn, [(key, run_id)]).get((key, run_id))
        dag = dag_timezone_and_activity(conn, key)
    if spec.run_id:
        return Outcome()  # names an existing run: the status sync mirrors it
    if run is None:  # not triggered yet (a run, once triggered, is shown even if its DAG was deleted since)
        if dag is None or not dag.is_active:
            why = "is applied" if dag is None else "is active (it was deleted)"
            return _refused(UNKNOWN_DAG, f"spec.dag: no DAG {spec.dag!r} {why} in namespace {namespace!r}; the run "
                            "is triggered once it is", now, previous)
        try:
            when = parse_instant(spec.logical_date or meta.get("creationTimestamp") or now, dag.timezone)
        except ValueError as exc:
            return _refused("Invalid", f"spec.logicalDate: {exc}", now, previous)
        try:
            run = trigger_run(db, key, now=now, logical_date=when, conf=spec.conf, who=who, run_id=run_id)
        except (OperationFailed, InvalidInput) as exc:
            return _refused("Refused", f"not triggered: {exc}", now, previous)
    with db.begin() as conn:
        fields = run_status(run, version_numbers(conn, [run.dag_id]).get(run.dag_version_id),
                            task_counts(conn, [run.id]).get(run.id))
    return Outcome({**fields, "message": None,
                    "conditions": conditions.ready("Triggered", f"run {run.run_id}", now=now, previous=previous)})


def _refused(reason: str, message: str, now: dt.datetime, previous) -> Outcome:
    return conditions.refused(reason, message, now=now, previous=previous, message=message)


def run_status(run, version_number: int | None, counts: Mapping[str, int] | None) -> dict[str, Any]:
    """A DagRun object's status fields for a run row."""
    return {
        "id": run.id, "runId": run.run_id, "runType": run.run_type, "state": run.state,
        "logicalDate": isoformat(run.logical_date), "dataIntervalStart": isoformat(run.data_interval_start),
        "dataIntervalEnd": isoformat(run.data_interval_end), "dagVersion": version_number,
        "backfillId": run.backfill_id, "startDate": isoformat(run.start_date), "endDate": isoformat(run.end_date),
        "taskCounts": dict(sorted((counts or {}).items())),
    }


def mirror_name(dag_id: str, run_id: str) -> str:
    """The name of the DagRun object dagline keeps for a run of the DAG `dag_id` (its key), in the DAG's
    namespace: `<DAG name>-<hash of run id>`, deterministic, a valid DNS subdomain."""
    return f"{names.name_of(dag_id)}-{hashlib.sha256(run_id.encode()).hexdigest()[:10]}"


def mirror_manifest(dag_object: Mapping[str, Any], run) -> dict[str, Any]:
    """A DagRun object for a run, in its DAG object's namespace and owned by it (deleting the DAG collects it)."""
    meta = dag_object["metadata"]
    spec: dict[str, Any] = {"dag": names.name_of(run.dag_id), "runId": run.run_id,
                            "logicalDate": isoformat(run.logical_date)}
    if run.conf:
        spec["conf"] = run.conf
    return {
        "apiVersion": API_VERSION, "kind": DAG_RUN.kind,
        "metadata": {
            "name": mirror_name(run.dag_id, run.run_id), "namespace": meta["namespace"],
            "labels": {LABEL_MANAGED: MANAGED_BY, LABEL_DAG: label_value(names.name_of(run.dag_id)),
                       LABEL_RUN: label_value(run.run_id)},
            "ownerReferences": [{"apiVersion": API_VERSION, "kind": DAG.kind, "name": meta["name"],
                                 "uid": meta["uid"], "controller": True}],
        },
        "spec": spec,
    }

"""DAG objects: a DAG resource validated and applied as a DAG version, its status derived from the database.

The object's `metadata.name` is the dag_id and its `spec` the DAG spec, validated exactly as
`dagline dags apply` validates a file. A valid spec is applied (a new version only when the spec's hash
changed; `spec.paused` pauses or unpauses); an invalid one changes nothing in the database and gets
`Ready=False`/`Invalid=True` conditions naming the field, plus a Warning Event.

Namespaces: the database has one DAG namespace. The DAG row remembers the object that defines it as
its source (`k8s://<namespace>/<name>`); while that DAG is active, an object of the same name in
another namespace is refused (reason `NameTaken`, naming the owner's namespace). Once the owner is
deleted, the other object is applied at its next change or status sync.

Pools: a task may name a platform pool (shared) or a pool of this namespace's Pool objects; naming
another namespace's pool is refused (`PoolNotOwned`) with nothing written (docs/adr/0050).

Deleting the object deactivates the DAG (`dagstore.deactivate`): no new runs, queued runs cancelled,
running runs finish on their version.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy.engine import Connection

from dagline.db.engine import Database
from dagline.domain.spark_policy import DEFAULT_POLICY, SparkPolicy
from dagline.errors import InvalidInput
from dagline.k8s import conditions
from dagline.k8s.conditions import Outcome
from dagline.spec import Dag, LoadedDag, parse_dag_document
from dagline.spec.app_files import check_application_files
from dagline.spec.dag import deprecated_spellings
from dagline.store.dags import (
    K8S_SOURCE,
    apply_dags,
    dag_sources,
    dags_with_current_version,
    deactivate,
    source_namespace,  # noqa: F401 - the mirror reads it from here
)
from dagline.store.pools import pool_namespaces
from dagline.store.read_models import latest_runs, version_numbers
from dagline.times import isoformat

SOURCE_SCHEME = K8S_SOURCE
DERIVED_FIELDS = ("version", "versionHash", "active", "paused", "nextRun", "lastRunId", "lastRunState")


class NameTaken(InvalidInput):
    """A DAG object whose name another namespace's DAG object already defines: a conflict, 409."""

    http_status = 409


def object_source(namespace: str, name: str) -> str:
    """How a DAG row names the object that defines it."""
    return f"{SOURCE_SCHEME}{namespace}/{name}"



def foreign_pools(db: Database, dag: Dag, namespace: str) -> list[str]:
    """`pool (namespace)` of the pools the DAG's tasks name that another namespace owns."""
    with db.begin() as conn:
        owners = pool_namespaces(conn, sorted({t.pool for t in dag.tasks.values()}))
    return [f"{name} (namespace {owner!r})" for name, owner in sorted(owners.items())
            if owner is not None and owner != namespace]


def describe(exc: InvalidInput) -> str:
    """A validation error as a condition message: the field first, then what is wrong with it."""
    return f"{exc.field}: {exc.reason}" if exc.field else exc.reason


def apply_dag_object(db: Database, body: Mapping[str, Any], *, now: dt.datetime, who: str,
                     spark_policy: SparkPolicy = DEFAULT_POLICY) -> Outcome:
    """Validate (with the Spark policy the operator's settings allow) and apply a DAG object; the outcome
    is its whole status (with `observedGeneration`)."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    namespace, name = meta.get("namespace") or "default", meta.get("name")
    previous = status.get("conditions")
    source = object_source(namespace, name)
    document = {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "metadata": {"name": name},
                "spec": body.get("spec")}
    try:
        dag = Dag.from_document(parse_dag_document(document, source=f"{namespace}/{name}",
                                                         spark_policy=spark_policy))
        check_application_files(dag, dag_folder=None, source=f"{namespace}/{name}")  # URIs only (ADR 64)
    except InvalidInput as exc:
        outcome = _refused(db, namespace, name, "Invalid", describe(exc), now=now, previous=previous)
    else:
        outcome = None
        foreign = foreign_pools(db, dag, namespace)
        if foreign:
            outcome = _refused(db, namespace, name, "PoolNotOwned", f"spec.tasks: pool(s) {', '.join(foreign)} belong "
                               "to another namespace: a DAG may use the platform's pools and its own namespace's",
                               now=now, previous=previous)
    if outcome is None:
        def guard(row) -> None:
            owner = source_namespace(row.source_path) if row is not None and row.is_active else None
            if owner is not None and owner != namespace:
                raise NameTaken(f"DAG {name!r} is defined by the DAG object in namespace {owner!r}; dag ids are "
                                "global in the database: rename this one, or delete that one first",
                                field="metadata.name")
        try:
            [result] = apply_dags(db, [LoadedDag(dag, source)], now=now, who=who, guard=guard)
        except NameTaken as exc:
            outcome = _refused(db, namespace, name, "NameTaken", describe(exc), now=now, previous=previous)
        else:
            with db.begin() as conn:
                fields = status_fields(derived_statuses(conn, [name])[name])
            message = f"version {fields['version']} ({fields['versionHash']}): {result.action}"
            outcome = Outcome({**fields, "conditions": conditions.ready("Applied", message, now=now,
                                                                         previous=previous)})
            for warning in result.warnings:
                outcome.warn("PoolMissing", warning)
            for warning in deprecated_spellings(document):
                outcome.warn("DeprecatedField", warning)
    outcome.status["observedGeneration"] = meta.get("generation")
    return outcome


def _refused(db: Database, namespace: str, name: str, reason: str, message: str, *, now: dt.datetime,
             previous) -> Outcome:
    """Nothing written. An object that defines a stored DAG still shows what the database runs."""
    with db.begin() as conn:
        owner = sources(conn, [name]).get(name)
        stored = derived_statuses(conn, [name]).get(name) if owner == object_source(namespace, name) else None
    fields = status_fields(stored) if stored else dict.fromkeys(DERIVED_FIELDS)
    return conditions.refused(reason, message, now=now, previous=previous, **fields)


def status_fields(derived: Mapping[str, Any]) -> dict[str, Any]:
    """Only the fields a DAG object's status has."""
    return {key: derived.get(key) for key in DERIVED_FIELDS}


def delete_dag_object(db: Database, body: Mapping[str, Any], *, now: dt.datetime, who: str) -> int | None:
    """Deactivate the DAG this object defines; returns the runs cancelled, None if there was nothing
    to do (already inactive, or defined by another namespace's object or by a file)."""
    meta = body.get("metadata") or {}
    namespace, name = meta.get("namespace") or "default", meta.get("name")
    with db.begin() as conn:
        owner = sources(conn, [name]).get(name)
    if owner != object_source(namespace, name):
        return None
    return deactivate(db, name, now=now, who=who)


def sources(conn: Connection, dag_ids: Iterable[str]) -> dict[str, str | None]:
    """dag_id -> the object that defines the stored DAG (`k8s://<namespace>/<name>`), for stored DAGs."""
    return dag_sources(conn, dag_ids)


def derived_statuses(conn: Connection, dag_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The status fields the database decides, per stored DAG, plus `source` (the defining object)."""
    dag_ids = list(dag_ids)
    rows = dags_with_current_version(conn, dag_ids)
    numbers = version_numbers(conn, dag_ids)
    last = latest_runs(conn, dag_ids)
    result = {}
    for row in rows:
        run = last.get(row.dag_id)
        result[row.dag_id] = {
            "version": numbers.get(row.current_version_id), "versionHash": row.version, "active": row.is_active,
            "paused": row.is_paused,
            "nextRun": isoformat(row.next_dagrun_create_after or row.next_dagrun_data_interval_end)
            if row.is_active else None,
            "lastRunId": run.run_id if run else None, "lastRunState": run.state if run else None,
            "source": row.source_path,
        }
    return result

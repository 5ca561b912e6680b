"""DAG objects: a DAG resource validated and applied as a DAG version, its status derived from the database.

The object's spec is the DAG spec, validated exactly as `dagline dags apply` validates a file. A valid
spec is applied (a new version only when the spec's hash changed; `spec.paused` pauses or unpauses); an
invalid one changes nothing in the database and gets `Ready=False`/`Invalid=True` conditions naming the
field, plus a Warning Event.

Namespaces: a DAG object `etl` in namespace `a-team` is the DAG whose key is `a-team/etl`
(`dagline.domain.names.qualify`; `etl` in `default`). Names are per namespace: two namespaces' `etl`
objects are two DAGs, with separate rows, versions, runs, pools and Secrets; neither ever changes
the other. The row remembers the object defining it (`k8s://<namespace>/<name>`); in `default`, a DAG
applied from a file and an object of its name are one DAG (the last applied defines it).

Pools: a task's `pool: NAME` takes the platform's pool NAME if there is one, else this namespace's own
pool NAME (`dagline.domain.names.resolve_pool`): another namespace's pool is out of reach by construction.

Deleting the object deactivates its DAG, in its namespace only (`dagstore.deactivate`): no new runs,
queued runs cancelled, running runs finish on their version with their namespace's Secrets. Its rows
stay its namespace's (another namespace's object of that name is another DAG) until retention removes
them; applying the object again resumes that history.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy.engine import Connection

from dagline.db.engine import Database
from dagline.domain import names
from dagline.domain.spark_policy import DEFAULT_POLICY, SparkPolicy
from dagline.errors import InvalidInput
from dagline.k8s import conditions
from dagline.k8s.conditions import Outcome
from dagline.spec import Dag, LoadedDag, parse_dag_document
from dagline.spec.app_files import check_application_files
from dagline.spec.dag import deprecated_spellings
from dagline.store.dags import K8S_SOURCE, apply_dags, dag_sources, dags_with_current_version, deactivate
from dagline.store.read_models import latest_runs, version_numbers
from dagline.times import isoformat

SOURCE_SCHEME = K8S_SOURCE
DERIVED_FIELDS = ("version", "versionHash", "active", "paused", "nextRun", "lastRunId", "lastRunState")


def object_source(namespace: str, name: str) -> str:
    """How a DAG row names the object that defines it."""
    return f"{SOURCE_SCHEME}{namespace}/{name}"


def object_of(body: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of an object."""
    meta = body.get("metadata") or {}
    return meta.get("namespace") or names.DEFAULT_NAMESPACE, meta.get("name")


def dag_key(body: Mapping[str, Any]) -> str:
    """The key of the DAG a DAG object defines: its name qualified by its namespace."""
    return names.qualify(*object_of(body))


def describe(exc: InvalidInput) -> str:
    """A validation error as a condition message: the field first, then what is wrong with it."""
    return f"{exc.field}: {exc.reason}" if exc.field else exc.reason


def apply_dag_object(db: Database, body: Mapping[str, Any], *, now: dt.datetime, who: str,
                     spark_policy: SparkPolicy = DEFAULT_POLICY) -> Outcome:
    """Validate (with the Spark policy the operator's settings allow) and apply a DAG object as the DAG
    of its namespace; the outcome is its whole status (with `observedGeneration`)."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    namespace, name = object_of(body)
    key = names.qualify(namespace, name)
    previous = status.get("conditions")
    source = object_source(namespace, name)
    document = {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "metadata": {"name": name},
                "spec": body.get("spec")}
    try:
        dag = Dag.from_document(parse_dag_document(document, source=f"{namespace}/{name}",
                                                   spark_policy=spark_policy), namespace=namespace)
        check_application_files(dag, dag_folder=None, source=f"{namespace}/{name}")  # URIs only (ADR 64)
    except InvalidInput as exc:
        outcome = _refused(db, namespace, name, "Invalid", describe(exc), now=now, previous=previous)
    else:
        [result] = apply_dags(db, [LoadedDag(dag, source)], now=now, who=who)
        with db.begin() as conn:
            fields = status_fields(derived_statuses(conn, [key])[key])
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
    key = names.qualify(namespace, name)
    with db.begin() as conn:
        owner = sources(conn, [key]).get(key)
        stored = derived_statuses(conn, [key]).get(key) if owner == object_source(namespace, name) else None
    fields = status_fields(stored) if stored else dict.fromkeys(DERIVED_FIELDS)
    return conditions.refused(reason, message, now=now, previous=previous, **fields)


def status_fields(derived: Mapping[str, Any]) -> dict[str, Any]:
    """Only the fields a DAG object's status has."""
    return {key: derived.get(key) for key in DERIVED_FIELDS}


def delete_dag_object(db: Database, body: Mapping[str, Any], *, now: dt.datetime, who: str) -> int | None:
    """Deactivate the DAG of this object's namespace and name; returns the runs cancelled, None if there
    was nothing to do (already inactive, or defined last by a file in `default`). Nothing of another
    namespace's DAG of that name changes: it is another key."""
    namespace, name = object_of(body)
    key = names.qualify(namespace, name)
    with db.begin() as conn:
        owner = sources(conn, [key]).get(key)
    if owner != object_source(namespace, name):
        return None
    return deactivate(db, key, now=now, who=who)


def sources(conn: Connection, dag_ids: Iterable[str]) -> dict[str, str | None]:
    """DAG key -> the object that defines the stored DAG (`k8s://<namespace>/<name>`), for stored DAGs."""
    return dag_sources(conn, dag_ids)


def derived_statuses(conn: Connection, dag_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The status fields the database decides, per stored DAG (by key), plus `source` (the defining object)."""
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

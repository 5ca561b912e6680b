"""Stored DAGs: applying specs as versions, reading a version back as a `Dag`, pausing.

A DAG's spec is stored once per version (`dag_version`), and never changed; the `dag` row points at
the current one. Runs keep the version they were created with, so `DagCache` maps version ids to
immutable `Dag` objects and never needs invalidation.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import os
import threading
from collections.abc import Iterable

from sqlalchemy import bindparam, func, insert, select, text, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from dagline.db.bulk import insert_rows, json_document
from dagline.db.claims import lock_dag
from dagline.db.engine import Database
from dagline.db.models import backfill_t, dag_run_t, dag_t, dag_version_t, pool_t, signal_listener_t
from dagline.db.transitions import fail_queued_runs, record_events
from dagline.domain import names
from dagline.domain.deps import pool_too_small
from dagline.domain.signal_keys import listened_key, parse_task_state_key, split_rule_key
from dagline.domain.signal_rules import rule_name
from dagline.domain.states import BackfillState, RunState, SignalAction
from dagline.errors import NotFound, OperationFailed
from dagline.spec import Dag, LoadedDag


class DagCache:
    """Version id -> `Dag`, loaded on first use. Versions are immutable, so entries never go stale."""

    def __init__(self, maxsize: int = 1024):
        self._by_version: collections.OrderedDict[int, Dag] = collections.OrderedDict()
        self.maxsize = maxsize
        self._lock = threading.Lock()  # one cache may serve several threads (the operator's handlers)
        # Pure results derived from this database's versions, kept by their user (`scheduler.examine`
        # remembers run decisions by version id and TI ids, which only mean something in one database).
        self.decisions: dict = {}
        self.task_facts: dict = {}  # version id -> what a run decision needs of its tasks (`scheduler.examine`)

    def get(self, conn: Connection, version_id: int) -> Dag:
        with self._lock:
            dag = self._by_version.get(version_id)
            if dag is not None:
                self._by_version.move_to_end(version_id)
                return dag
        row = conn.execute(
            select(dag_version_t.c.dag_id, dag_version_t.c.spec, dag_version_t.c.version)
            .where(dag_version_t.c.id == version_id)
        ).one()
        return self._keep(version_id, Dag.from_spec_json(row.dag_id, row.spec, version=row.version))

    def cached(self, version_id: int) -> Dag | None:
        """The version if it is cached (no query), else None."""
        with self._lock:
            return self._by_version.get(version_id)

    def _keep(self, version_id: int, dag: Dag) -> Dag:
        with self._lock:
            self._by_version[version_id] = dag
            if len(self._by_version) > self.maxsize:
                self._by_version.popitem(last=False)
        return dag

    def get_many(self, conn: Connection, version_ids) -> dict[int, Dag]:
        """Several versions, the missing ones loaded in one query (a replica meeting 100 DAGs at once
        reads them in one round trip, not 100)."""
        wanted = set(version_ids)
        with self._lock:
            missing = sorted(v for v in wanted if v not in self._by_version)
        for start in range(0, len(missing), 500):
            for row in conn.execute(_versions_stmt(missing[start:start + 500])):
                self._keep(row.id, Dag.from_spec_json(row.dag_id, row.spec, version=row.version))
        found = {v: self.get(conn, v) for v in wanted}  # marks them recently used; trims the cache
        return found

    def prefetch(self, conn: Connection, version_ids) -> None:
        """Load the versions not cached yet in one query (a replica meeting 100 DAGs reads them in one
        round trip, not 100). A version that cannot be read is left out, never raised: the caller's
        `get` for that DAG meets the error where the DAG's isolation handles it (`scheduler.isolation`)."""
        with self._lock:
            missing = sorted({v for v in version_ids if v is not None} - self._by_version.keys())
        for start in range(0, len(missing), 500):
            for row in conn.execute(_versions_stmt(missing[start:start + 500])):
                try:
                    dag = Dag.from_spec_json(row.dag_id, row.spec, version=row.version)
                except Exception:  # noqa: BLE001 - `get` raises it again for this DAG alone
                    continue
                self._keep(row.id, dag)

    def warm(self, conn: Connection) -> int:
        """Load the current versions of the active, unpaused DAGs (at most `maxsize`), as a scheduler
        starting up would parse its DAG files: the first runs of each DAG then do not pay for it. How
        many versions the cache holds afterwards. What cannot be read is left out (see `prefetch`)."""
        versions = conn.execute(
            select(dag_t.c.current_version_id)
            .where(dag_t.c.is_active.is_(True), dag_t.c.is_paused.is_(False),
                   dag_t.c.current_version_id.is_not(None))
            .order_by(dag_t.c.dag_id).limit(self.maxsize)).scalars().all()
        self.prefetch(conn, versions)
        with self._lock:
            return len(self._by_version)

    def current(self, conn: Connection, dag_id: str) -> tuple[int, Dag]:
        version_id = conn.execute(select(dag_t.c.current_version_id).where(dag_t.c.dag_id == dag_id)).scalar_one()
        return version_id, self.get(conn, version_id)

    def current_many(self, conn: Connection, dag_ids) -> dict[str, Dag]:
        """The current version of several DAGs, in one query."""
        rows = conn.execute(
            select(dag_t.c.dag_id, dag_t.c.current_version_id).where(dag_t.c.dag_id.in_(list(dag_ids)))).all()
        versions = self.get_many(conn, [row.current_version_id for row in rows])
        return {row.dag_id: versions[row.current_version_id] for row in rows}


def _versions_stmt(version_ids):
    v = dag_version_t.c
    return select(v.id, v.dag_id, v.spec, v.version).where(v.id.in_(version_ids))


@dataclasses.dataclass
class ApplyResult:
    dag_id: str
    action: str  # created | updated | unchanged | reactivated
    version: str
    previous_version: str | None = None
    warnings: list[str] = dataclasses.field(default_factory=list)
    cleared_import_error: str | None = None  # the scheduler's import error this apply cleared


K8S_SOURCE = "k8s://"  # how a DAG row names the Kubernetes object defining it: k8s://<namespace>/<name>


def apply_dags(db: Database, loaded: list[LoadedDag], *, now: dt.datetime, who: str = "cli") -> list[ApplyResult]:
    """Upsert DAGs in one transaction: a new version only when the spec changed. Each DAG is its
    namespace's (its key carries it), so applying one never touches another namespace's."""
    from dagline.store.run_batches import (
        refresh_next_dagruns,  # the timeline builds on this module
    )

    results = []
    with db.begin() as conn:
        pools = dict(conn.execute(select(pool_t.c.name, pool_t.c.slots)).all())  # by key (store.pools)
        platform = frozenset(name for name in pools if "/" not in name)  # the platform's pools have bare keys
        events: list[dict] = []  # written together, as the next runs are planned together (issue 32)
        to_plan: list[Dag] = []
        created = _create_new_dags(conn, loaded, now=now, who=who, events=events)
        for item in loaded:
            dag = item.dag
            result = created.get(dag.dag_id) or _apply_one(conn, dag, item.source_path, now=now, who=who,
                                                           events=events)
            taken = {t.task_id: names.resolve_pool(dag.namespace, t.pool, platform) for t in dag.tasks.values()}
            missing = sorted({t.pool for t in dag.tasks.values() if taken[t.task_id] not in pools})
            if missing:
                how = ("`dagline pools set NAME SLOTS`" if dag.namespace == names.DEFAULT_NAMESPACE else
                       f"a Pool object in namespace {dag.namespace!r} (or `dagline pools set NAME SLOTS "
                       f"--namespace {dag.namespace}`)")
                result.warnings.append(
                    f"pool(s) {', '.join(missing)} do not exist yet: their tasks wait until {how} creates them"
                )
            for task in dag.tasks.values():
                too_small = pool_too_small(task.pool, task.pool_slots, pools.get(taken[task.task_id]))
                if too_small:
                    result.warnings.append(
                        f"task {task.task_id}: {too_small}: it never runs until "
                        f"`dagline pools set {task.pool} {task.pool_slots}"
                        + ("" if taken[task.task_id] == task.pool else f" --namespace {dag.namespace}")
                        + "` makes the pool large enough")
            if result.action != "unchanged" or result.cleared_import_error is not None:
                to_plan.append(dag)
            results.append(result)
        record_events(conn, events)
        for start in range(0, len(to_plan), 1000):
            refresh_next_dagruns(conn, to_plan[start:start + 1000], now=now)
        batch = {item.dag.dag_id: item.dag for item in loaded}
        for item, result in zip(loaded, results, strict=True):
            result.warnings += _unknown_task_signals(conn, item.dag, batch)
    return results


def _unknown_task_signals(conn: Connection, dag: Dag, batch: dict[str, Dag]) -> list[str]:
    """Warnings for rules on another DAG's task signals that no stored or applied DAG can send (that DAG
    may be applied later, so this is a warning, not an error)."""
    warnings = []
    keys = [t.signal for t in dag.spec.triggers] + [r.signal for task in dag.tasks.values() for r in task.on]
    for key in keys:
        namespace, bare = split_rule_key(key)
        target = parse_task_state_key(bare)
        other_key = target and names.qualify(namespace or dag.namespace, target[0])
        if target is None or other_key == dag.dag_id:
            continue
        other = batch.get(other_key)
        if other is None:
            version_id = conn.execute(select(dag_t.c.current_version_id).where(dag_t.c.dag_id == other_key)).scalar()
            other = DagCache().get(conn, version_id) if version_id is not None else None
        if other is None:
            warnings.append(f"{key!r}: no DAG {target[0]!r} is applied yet: nothing sends this signal until it is")
        elif target[1] not in other.tasks:
            warnings.append(f"{key!r}: DAG {target[0]!r} has no task {target[1]!r}: nothing sends this signal")
    return warnings


def _create_new_dags(conn: Connection, loaded: list[LoadedDag], *, now: dt.datetime, who: str,
                     events: list[dict]) -> dict[str, ApplyResult]:
    """Store the DAGs of `loaded` that have no row yet, a thousand at a time, set-based: one INSERT of
    their rows, one of their versions, one of their signal listeners, one UPDATE naming the versions
    (issue 32: `dags apply` of 10,000 new files). A batch that meets a row created meanwhile (another
    writer) is rolled back to its savepoint and left to `_apply_one`, DAG by DAG. Their events go to
    `events`. Returns the results by DAG id."""
    results: dict[str, ApplyResult] = {}
    for start in range(0, len(loaded), 1000):
        chunk = loaded[start:start + 1000]
        ids = [item.dag.dag_id for item in chunk]
        if len(set(ids)) != len(ids):
            continue  # one DAG twice: DAG by DAG, as before
        known = set(conn.execute(select(dag_t.c.dag_id).where(dag_t.c.dag_id.in_(ids))).scalars())
        new = [item for item in chunk if item.dag.dag_id not in known]
        if not new:
            continue
        try:
            with conn.begin_nested():
                insert_rows(conn, dag_t, [
                    {"dag_id": item.dag.dag_id, "is_paused": item.dag.spec.paused, "is_active": True,
                     "schedule": item.dag.spec.schedule, "timezone": item.dag.timezone,
                     "source_path": item.source_path, "namespace": item.dag.namespace,
                     "created_at": now, "updated_at": now} for item in new])
                versions = dict((row.dag_id, row.id) for row in insert_rows(conn, dag_version_t, [
                    {"dag_id": item.dag.dag_id, "version": item.dag.version, "spec": item.dag.spec_json,
                     "source_dir": local_folder(item.source_path), "created_at": now} for item in new],
                    returning=("id", "dag_id")))
                insert_rows(conn, signal_listener_t, [
                    row for item in new for row in signal_listeners(item.dag, versions[item.dag.dag_id])])
                _set_current_versions(conn, versions)
        except IntegrityError:
            continue  # created meanwhile by another writer: DAG by DAG, which waits for its row
        for item in new:
            events.append({"at": now, "who": who, "entity": "dag", "dag_id": item.dag.dag_id, "from_state": None,
                           "to_state": item.dag.version, "detail": "created"})
            results[item.dag.dag_id] = ApplyResult(item.dag.dag_id, "created", item.dag.version, None)
    return results


def _set_current_versions(conn: Connection, versions: dict[str, int]) -> None:
    """`current_version_id` of several DAGs: one UPDATE (PostgreSQL) or an executemany (SQLite)."""
    if conn.dialect.name != "postgresql":
        conn.execute(update(dag_t).where(dag_t.c.dag_id == bindparam("b_dag_id"))
                     .values(current_version_id=bindparam("b_version")),
                     [{"b_dag_id": dag_id, "b_version": version} for dag_id, version in versions.items()])
        return
    conn.execute(text("""
        UPDATE dag SET current_version_id = x.b_version
        FROM json_to_recordset(CAST(:rows AS json)) AS x(b_dag_id text, b_version bigint)
        WHERE dag.dag_id = x.b_dag_id"""),
                 {"rows": json_document([{"b_dag_id": d, "b_version": v} for d, v in versions.items()])})


def _apply_one(conn: Connection, dag: Dag, source_path: str, *, now: dt.datetime, who: str,
               events: list[dict] | None = None) -> ApplyResult:
    """Store one DAG (its row locked); its event is added to `events` for the caller to write (none given:
    written here)."""
    row = lock_dag(conn, dag.dag_id)
    if row is None:
        try:
            with conn.begin_nested():
                conn.execute(insert(dag_t).values(
                    dag_id=dag.dag_id, is_paused=dag.spec.paused, is_active=True, schedule=dag.spec.schedule,
                    timezone=dag.timezone, source_path=source_path, namespace=dag.namespace,
                    created_at=now, updated_at=now,
                ))
        except IntegrityError:
            # Another writer (a second operator replica handling the same object) created it meanwhile:
            # its insert has committed, so the row can now be locked and this apply is an update.
            row = lock_dag(conn, dag.dag_id)
            if row is None:
                raise
    version_row = conn.execute(
        select(dag_version_t.c.id).where(dag_version_t.c.dag_id == dag.dag_id, dag_version_t.c.version == dag.version)
    ).first()
    if row is None:
        previous = None
        action = "created"
    else:
        previous = conn.execute(
            select(dag_version_t.c.version, dag_version_t.c.spec).where(dag_version_t.c.id == row.current_version_id)
        ).first()
        if previous is not None and previous.version == dag.version and row.is_active:
            result = ApplyResult(dag.dag_id, "unchanged", dag.version, previous.version)
            if row.import_error is not None:  # applied again: the scheduler tries it again
                conn.execute(update(dag_t).where(dag_t.c.dag_id == dag.dag_id)
                             .values(import_error=None, import_error_at=None, updated_at=now))
                result.cleared_import_error = row.import_error
            return result
        action = "updated" if row.is_active else "reactivated"
    if version_row is None:
        version_id = conn.execute(insert(dag_version_t).values(
            dag_id=dag.dag_id, version=dag.version, spec=dag.spec_json,
            source_dir=local_folder(source_path), created_at=now,
        ).returning(dag_version_t.c.id)).scalar_one()
        listeners = signal_listeners(dag, version_id)
        if listeners:
            conn.execute(insert(signal_listener_t), listeners)
    else:
        version_id = version_row.id
    values = dict(current_version_id=version_id, is_active=True, schedule=dag.spec.schedule,
                  timezone=dag.timezone, source_path=source_path, namespace=dag.namespace,
                  updated_at=now, import_error=None, import_error_at=None)
    said_paused = "paused" in dag.spec.model_fields_set  # the default (paused) is for a DAG's first apply only
    if previous is not None and said_paused and previous.spec.get("paused") != dag.spec.paused:
        values["is_paused"] = dag.spec.paused  # the spec's `paused` changed: it wins over the CLI's
    conn.execute(update(dag_t).where(dag_t.c.dag_id == dag.dag_id).values(**values))
    event = {"at": now, "who": who, "entity": "dag", "dag_id": dag.dag_id,
             "from_state": previous.version if previous else None, "to_state": dag.version, "detail": action}
    if events is None:
        record_events(conn, [event])
    else:
        events.append(event)
    result = ApplyResult(dag.dag_id, action, dag.version, previous.version if previous else None)
    if row is not None and row.import_error is not None:
        result.cleared_import_error = row.import_error
    return result


def signal_listeners(dag: Dag, version_id: int) -> list[dict]:
    """The `signal_listener` rows of a DAG version: its triggers and its tasks' `on` rules."""
    rows = [dict(dag_version_id=version_id, dag_id=dag.dag_id, key=listened_key(dag.namespace, t.signal),
                 rule=rule_name(None, i), task_id="", action=SignalAction.TRIGGER, handling="each", scope="dag")
            for i, t in enumerate(dag.spec.triggers)]
    for task in dag.tasks.values():
        rows += [dict(dag_version_id=version_id, dag_id=dag.dag_id, key=listened_key(dag.namespace, r.signal),
                      rule=rule_name(task.task_id, i),
                      task_id=task.task_id, action=r.action, handling=r.handling, scope=r.scope)
                 for i, r in enumerate(task.on)]
    return rows


def local_folder(source_path: str) -> str | None:
    """The folder relative `mainApplicationFile`s are read from: the DAG file's; none for a source that
    is a URI (a Kubernetes object, `k8s://namespace/name`)."""
    if "://" in source_path:
        return None
    return os.path.dirname(os.path.abspath(source_path))


def require_dag(conn: Connection, dag_id: str, *, active: bool = True):
    """The DAG row, or a clear error naming the DAG."""
    row = conn.execute(select(dag_t).where(dag_t.c.dag_id == dag_id)).first()
    if row is None:
        namespace, name = names.split(dag_id)
        known = conn.execute(select(func.count()).select_from(dag_t)).scalar_one()
        hint = (" (no DAGs applied yet: `dagline dags apply PATH`)" if not known
                else f" (see `dagline dags list --namespace {namespace}`)")
        raise NotFound(f"unknown DAG {name!r} in namespace {namespace!r}{hint}")
    if active and not row.is_active:
        raise OperationFailed(f"DAG {dag_id!r} was deleted (inactive); apply its spec again to restore it")
    return row


def versions_of(conn: Connection, dag_id: str) -> list:
    """Every stored version of a DAG, oldest first: its `dag_version` rows (version, spec, source
    folder, creation time), as `dags show` lists them."""
    return conn.execute(
        select(dag_version_t).where(dag_version_t.c.dag_id == dag_id).order_by(dag_version_t.c.id)).all()


def version_source_dir(conn: Connection, version_id: int) -> str | None:
    """The folder a DAG version's spec was applied from (a try's working folder: see `local_folder`),
    None for a spec that came from a Kubernetes object."""
    return conn.execute(select(dag_version_t.c.source_dir).where(dag_version_t.c.id == version_id)).scalar()


def timezone_of(conn: Connection, dag_id: str) -> str | None:
    """A DAG's time zone, None for a DAG never stored."""
    return conn.execute(select(dag_t.c.timezone).where(dag_t.c.dag_id == dag_id)).scalar()


def timezones_of(conn: Connection, dag_ids: list[str]) -> dict[str, str]:
    """dag_id -> time zone of each of these DAGs that is stored."""
    return dict(conn.execute(select(dag_t.c.dag_id, dag_t.c.timezone).where(dag_t.c.dag_id.in_(dag_ids))).all())


def set_paused(db: Database, dag_id: str, paused: bool, *, now: dt.datetime, who: str = "cli") -> bool:
    """Pause or unpause; returns whether anything changed."""
    from dagline.store.timeline import refresh_next_dagrun

    cache = DagCache()
    with db.begin() as conn:
        row = require_dag(conn, dag_id)
        if row.is_paused == paused:
            return False
        conn.execute(update(dag_t).where(dag_t.c.dag_id == dag_id).values(is_paused=paused, updated_at=now))
        record_events(conn, [{"at": now, "who": who, "entity": "dag", "dag_id": dag_id,
                              "from_state": "paused" if row.is_paused else "active",
                              "to_state": "paused" if paused else "active"}])
        _, dag = cache.current(conn, dag_id)
        refresh_next_dagrun(conn, dag_id, dag, now=now)
    return True


def deactivate(db: Database, dag_id: str, *, now: dt.datetime, who: str = "cli") -> int | None:
    """Mark a DAG deleted, as deleting a Kubernetes object is expected to: nothing new starts, what
    runs finishes. In one transaction, with the DAG row locked: no more scheduled runs; its queued
    runs (scheduled, manual or backfill; none has started a task) fail with their task instances
    skipped; its running backfills are cancelled. Running runs finish on their version. Applying the
    spec again restores the DAG with its history. Returns the number of runs cancelled, or None if
    the DAG was already inactive (nothing is written: a second replica's delete is a no-op)."""
    with db.begin() as conn:
        require_dag(conn, dag_id, active=False)
        row = lock_dag(conn, dag_id)
        if not row.is_active:
            return None
        conn.execute(update(dag_t).where(dag_t.c.dag_id == dag_id).values(
            is_active=False, next_dagrun_create_after=None, updated_at=now))
        queued = list(conn.execute(select(dag_run_t.c.id).where(
            dag_run_t.c.dag_id == dag_id, dag_run_t.c.state == RunState.QUEUED).order_by(dag_run_t.c.id)).scalars())
        cancelled = fail_queued_runs(conn, queued, now=now, who=who, detail="DAG deleted before the run started")
        backfills = conn.execute(
            update(backfill_t).where(backfill_t.c.dag_id == dag_id, backfill_t.c.state == BackfillState.RUNNING)
            .values(state=BackfillState.CANCELLED, completed_at=now).returning(backfill_t.c.id)).scalars().all()
        record_events(conn, [{"at": now, "who": who, "entity": "dag", "dag_id": dag_id, "to_state": "inactive",
                              "detail": f"deleted: {len(cancelled)} queued runs cancelled"}]
                      + [{"at": now, "who": who, "entity": "backfill", "dag_id": dag_id,
                          "detail": f"backfill {b}: DAG deleted", "from_state": BackfillState.RUNNING,
                          "to_state": BackfillState.CANCELLED}
                         for b in sorted(backfills)])
    return len(cancelled)


def store_import_error(conn: Connection, dag_id: str, message: str, *, at: dt.datetime) -> int:
    """Store why a DAG cannot be scheduled on its row and take it off the create-runs schedule
    (`next_dagrun_create_after` = NULL); returns the rows changed (0 or 1). Only its first error is kept
    until an apply clears it (`import_error IS NULL` in the WHERE)."""
    return conn.execute(
        update(dag_t)
        .where(dag_t.c.dag_id == dag_id, dag_t.c.import_error.is_(None))
        .values(import_error=message, import_error_at=at, next_dagrun_create_after=None)
    ).rowcount


def dag_timezone_and_activity(conn: Connection, dag_id: str, *, with_paused: bool = False):
    """The stored DAG's (timezone, is_active, namespace[, is_paused with `with_paused`]), or None if it was
    never applied."""
    columns = (dag_t.c.timezone, dag_t.c.is_active, dag_t.c.namespace, dag_t.c.is_paused) if with_paused else (
        dag_t.c.timezone, dag_t.c.is_active, dag_t.c.namespace)
    return conn.execute(select(*columns).where(dag_t.c.dag_id == dag_id)).first()


def active_object_dags(conn: Connection, namespace: str | None) -> dict[str, str]:
    """dag_id -> `k8s://<namespace>/<name>` of the active DAGs a Kubernetes object defines, in `namespace`
    (None: every namespace): what a listing of DAG objects is compared with."""
    prefix = K8S_SOURCE + (f"{namespace}/" if namespace else "")
    rows = conn.execute(select(dag_t.c.dag_id, dag_t.c.source_path).where(
        dag_t.c.is_active.is_(True), dag_t.c.source_path.startswith(prefix, autoescape=True)))
    return dict(rows.all())


def dag_sources(conn: Connection, dag_ids: Iterable[str]) -> dict[str, str | None]:
    """dag_id -> the `source_path` of the stored DAG (a file, or the `k8s://<namespace>/<name>` object
    defining it), for those of `dag_ids` stored."""
    rows = conn.execute(select(dag_t.c.dag_id, dag_t.c.source_path).where(dag_t.c.dag_id.in_(list(dag_ids))))
    return dict(rows.all())


def dags_with_current_version(conn: Connection, dag_ids: list[str]) -> list:
    """Every column of the stored DAGs among `dag_ids`, with `version` (the hash of their current version;
    None for a DAG without one)."""
    return conn.execute(
        select(dag_t, dag_version_t.c.version)
        .join(dag_version_t, dag_version_t.c.id == dag_t.c.current_version_id, isouter=True)
        .where(dag_t.c.dag_id.in_(dag_ids))).all()


def next_runs_of_dags(conn: Connection, dag_ids: list[str]) -> list:
    """(dag_id, current_version_id, next_dagrun, its data interval, next_dagrun_create_after) of these
    DAGs, in dag_id order."""
    return conn.execute(select(dag_t.c.dag_id, dag_t.c.current_version_id, dag_t.c.next_dagrun,
                               dag_t.c.next_dagrun_data_interval_start, dag_t.c.next_dagrun_data_interval_end,
                               dag_t.c.next_dagrun_create_after)
                        .where(dag_t.c.dag_id.in_(dag_ids)).order_by(dag_t.c.dag_id)).all()

"""The status sync: the database, mirrored into the objects' statuses and into dagline's own DagRun objects.

One pass (`StatusSync.sync`, every `DAGLINE_STATUS_INTERVAL` seconds in every replica) reads the objects
kopf keeps in the `ObjectCache` (no list calls) and a handful of queries, whatever the number of objects:
- DAG objects: version, next run, latest run (`dags.derived_statuses`) of the DAG of the object's
  namespace and name (its key, `dagline.domain.names.qualify`); an object an earlier release refused
  `NameTaken` (names were global then) is applied;
- DagRun objects dagline keeps per DAG object (`queries.runs_to_show`): every running run, every queued
  scheduled or manual run, and the newest finished ones up to the DAG's history limit
  (`DAGLINE_DAGRUN_HISTORY_LIMIT`, or the DAG object's `dagline.io/dagrun-history-limit` annotation);
  missing ones are created (owned by the DAG object), finished ones beyond the limit deleted, and every
  DagRun's status (the user's too) follows its run: state, interval, version, task instances per state;
- Backfill objects: progress; those waiting for their DAG are tried again;
- Pool objects: the slots of their namespace's pool, the slots in use; one whose name is (or became) a
  platform pool's is refused `PlatformPool`, and tried again.
A status is patched only when a field the database decides differs from what the object shows, so a
quiet system costs queries and no API writes; two replicas derive and write the same values.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from dagline.clock import Clock
from dagline.db.engine import Database
from dagline.domain import names
from dagline.domain.spark_policy import DEFAULT_POLICY, SparkPolicy
from dagline.domain.states import RunState
from dagline.errors import Unavailable
from dagline.k8s import backfills, dagruns, dags, pools, preflight
from dagline.k8s.cache import ObjectCache
from dagline.k8s.client import ApiRejected
from dagline.k8s.conditions import as_merge_patch, k8s_time, reason_of
from dagline.k8s.objects import DaglineObjects
from dagline.k8s.preflight import Verdict
from dagline.k8s.resources import ANNOTATION_HISTORY_LIMIT
from dagline.store.backfills import backfills_by_request_id
from dagline.store.read_models import backfill_run_counts, runs_by_run_id, runs_to_show, task_counts, version_numbers

log = logging.getLogger(__name__)


class SyncStopped(Unavailable):
    """The replica is stopping: the pass ends here (the next replica's pass does the rest)."""


@dataclasses.dataclass
class SyncStats:
    """Counters since start (exported as metrics)."""

    syncs: int = 0
    failed_syncs: int = 0
    status_patches: int = 0
    dagruns_created: int = 0
    dagruns_deleted: int = 0


def history_limit(dag_object: Mapping[str, Any], default: int) -> int:
    """The DAG object's annotation if it is a whole number >= 0, else the operator's default."""
    raw = ((dag_object.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_HISTORY_LIMIT)
    try:
        value = int(str(raw).strip()) if raw is not None else default
    except ValueError:
        return default
    return value if value >= 0 else default


def _meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    return body.get("metadata") or {}


def _deleting(body: Mapping[str, Any]) -> bool:
    return bool(_meta(body).get("deletionTimestamp"))


class StatusSync:
    def __init__(self, db: Database, cache: ObjectCache, objects: DaglineObjects, *, clock: Clock, who: str,
                 history_limit: int, spark_policy: SparkPolicy = DEFAULT_POLICY,
                 spark_verdict: Callable[[], Verdict | None] | None = None):
        self.spark_verdict = spark_verdict  # the Spark preflight's latest verdict (None: no preflight)
        self.spark_policy = spark_policy  # DAG objects applied here are checked as the handlers check them
        self.db = db
        self.cache = cache
        self.objects = objects
        self.clock = clock
        self.who = who
        self.default_limit = history_limit
        self.stats = SyncStats()
        # (plural, namespace, name) -> (the resourceVersion the cache showed, the fields then written): the
        # cache lags the API by a watch event, and the same fields need not be written twice meanwhile.
        self._written: dict[tuple[str, str, str], tuple[str, dict[str, Any]]] = {}
        self._stopping = threading.Event()

    def sync(self) -> None:
        """One pass over every kind. API outages raise (the next pass tries again); so does `stop()`
        (`SyncStopped`), between two writes."""
        self._dags()
        self._dagruns()
        self._backfills()
        self._pools()
        self.stats.syncs += 1
        kinds = ("dags", "dagruns", "backfills", "pools")
        live = {(plural, _meta(o).get("namespace"), _meta(o).get("name"))
                for plural in kinds for o in self.cache.objects(plural)}
        self._written = {key: value for key, value in self._written.items() if key in live}

    def stop(self) -> None:
        """Make a pass in progress end at its next write (a slow API must not hold up a shutdown)."""
        self._stopping.set()

    # -- writing ------------------------------------------------------------------------------------

    def _status(self, plural: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """The object's status as this replica last wrote it (the cache may not show that write yet)."""
        meta = _meta(body)
        current = dict(body.get("status") or {})
        written = self._written.get((plural, meta["namespace"], meta["name"]))
        if written is not None and written[0] == meta.get("resourceVersion"):
            current.update(written[1])  # the cache has not seen this replica's last write yet
        return current

    def _patch(self, plural: str, body: Mapping[str, Any], fields: Mapping[str, Any], *, always: bool = False) -> None:
        meta = _meta(body)
        key = (plural, meta["namespace"], meta["name"])
        current = self._status(plural, body)
        written = self._written.get(key)
        changed = dict(fields) if always else {k: v for k, v in fields.items() if current.get(k) != v}
        if not changed:
            return
        if self._stopping.is_set():
            raise SyncStopped("the replica is stopping")
        try:
            if self.objects.patch_status(plural, meta["namespace"], meta["name"], as_merge_patch(current, changed)):
                self.stats.status_patches += 1
                if meta.get("resourceVersion"):
                    self._written[key] = (meta["resourceVersion"], {**(written[1] if written and written[0] ==
                                                                       meta["resourceVersion"] else {}), **changed})
        except ApiRejected as exc:
            log.warning("status of %s %s/%s not written: %s", plural, meta["namespace"], meta["name"], exc)

    # -- DAGs ---------------------------------------------------------------------------------------

    def _dags(self) -> None:
        objects = [o for o in self.cache.objects("dags") if not _deleting(o)]
        with self.db.begin() as conn:
            derived = dags.derived_statuses(conn, [dags.dag_key(o) for o in objects])
        verdict = self.spark_verdict() if self.spark_verdict is not None else None
        for body in objects:
            namespace, name = dags.object_of(body)
            stored = derived.get(names.qualify(namespace, name))
            if stored is not None and stored["source"] == dags.object_source(namespace, name):
                fields = dags.status_fields(stored)
                if verdict is not None and reason_of(body.get("status"), "Ready") is not None:
                    fields["conditions"] = self._spark_ready(body, verdict)
                self._patch("dags", body, fields)
            elif reason_of(body.get("status")) == "NameTaken":  # refused by a release with global names
                outcome = dags.apply_dag_object(self.db, body, now=self.clock.now(), who=self.who,
                                                spark_policy=self.spark_policy)
                self._patch("dags", body, outcome.status, always=True)

    def _spark_ready(self, body: Mapping[str, Any], verdict: Verdict) -> list[dict[str, Any]]:
        """The DAG object's conditions with the preflight's `SparkReady`; a change of its status to True
        or False is also an Event on the object (each replica that sees the change posts one)."""
        current = self._status("dags", body).get("conditions") or []
        before = next((c.get("status") for c in current if c.get("type") == preflight.CONDITION), None)
        now = self.clock.now()
        if verdict.status != before and verdict.status in ("True", "False"):
            try:
                self.objects.post_event(body, "Normal" if verdict.ready else "Warning", verdict.reason,
                                        verdict.message, reporter=self.who, at=k8s_time(now))
            except ApiRejected as exc:
                log.warning("Event on DAG %s not posted: %s", _meta(body)["name"], exc)
        return preflight.with_condition(current, verdict, now=now, previous=current)

    # -- DagRuns ------------------------------------------------------------------------------------

    def _dagruns(self) -> None:
        # The objects first, then the database: an object in this snapshot was created after its run
        # was committed, so the queries below see that run (nothing is pruned for being too new).
        dagrun_objects = self.cache.objects("dagruns")
        dag_objects = [o for o in self.cache.objects("dags") if not _deleting(o)]
        with self.db.begin() as conn:
            sources = dags.sources(conn, [dags.dag_key(o) for o in dag_objects])
            # DAG key -> the object defining it (the key says its namespace and name)
            owners = {dags.dag_key(o): o for o in dag_objects
                      if sources.get(dags.dag_key(o)) == dags.object_source(*dags.object_of(o))}
            shown = runs_to_show(conn, {dag_id: history_limit(o, self.default_limit) for dag_id, o in owners.items()})
            users = [o for o in dagrun_objects if not dagruns.is_managed(o) and not _deleting(o)]
            # (DAG key in the object's own namespace, run id): another namespace's run is never found
            user_runs = runs_by_run_id(conn, [dagruns.run_of_object(o) for o in users if all(dagruns.run_of_object(o))])
            runs = [r for rows in shown.values() for r in rows] + list(user_runs.values())
            counts = task_counts(conn, sorted({r.id for r in runs}))
            numbers = version_numbers(conn, sorted({r.dag_id for r in runs}))
            managed = [o for o in dagrun_objects if dagruns.is_managed(o)]
            candidates = collections.defaultdict(list)  # dag_id -> managed objects not to show any more
            for dag_id, dag_object in owners.items():
                wanted = {dagruns.mirror_name(dag_id, r.run_id) for r in shown[dag_id]}
                for body in managed:
                    if ((body.get("spec") or {}).get("dag") == names.name_of(dag_id) and _meta(body)["namespace"]
                            == _meta(dag_object)["namespace"] and _meta(body)["name"] not in wanted
                            and not _deleting(body)):
                        candidates[dag_id].append(body)
            still_active = self._active_runs(conn, candidates)

        def fields(run) -> dict[str, Any]:
            return dagruns.run_status(run, numbers.get(run.dag_version_id), counts.get(run.id))

        managed_by_key = {(_meta(o)["namespace"], _meta(o)["name"]): o for o in managed}
        for dag_id, dag_object in owners.items():
            namespace = _meta(dag_object)["namespace"]
            for run in shown[dag_id]:
                if dagruns.is_object_run(run.run_id):
                    continue  # the user's own DagRun object shows it
                existing = managed_by_key.get((namespace, dagruns.mirror_name(dag_id, run.run_id)))
                if existing is None:
                    if self._stopping.is_set():
                        raise SyncStopped("the replica is stopping")
                    manifest = dagruns.mirror_manifest(dag_object, run)
                    try:
                        if self.objects.create("dagruns", manifest):
                            self.stats.dagruns_created += 1
                    except ApiRejected as exc:
                        log.warning("DagRun object for run %s of %s not created: %s", run.run_id, dag_id, exc)
                        continue
                    self._patch("dagruns", manifest, fields(run), always=True)
                else:
                    self._patch("dagruns", existing, fields(run))
            for body in candidates.get(dag_id, ()):
                if (dag_id, body["spec"].get("runId")) in still_active:
                    continue
                if self.objects.delete("dagruns", namespace, _meta(body)["name"]):
                    self.stats.dagruns_deleted += 1
        for body in users:
            run = user_runs.get(dagruns.run_of_object(body))
            if run is not None:
                self._patch("dagruns", body, fields(run))
            elif reason_of(body.get("status")) == dagruns.UNKNOWN_DAG:
                outcome = dagruns.trigger_from_object(self.db, body, now=self.clock.now(), who=self.who)
                if reason_of(outcome.status) != dagruns.UNKNOWN_DAG:
                    self._patch("dagruns", body, outcome.status, always=True)

    def _active_runs(self, conn, candidates: Mapping[str, list]) -> set[tuple[str, str]]:
        """Which of these objects' runs are still queued or running (their objects stay)."""
        keys = [(dag_id, (body.get("spec") or {}).get("runId")) for dag_id, bodies in candidates.items()
                for body in bodies]
        found = runs_by_run_id(conn, [k for k in keys if k[1]])
        return {key for key, run in found.items() if run.state in RunState.ACTIVE}

    # -- Backfills ----------------------------------------------------------------------------------

    def _backfills(self) -> None:
        objects = [o for o in self.cache.objects("backfills") if not _deleting(o)]
        requests = [(_meta(o).get("namespace") or "default", _meta(o)["uid"]) for o in objects]
        with self.db.begin() as conn:
            rows = backfills_by_request_id(conn, requests)
            counts = backfill_run_counts(conn, [r.id for r in rows.values()])
        for body, request in zip(objects, requests, strict=True):
            row = rows.get(request)
            if row is not None:
                self._patch("backfills", body, backfills.progress(row, counts.get(row.id, {})))
            elif reason_of(body.get("status")) == backfills.WAITING_FOR_DAG:
                outcome = backfills.ensure_backfill(self.db, body, now=self.clock.now(), who=self.who)
                if reason_of(outcome.status) != backfills.WAITING_FOR_DAG:
                    self._patch("backfills", body, outcome.status, always=True)

    # -- Pools --------------------------------------------------------------------------------------

    def _pools(self) -> None:
        objects = [o for o in self.cache.objects("pools") if not _deleting(o)]
        if not objects:
            return
        stored = pools.stored_pools(self.db)
        platform = pools.platform_pools(stored)
        for body in objects:
            namespace, name = pools.object_pool(body)
            if name in pools.RESERVED_POOLS:
                continue  # refused once by its handler: the platform's pool is not shown in a namespace
            spec, reason = body.get("spec") or {}, reason_of(body.get("status"))
            pool = stored.get(names.pool_key(namespace, name), {"slots": None, "used_slots": 0, "description": None})
            description = spec.get("description")
            if name in platform:
                if reason != "PlatformPool":  # a platform pool of its name was made since it was applied
                    outcome = pools.apply_pool_object(self.db, body, now=self.clock.now(), who=self.who)
                    self._patch("pools", body, outcome.status, always=True)
            elif (pool["slots"] != spec.get("slots") or reason in pools.RETRIED_REASONS
                    or (description is not None and pool["description"] != description)):
                outcome = pools.apply_pool_object(self.db, body, now=self.clock.now(), who=self.who)
                self._patch("pools", body, outcome.status, always=True)
            else:
                self._patch("pools", body, {"slots": pool["slots"], "occupiedSlots": pool["used_slots"]})

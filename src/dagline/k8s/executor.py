"""The `spark-k8s` executor: every task instance try becomes a spark-operator SparkApplication, followed to its end.

Flow. `launch` creates each try's SparkApplication (`dagline.k8s.sparkapp.build_manifest`; the name is
deterministic, so a 409 AlreadyExists means an earlier replica or a replayed launch created it: the
object is adopted when its annotations name the same try). `sync` lists the applications dagline
still follows — one paged list call with the selector `dagline.io/managed-by=dagline,
dagline.io/outcome=pending`, at most once per `list_interval_s` (1 s by default; no watch thread,
so nothing runs between loops) — and reports only changes: `running` once (with `started_at`), then
`success` or `failed`. An application missing from the list is looked up by name before it is
declared deleted.

States (`status.applicationState.state`): COMPLETED is success; FAILED and SUBMISSION_FAILED fail the
try with the operator's errorMessage; RUNNING, SUCCEEDING and FAILING are running; no state,
SUBMITTED, PENDING_RERUN, INVALIDATING and UNKNOWN are waiting. A try whose driver has not been seen
running `pending_timeout_s` after its launch (dagline's clock; an image that cannot be pulled leaves
an application in SUBMITTED for ever) is failed with a message saying so, and its application is
deleted so it cannot start later beside the retry. Sooner: an application that has no status at all
`pickup_timeout_s` after its launch (1 minute by default) was picked up by no spark-operator (none is
installed, or it does not watch the Spark namespace): its try fails with `SparkOperatorNotWatching` in
its message, and `pickups` (read by the preflight, `dagline.k8s.preflight`) remembers it, as it
remembers a picked-up one. A create answered 404 for the kind fails its try with
`SparkApplicationCRDMissing` at once.

Errors. Connection errors, timeouts, 429 and 5xx never reach the scheduler loop: they are logged
(once per outage), state is kept, and the call is retried at the next sync (a create that keeps
failing fails its try at the pending timeout). 403, 422 and other refusals of a create fail the
try with the API's message.

Retention (`DAGLINE_SPARK_RETENTION`, `DAGLINE_SPARK_KEEP_FINISHED`; ADR 0085): `delete-succeeded`
(default) deletes succeeded applications and keeps failed ones (with their driver pod, for the web UI
and `kubectl logs`) for good; `delete` deletes every finished one; `keep` deletes none. Every finished
application is first relabelled `dagline.io/outcome=<success|failed>`; one the retention deletes also
gets the annotation `dagline.io/delete-after` (dagline's clock plus `DAGLINE_SPARK_KEEP_FINISHED`, 24
hours by default), and a sweep (at most once per `sweep_interval_s`, by any replica: the annotation
is in the cluster) deletes those whose time has passed, taking their driver pods and logs along. So
a succeeded try's driver log can be read for a day. `DAGLINE_SPARK_KEEP_FINISHED=0` deletes at once.
The relabel or delete happens at the *next* sync, after the scheduler has recorded the outcome, so a
replica dying in between leaves an application the next one can still adopt. No
`timeToLiveSeconds` is set: the spark-operator would delete an application whose outcome dagline may
not have read yet (a replica down longer than the TTL would then fail a try that succeeded).
`cancel` deletes at once; `end` stops following and deletes nothing that runs.

Signals and the task's env. A try with an environment (`DAGLINE_API_URL`, `DAGLINE_SIGNAL_TOKEN`, the
task's `env`: its `secretKeyRef`s read through `read_secret`, which the operator points at the DAG
object's namespace, before the application is created; a missing Secret or key fails the try naming
the variable) gets its Secret
(`sparkapp.build_env_secret`) created right after its application, already owned by it (an
ownerReference: Kubernetes' garbage collector deletes it with the application). Until it exists the
driver pod waits (the kubelet retries a missing `secretKeyRef`). The executor only ever *creates*
Secrets: it never reads, patches or deletes one, so the chart grants `create` on Secrets of the Spark
namespace and nothing else (ADR 0046). A Secret that cannot be created for now (the API is down) is
created at a later sync; a refused one (403) fails the try with the API's message and deletes its
application; one that already exists (the same try's, from a launch whose answer was lost) is kept.
`cancel` (a stop: `dagline tasks stop`, a stop or
restart signal, `runs stop`) deletes the application, so the spark-operator deletes the driver pod
and the driver gets SIGTERM, then the pod's `terminationGracePeriodSeconds`. A running streaming try is
stopped by deleting its driver pod first, with `gracePeriodSeconds` set to the task's stopGracePeriod
(the API server honours it: no spark-operator webhook is needed, where the manifest's
`driver.terminationGracePeriodSeconds` is applied only by that webhook), and its application is deleted
once the pod is gone or the grace period (plus `STOP_SLACK_S`) has passed: the spark-operator's own
delete of the driver would otherwise cut the grace period short. The try's slot stays taken until then,
so its retry or restart never runs beside a driver still committing its last batch (ADR 0090).

Spark Connect tries (`spark.connect: true`, ADR 0086) are Pods instead (`dagline.k8s.sparkconnect`), followed
the same way (listed by `dagline.io/outcome=pending`, Pod phases as states, the same retention, pending
timeout, Secret, `cancel` and `adopt`) on their DAG's SparkConnect server. A try's Pod is created once
that server exists, is `Ready` and is marked in use; servers are created, looked at and deleted when idle
by `dagline.k8s.connect_servers`.

`adopt` looks each try's application up by name: found, it is followed (its state is reported at the
next sync); missing, the launch is returned to the scheduler (a queued try is launched again, a
running one is a zombie).

`KIND_CODE` is what the registry (`dagline.executors.registry`, which names this module by path and
imports it only when spark-k8s is used) builds it with: its settings from `DAGLINE_SPARK_*`, its
tries' logs read from their driver pods (`pod_logs.DriverLog`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Callable

from dagline.clock import SystemClock
from dagline.domain.states import TIState
from dagline.errors import DaglineError
from dagline.executors.base import TaskKey, TaskLaunch, TaskReport
from dagline.executors.registry import ExecutorSettings, KindCode
from dagline.executors.secret_sources import LocalSecrets
from dagline.k8s import preflight, sparkapp, sparkconnect
from dagline.k8s.client import (
    AlreadyExists,
    ApiRejected,
    ApiUnavailable,
    Pods,
    Secrets,
    SparkApplications,
    SparkConnects,
    load_api_client,
)
from dagline.k8s.connect_servers import ConnectServers
from dagline.k8s.pod_logs import DriverLog
from dagline.k8s.preflight import Pickups, Preflight
from dagline.k8s.spark_settings import SparkK8sSettings, shown
from dagline.k8s.sparkapp import LABEL_OUTCOME, Phase

log = logging.getLogger(__name__)

STOP_SLACK_S = 15.0  # after a streaming driver's grace period: time for the kubelet to report the pod gone


@dataclasses.dataclass
class _Try:
    launch: TaskLaunch
    name: str
    manifest: dict
    launched_at: dt.datetime
    created: bool = False            # the application exists (created here, or found)
    started_at: dt.datetime | None = None  # set when first seen running (and reported)
    picked_up: bool = False          # seen with a status: a spark-operator watches its namespace
    created_at: dt.datetime | None = None  # when its create succeeded (the pickup timeout counts from then)
    state: str = ""                  # the last state seen
    create_error: str | None = None  # why the last create attempt failed (transient)
    secret_owner: dict | None = None  # the application to own the try's Secret, while it is still to create
    task_values: tuple[tuple[str, str], ...] | None = None  # the task's env, read (None: not yet)
    driver_pod: str | None = None    # as the application's status names it, once seen
    stop_by: dt.datetime | None = None  # a graceful stop under way: its driver pod is deleted, this the bound
    server: str | None = None        # a Spark Connect try: its DAG's SparkConnect (the try itself is a Pod)

    @property
    def connect(self) -> bool:
        return self.server is not None

    @property
    def kind(self) -> str:
        return "Pod" if self.connect else "SparkApplication"


@dataclasses.dataclass(frozen=True)
class _Cleanup:
    name: str
    outcome: str      # "success" | "failed"
    delete: bool      # else: relabel `dagline.io/outcome=<outcome>`
    after: int = 0    # run at a sync once this many syncs have returned (its report was recorded)
    delete_after: dt.datetime | None = None  # with the relabel: when the sweep may delete it
    connect: bool = False  # a Spark Connect try's Pod, not a SparkApplication

    def annotations(self) -> dict[str, str] | None:
        if self.delete_after is None:
            return None
        return {sparkapp.ANNOTATION_DELETE_AFTER: self.delete_after.isoformat()}


class SparkK8sExecutor:
    """Runs each try as a SparkApplication; at most `parallelism` followed at a time."""

    name = "spark-k8s"
    host_bound = False  # applications live in the cluster: any replica can adopt them by label

    def __init__(self, settings: SparkK8sSettings, *, parallelism: int, clock=None, api_client=None,
                 list_interval_s: float = 1.0, retry_interval_s: float = 2.0, sweep_interval_s: float = 60.0,
                 idle_check_interval_s: float = 60.0):
        if parallelism < 1:
            raise ValueError("parallelism must be at least 1")
        self.settings = settings
        self.parallelism = parallelism
        self.clock = clock or SystemClock()
        self.list_interval_s = list_interval_s    # at most one list call per this many seconds
        self.retry_interval_s = retry_interval_s  # after a transient API error, no call for this long
        self.sweep_interval_s = sweep_interval_s  # at most one sweep of expired finished applications per this
        self._last_sweep = time.monotonic()       # the first sweep comes one interval after the start
        self._api_client = api_client
        self._apps: SparkApplications | None = None
        self._secrets: Secrets | None = None
        self._pods_api: Pods | None = None
        self._connects_api: SparkConnects | None = None
        self.servers = ConnectServers(settings, connects=self._connects, pods=self._pods, clock=self.clock,
                                      on_api_error=self._api_error, look_interval_s=list_interval_s,
                                      idle_check_interval_s=idle_check_interval_s)
        self._tries: dict[TaskKey, _Try] = {}
        self._reports: list[TaskReport] = []
        self._cleanups: list[_Cleanup] = []   # run at the next sync (and retried while the API is down)
        self._syncs = 0                        # syncs that have returned their reports
        self._last_list = float("-inf")
        self._fresh = False                    # the latest list call succeeded: states seen are current
        self._quiet_until = float("-inf")      # monotonic time before which the API is not called again
        self._api_down = False
        self._last_refusal: str | None = None
        # Reads a task's `secretKeyRef` (dag_id, name, key): the operator sets it to read the DAG object's
        # namespace; without it (a plain `dagline scheduler --executor spark-k8s`), secret variables.
        self.read_secret: Callable[[str, str, str], str] | None = None
        self.local_secrets = LocalSecrets.from_env()
        self.pickups = Pickups()  # whether the latest try's application was picked up: the preflight reads it

    # -- protocol -----------------------------------------------------------------------------

    def start(self) -> None:
        self._api()

    def launch(self, launches: list[TaskLaunch]) -> None:
        now = self.clock.now()
        for launch in launches:
            if launch.key in self._tries:
                continue  # already followed here: one application per try
            try:
                if launch.job.connect:
                    t = self._connect_try(launch, now)
                else:
                    manifest = sparkapp.build_manifest(
                        launch, namespace=self.settings.namespace, default_image=self.settings.image,
                        service_account=self.settings.service_account, spark_version=self.settings.spark_version,
                        launched_at=now, pod_security=self.settings.pod_security)
                    t = _Try(launch, manifest["metadata"]["name"], manifest, launched_at=now)
            except sparkapp.ManifestError as exc:
                self._reports.append(self._report(launch, TIState.FAILED, now, message=str(exc), started_at=now))
                continue
            self._tries[launch.key] = t
            if self._api_ready():
                self._create(t)
            else:
                t.create_error = "the Kubernetes API is unavailable"

    def sync(self) -> list[TaskReport]:
        self._run_cleanups()
        for t in [t for t in self._tries.values() if not t.created]:
            if self._api_ready():
                self._create(t)
        for t in [t for t in self._tries.values() if t.secret_owner is not None]:
            if self._api_ready():
                self._create_env_secret(t)
        if any(t.created for t in self._tries.values()):
            if time.monotonic() - self._last_list >= self.list_interval_s and self._api_ready():
                self._refresh()
        self._end_graceful_stops()
        if self.servers.idle_check_due() and self._api_ready():
            self.servers.delete_idle({t.server for t in self._tries.values() if t.connect})
        self._time_out_pending()
        if time.monotonic() - self._last_sweep >= self.sweep_interval_s and self._api_ready():
            self._sweep()
        reports, self._reports = self._reports, []
        self._syncs += 1
        return reports

    def cancel(self, key: TaskKey) -> None:
        """Delete the try's application (wherever it was launched from); a followed try reports 'failed'.
        A running streaming try's driver pod is deleted first, with the task's grace period."""
        t = self._tries.get(key)
        if t is not None and self._stop_gracefully(t):
            return
        self._tries.pop(key, None)
        name = t.name if t is not None else sparkapp.application_name(key)
        # its Secret goes with it (ownerReference); a try not followed here may be either kind
        for connect in ((t.connect,) if t is not None else (False, True)):
            self._delete_now(name, TIState.FAILED, connect=connect)
        if t is not None:
            now = self.clock.now()
            self._reports.append(self._report(t.launch, TIState.FAILED, now,
                                              message=f"cancelled: {t.kind} deleted",
                                              started_at=t.started_at or now))

    def adopt(self, launches: list[TaskLaunch]) -> list[TaskLaunch]:
        """Follow the tries whose applications exist; return the others."""
        left = []
        for launch in launches:
            if launch.key in self._tries:
                continue
            name = sparkapp.application_name(launch.key)
            objects = self._pods() if launch.job.connect else self._api()
            try:
                obj = objects.get(name)
            except (ApiUnavailable, ApiRejected) as exc:
                # Unknown: follow it as if it exists; if it does not, the next sync reports it missing
                # (never create it again here: a running try must not run twice).
                self._api_error("adopting", exc)
                self._follow(launch, name, None)
                continue
            if obj is None or not sparkapp.same_try(obj, launch.key):
                if obj is not None:
                    log.warning("%s %s exists but belongs to another try: not adopted",
                                "Pod" if launch.job.connect else "SparkApplication", name)
                left.append(launch)
                continue
            self._follow(launch, name, obj)
        return left

    def free_slots(self) -> int:
        return max(0, self.parallelism - len(self._tries))

    def has_work(self) -> bool:
        return bool(self._tries or self._reports)

    def detach(self) -> None:
        """A graceful stop is an `end`: applications are never stopped by a replica leaving."""
        self.end()

    def end(self) -> None:
        """Stop following. Running applications keep running (another replica adopts them). Finished ones
        whose deletion was due are only relabelled: their reports may not have been recorded."""
        pending, self._cleanups = self._cleanups, []
        for cleanup in pending:
            objects = self._pods() if cleanup.connect else self._api()
            try:
                if cleanup.delete and cleanup.after < self._syncs:
                    objects.delete(cleanup.name)  # its report was returned before the last sync
                else:
                    objects.set_labels(cleanup.name, {LABEL_OUTCOME: cleanup.outcome}, cleanup.annotations())
            except (ApiUnavailable, ApiRejected) as exc:
                log.warning("could not clean up SparkApplication %s at shutdown: %s", cleanup.name, exc)
        self._tries.clear()
        self._reports.clear()
        self.servers.forget()

    # -- internals ----------------------------------------------------------------------------

    def spark_preflight(self) -> Preflight | None:
        """The preflight of this executor's Spark namespace (None when `preflight_interval_s` is 0), fed
        with this executor's evidence (`pickups`)."""
        if self.settings.preflight_interval_s <= 0:
            return None
        apps = SparkApplications(self._api().api.api_client, self.settings.namespace)
        return Preflight(apps, clock=self.clock, pickup_timeout_s=self.settings.pickup_timeout_s,
                         spark_version=self.settings.spark_version, image=self.settings.image,
                         service_account=self.settings.service_account, pickups=self.pickups)

    def _api(self) -> SparkApplications:
        if self._apps is None:
            api_client = self._api_client if self._api_client is not None else load_api_client()
            self._apps = SparkApplications(api_client, self.settings.namespace)
        return self._apps

    def _pods(self) -> Pods:
        if self._pods_api is None:
            self._api()
            self._pods_api = Pods(self._apps.api.api_client, self.settings.namespace)
        return self._pods_api

    def _connects(self) -> SparkConnects:
        if self._connects_api is None:
            self._api()
            self._connects_api = SparkConnects(self._apps.api.api_client, self.settings.namespace)
        return self._connects_api

    def _objects(self, t: _Try):
        """Where a try's object lives: Pods for a Connect try, else SparkApplications."""
        return self._pods() if t.connect else self._api()

    def _stop_gracefully(self, t: _Try) -> bool:
        """Start a graceful stop of a running streaming try; False when it is to be deleted at once."""
        if t.stop_by is not None:
            return True  # asked again: the stop under way goes on
        if t.connect or not (t.launch.streaming and t.created and t.started_at is not None):
            return False  # a Connect try's Pod carries its own terminationGracePeriodSeconds
        if not self._api_ready():
            return False
        grace = max(1, int(round(t.launch.stop_grace_s)))
        pod = t.driver_pod or sparkapp.driver_pod_name(None, t.name)
        try:
            deleted = self._pods().delete(pod, grace_period_s=grace)
        except (ApiUnavailable, ApiRejected) as exc:
            self._api_error(f"deleting driver pod {pod} (a graceful stop)", exc)
            return False  # the application is deleted: SIGTERM, then the pod's own grace period
        if not deleted:
            return False
        t.driver_pod = pod
        t.stop_by = self.clock.now() + dt.timedelta(seconds=grace + STOP_SLACK_S)
        return True

    def _end_graceful_stops(self) -> None:
        """A stopping try ends once its driver pod is gone (or its bound passed): its application goes."""
        now = self.clock.now()
        for t in [t for t in self._tries.values() if t.stop_by is not None]:
            if now < t.stop_by:
                if not self._api_ready():
                    continue
                try:
                    if self._pods().exists(t.driver_pod):
                        continue
                except (ApiUnavailable, ApiRejected) as exc:
                    self._api_error(f"reading driver pod {t.driver_pod}", exc)
                    continue
            self._end_stop(t)

    def _end_stop(self, t: _Try) -> None:
        self._tries.pop(t.launch.key, None)
        self._delete_now(t.name, TIState.FAILED)
        now = self.clock.now()
        grace = max(1, int(round(t.launch.stop_grace_s)))
        self._reports.append(self._report(
            t.launch, TIState.FAILED, now, started_at=t.started_at or now,
            message=f"cancelled: driver pod {t.driver_pod} stopped (SIGTERM, then up to {grace}s); "
                    "SparkApplication deleted"))

    def _secrets_api(self) -> Secrets:
        if self._secrets is None:
            self._api()
            self._secrets = Secrets(self._apps.api.api_client, self.settings.namespace)
        return self._secrets

    def _external_id(self, name: str) -> str:
        return f"{self.settings.namespace}/{name}"

    def _report(self, launch: TaskLaunch, state: str, at: dt.datetime, *, message: str | None = None,
                started_at: dt.datetime | None = None) -> TaskReport:
        return TaskReport(
            ti_id=launch.ti_id, try_number=launch.key.try_number, state=state, at=at,
            external_id=self._external_id(sparkapp.application_name(launch.key)), message=message,
            started_at=started_at,
        )

    def _task_values(self, t: _Try) -> tuple[tuple[str, str], ...] | None:
        """The task's `env` with its secrets read (from the DAG object's namespace in the operator; from
        secret variables without one), or None when the try was failed or must wait for the API."""
        out = []
        for var in t.launch.task_env:
            if var.secret is None:
                out.append((var.name, var.value))
                continue
            name, key = var.secret
            try:
                value = (self.read_secret(t.launch.key.dag_id, name, key) if self.read_secret is not None
                         else self.local_secrets.secret_key(name, key))
            except (DaglineError, LookupError) as exc:  # a missing Secret or key, a refusal: the DAG's to fix
                self._finish(t, TIState.FAILED, f"env {var.name}: {exc}", cleanup=False)
                return None
            except Exception as exc:  # noqa: BLE001 - the API cannot be reached: try again at the next sync
                t.create_error = str(exc)
                self._api_error(f"reading Secret {name} for env {var.name}", ApiUnavailable(str(exc)))
                return None
            out.append((var.name, value))
        return tuple(out)

    def _create(self, t: _Try) -> None:
        task_values = self._task_values(t)
        if task_values is None:
            return
        t.task_values = task_values
        if t.connect and not self._server_in_use(t):
            return  # its server is not Ready yet (or could not be created): the next sync looks again
        try:
            created = self._objects(t).create(t.manifest)
        except AlreadyExists:
            self._adopt_existing(t)
            return
        except ApiRejected as exc:
            if exc.status == 404 and not t.connect and not str(exc).startswith('404: namespaces "'):
                message = (f"{preflight.CRD_MISSING}: the Kubernetes API does not serve SparkApplications "
                           f"({exc}): install the spark-operator (the CRD {preflight.CRD_NAME})")
            else:
                message = f"the Kubernetes API refused the {t.kind} {t.name}: {exc}"
            self._finish(t, TIState.FAILED, message, cleanup=False)
            return
        except ApiUnavailable as exc:
            t.create_error = str(exc)
            self._api_error(f"creating {t.kind} {t.name}", exc)
            return
        self._api_ok()
        t.created = True
        t.created_at = self.clock.now()
        self._own_env_secret(t, created)

    def _own_env_secret(self, t: _Try, app: dict | None) -> None:
        """Create the try's Secret, owned by its application (or Connect Pod) `app` (a created or adopted one)."""
        owner_of = sparkconnect.pod_owner_reference if t.connect else sparkapp.owner_reference
        owner = owner_of(app or {})
        if not sparkapp.has_env(t.launch):
            return
        if owner is None:  # no uid in the answer: read the application back for it
            try:
                owner = owner_of(self._objects(t).get(t.name) or {})
            except (ApiUnavailable, ApiRejected) as exc:
                self._api_error(f"reading {t.kind} {t.name}", exc)
        if owner is None:
            log.warning("%s %s has no uid: its Secret is created without an owner", t.kind, t.name)
            owner = {}
        t.secret_owner = owner
        self._create_env_secret(t)

    def _create_env_secret(self, t: _Try) -> None:
        if t.task_values is None:  # an adopted application whose creator died before creating its Secret
            t.task_values = self._task_values(t)
            if t.task_values is None:
                return
        secret = sparkapp.build_env_secret(t.launch, namespace=self.settings.namespace, owner=t.secret_owner or None,
                                           task_values=t.task_values)
        if secret is None:
            t.secret_owner = None
            return
        try:
            self._secrets_api().create(secret)
        except ApiUnavailable as exc:
            self._api_error(f"creating Secret {secret['metadata']['name']}", exc)
            return  # the next sync creates it
        except ApiRejected as exc:
            t.secret_owner = None
            self._tries.pop(t.launch.key, None)
            self._delete_now(t.name, TIState.FAILED, connect=t.connect)
            now = self.clock.now()
            self._reports.append(self._report(
                t.launch, TIState.FAILED, now, started_at=now,
                message=f"the Kubernetes API refused the Secret {secret['metadata']['name']} holding the try's "
                        f"environment: {exc}; {t.kind} deleted"))
            return
        t.secret_owner = None

    def _adopt_existing(self, t: _Try) -> None:
        """409 on create: follow the object if it is this try's, else fail the try (never touch the other)."""
        try:
            obj = self._objects(t).get(t.name)
        except (ApiUnavailable, ApiRejected) as exc:
            t.create_error = str(exc)
            self._api_error(f"reading {t.kind} {t.name}", exc)
            return  # the next sync tries the create again, and lands here again
        if obj is None:
            return  # deleted in between: the next sync creates it
        if not sparkapp.same_try(obj, t.launch.key):
            self._finish(t, TIState.FAILED, f"a {t.kind} named {t.name} already exists and belongs to "
                                      f"another try (see its dagline.io/* annotations)", cleanup=False)
            return
        log.info("%s %s already existed: adopted", t.kind, t.name)
        t.created = True
        t.launched_at = sparkapp.launched_at(obj) or t.launched_at
        self._own_env_secret(t, obj)  # its creator may have died before creating it (an existing one is kept)
        if t.launch.key in self._tries:
            self._observe(t, obj)

    def _follow(self, launch: TaskLaunch, name: str, obj: dict | None) -> None:
        launched = (sparkapp.launched_at(obj) if obj is not None else None) or self.clock.now()
        server = (((obj or {}).get("metadata") or {}).get("labels") or {}).get(sparkconnect.LABEL_SERVER) or "?"
        t = _Try(launch, name, manifest={}, launched_at=launched, created=True,
                 server=server if launch.job.connect else None)
        self._tries[launch.key] = t
        if obj is not None:
            self._observe(t, obj)

    def _refresh(self) -> None:
        created = [t for t in self._tries.values() if t.created]
        by_name: dict[tuple[bool, str], dict] = {}
        for connect, selector in ((False, sparkapp.FOLLOWED_SELECTOR), (True, sparkconnect.PODS_SELECTOR)):
            if not any(t.connect == connect for t in created):
                continue
            what = "Pods" if connect else "SparkApplications"
            try:
                items = (self._pods() if connect else self._api()).list(selector)
            except (ApiUnavailable, ApiRejected) as exc:
                self._fresh = False
                self._api_error(f"listing {what}", exc)
                return
            by_name.update({(connect, (obj.get("metadata") or {}).get("name")): obj for obj in items})
        self._api_ok()
        self._fresh = True
        self._last_list = time.monotonic()
        for t in created:
            obj = by_name.get((t.connect, t.name))
            if obj is None:
                try:  # not listed: relabelled (reported by a replica that then died) or gone
                    obj = self._objects(t).get(t.name)
                except (ApiUnavailable, ApiRejected) as exc:
                    self._api_error(f"reading {t.kind} {t.name}", exc)
                    continue
                if obj is None:
                    self._finish(t, TIState.FAILED, f"{t.kind} {self._external_id(t.name)} disappeared "
                                              f"(deleted outside dagline) in state {t.state or 'no state'}",
                                 cleanup=False)
                    continue
            self._observe(t, obj)

    def _observe(self, t: _Try, obj: dict) -> None:
        seen = sparkconnect.observe(obj) if t.connect else sparkapp.observe(obj)
        t.state = seen.state
        now = self.clock.now()
        if not t.connect:
            t.driver_pod = sparkapp.driver_pod_name(obj, t.name)
        if obj.get("status") and not t.picked_up and not t.connect:
            t.picked_up = True
            self.pickups.record(True, now, t.name)
        if t.stop_by is not None:
            if seen.phase in (Phase.SUCCESS, Phase.FAILED):
                self._end_stop(t)  # the driver ended within its grace period
            return
        if seen.phase == Phase.RUNNING and t.started_at is None:
            t.started_at = now
            self._reports.append(self._report(t.launch, TIState.RUNNING, now, started_at=now))
        elif seen.phase == Phase.SUCCESS:
            self._finish(t, TIState.SUCCESS, None)
        elif seen.phase == Phase.FAILED:
            self._finish(t, TIState.FAILED, seen.message)

    def _time_out_pending(self) -> None:
        self._time_out_unpicked()
        now = self.clock.now()
        limit = dt.timedelta(seconds=self.settings.pending_timeout_s)
        for t in [t for t in self._tries.values() if t.started_at is None and now - t.launched_at > limit]:
            if t.created and not self._fresh:
                continue  # no current news of it (the API is down): waiting is not the same as stuck
            waited = _duration_text(self.settings.pending_timeout_s)
            if t.created:
                what = "phase" if t.connect else "state"
                message = (f"no driver running {waited} after launch ({t.kind} {self._external_id(t.name)} "
                           f"in {what} {t.state or 'no state'}; DAGLINE_SPARK_PENDING_TIMEOUT): deleted. Check that "
                           f"the image {self._image(t)} can be pulled and the namespace has room for the driver pod")
            elif t.connect and (server := self.servers.awaited(t.server)) is not None:
                message = (f"the Spark Connect server {self._external_id(server.name)} was not Ready {waited} after "
                           f"launch (state {server.state or 'no state'}; DAGLINE_SPARK_PENDING_TIMEOUT). Check that "
                           f"its image {self.settings.connect_image} can be pulled and the namespace has room for "
                           f"the server pod {server.name}-server")
            else:
                message = (f"could not create SparkApplication {self._external_id(t.name)} within {waited} "
                           f"(DAGLINE_SPARK_PENDING_TIMEOUT): {t.create_error or 'the API did not answer'}")
            self._tries.pop(t.launch.key, None)
            # delete even when no create succeeded: one may have, with its answer lost
            self._delete_now(t.name, TIState.FAILED, connect=t.connect)
            self._reports.append(self._report(t.launch, TIState.FAILED, now, message=message, started_at=now))

    def _time_out_unpicked(self) -> None:
        """Fail a try whose application no spark-operator picked up (no status at all) within the pickup
        timeout: waiting the pending timeout would only end in a message about images."""
        now = self.clock.now()
        limit = dt.timedelta(seconds=self.settings.pickup_timeout_s)
        if not self._fresh:
            return  # no current news (the API is down): waiting is not the same as unwatched
        for t in [t for t in self._tries.values()
                  if t.created and not t.connect and not t.picked_up and t.started_at is None
                  and now - (t.created_at or t.launched_at) > limit]:
            waited = _duration_text(self.settings.pickup_timeout_s)
            namespace = self.settings.namespace
            message = (f"{preflight.NOT_WATCHING}: no spark-operator picked up SparkApplication "
                       f"{self._external_id(t.name)} within {waited} (it has no status; "
                       f"DAGLINE_SPARK_PICKUP_TIMEOUT): is the spark-operator installed, and does it watch "
                       f"namespace {namespace}? (its Helm value spark.jobNamespaces); deleted")
            self.pickups.record(False, now, t.name)
            self._tries.pop(t.launch.key, None)
            self._delete_now(t.name, TIState.FAILED)
            self._reports.append(self._report(t.launch, TIState.FAILED, now, message=message, started_at=now))

    def _image(self, t: _Try) -> str:
        if t.connect:
            containers = (t.manifest.get("spec") or {}).get("containers") or [{}]
            return containers[0].get("image") or t.launch.job.image or self.settings.connect_client_image or "?"
        return (t.manifest.get("spec") or {}).get("image") or t.launch.job.image or self.settings.image

    def _finish(self, t: _Try, state: str, message: str | None, *, cleanup: bool = True) -> None:
        self._tries.pop(t.launch.key, None)  # its Secret goes with its application (ownerReference)
        now = self.clock.now()
        self._reports.append(self._report(t.launch, state, now, message=message, started_at=t.started_at or now))
        if cleanup:
            retention = self.settings.retention
            delete = retention == "delete" or (retention == "delete-succeeded" and state == TIState.SUCCESS)
            keep = self.settings.keep_finished_s
            if delete and keep > 0 and not t.connect:  # kept with its driver pod and log, then swept
                self._cleanups.append(_Cleanup(t.name, state, False, after=self._syncs + 1,
                                               delete_after=now + dt.timedelta(seconds=keep)))
            else:
                self._cleanups.append(_Cleanup(t.name, state, delete, after=self._syncs + 1, connect=t.connect))

    def _run_cleanups(self) -> None:
        """Deletes and relabels whose try's report the scheduler has recorded (a sync returned it since)."""
        due = [c for c in self._cleanups if c.after <= self._syncs]
        if not due or not self._api_ready():
            return
        self._cleanups = [c for c in self._cleanups if c.after > self._syncs]
        for i, cleanup in enumerate(due):
            objects = self._pods() if cleanup.connect else self._api()
            try:
                if cleanup.delete:
                    objects.delete(cleanup.name)
                else:
                    objects.set_labels(cleanup.name, {LABEL_OUTCOME: cleanup.outcome}, cleanup.annotations())
            except ApiUnavailable as exc:
                self._api_error(f"cleaning up SparkApplication {cleanup.name}", exc)
                self._cleanups[:0] = due[i:]  # retry them, in order, at a later sync
                return
            except ApiRejected as exc:
                log.warning("could not clean up SparkApplication %s: %s", cleanup.name, exc)

    def _sweep(self) -> None:
        """Delete the finished applications whose `dagline.io/delete-after` has passed (whichever replica
        finished them); their driver pods and logs go with them."""
        try:
            finished = self._api().list(sparkapp.FINISHED_SELECTOR)
        except (ApiUnavailable, ApiRejected) as exc:
            self._api_error("listing finished SparkApplications", exc)
            return
        self._api_ok()
        self._last_sweep = time.monotonic()
        now = self.clock.now()
        for obj in finished:
            meta = obj.get("metadata") or {}
            due = _instant((meta.get("annotations") or {}).get(sparkapp.ANNOTATION_DELETE_AFTER))
            if due is None or due > now:
                continue
            try:
                self._api().delete(meta.get("name"))
            except ApiUnavailable as exc:
                self._api_error(f"deleting SparkApplication {meta.get('name')}", exc)
                return  # the next sweep deletes the rest
            except ApiRejected as exc:
                log.warning("could not delete SparkApplication %s: %s", meta.get("name"), exc)

    def _delete_now(self, name: str, outcome: str, *, connect: bool = False) -> None:
        kind = "Pod" if connect else "SparkApplication"
        if not self._api_ready():
            self._cleanups.append(_Cleanup(name, outcome, delete=True, connect=connect))
            return
        try:
            (self._pods() if connect else self._api()).delete(name)
        except ApiUnavailable as exc:
            self._api_error(f"deleting {kind} {name}", exc)
            self._cleanups.append(_Cleanup(name, outcome, delete=True, connect=connect))
        except ApiRejected as exc:
            log.warning("could not delete %s %s: %s", kind, name, exc)

    def _connect_try(self, launch: TaskLaunch, now: dt.datetime) -> _Try:
        """A Connect try: its DAG's server (created at the try's first sync, `connect_servers`) and its Pod."""
        server, pod = self.servers.build_try(launch, now)
        return _Try(launch, pod["metadata"]["name"], pod, launched_at=now, server=server)

    def _server_in_use(self, t: _Try) -> bool:
        """Whether the try's Pod may be created now: its server is Ready and marked in use this sync."""
        use = self.servers.in_use(t.server, self._syncs)
        if use.refused is not None:
            self._finish(t, TIState.FAILED, use.refused, cleanup=False)
        elif use.waiting is not None:
            t.create_error = use.waiting
        return use.ready

    def _api_ready(self) -> bool:
        return time.monotonic() >= self._quiet_until

    def _api_error(self, doing: str, exc: Exception) -> None:
        """Log an API error once per outage (or per distinct refusal); after a transient one, pause calls."""
        if isinstance(exc, ApiRejected):
            if str(exc) != self._last_refusal:
                log.error("Kubernetes API refused %s: %s", doing, exc)
            self._last_refusal = str(exc)
            return
        if not self._api_down:
            log.warning("Kubernetes API unavailable while %s (%s); state kept, retrying in %ss",
                        doing, exc, self.retry_interval_s)
        self._api_down = True
        self._quiet_until = time.monotonic() + self.retry_interval_s

    def _api_ok(self) -> None:
        if self._api_down:
            log.info("Kubernetes API reachable again")
        self._api_down = False
        self._last_refusal = None


def _instant(text: str | None) -> dt.datetime | None:
    """An ISO-8601 instant with its offset, else None (an annotation someone else wrote is ignored)."""
    try:
        value = dt.datetime.fromisoformat(text) if text else None
    except ValueError:
        return None
    return value if value is not None and value.tzinfo is not None else None


def _duration_text(seconds: float) -> str:
    seconds = int(seconds)
    minutes, secs = divmod(seconds, 60)
    if minutes and not secs:
        return f"{minutes}m"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def _build(settings: ExecutorSettings) -> SparkK8sExecutor:
    return SparkK8sExecutor(settings.options["spark"], parallelism=settings.parallelism, clock=settings.clock)


KIND_CODE = KindCode(
    build=_build,
    open_log=DriverLog,
    read_options=lambda environ: {"spark": SparkK8sSettings.from_env(environ)},
    option_names=frozenset({"spark"}),
    settings_shown=shown,
)

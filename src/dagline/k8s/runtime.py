"""What one operator replica runs beside kopf: the scheduler loop, the status sync, the probe and metrics
servers, and the HTTP API (`dagline.api`, uvicorn in a thread of its own: `dagline.api.server`), so
every replica behind the chart's Service answers `POST /api/v1/signals`.

`Runtime` is built once per process, by `Runtime.from_env()` (called by `dagline operator`, and by the
kopf startup handler under `kopf run -m dagline.k8s.handlers`), handed to the handlers in kopf's `memo`,
started by the startup handler and stopped by the cleanup handler, so SIGTERM stops kopf, then the loop (gracefully: the
iteration finishes, running Spark applications are left for a peer to adopt), then the servers.

`Health` is what the probes answer: live while kopf's event loop turns, the scheduler loop makes
progress (an iteration, even one ended by a database error, within `DAGLINE_LIVENESS_TIMEOUT`) and the
status sync runs, and the watches bring every object the listing finds (`k8s.listing`, within
`OperatorSettings.watch_bound_s`); ready while the database answers.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping

from dagline import logformat, metrics
from dagline.clock import Clock, SystemClock
from dagline.db.engine import Database, open_database
from dagline.domain.callbacks import Channel
from dagline.errors import InvalidInput
from dagline.executors import registry
from dagline.executors.base import Executor
from dagline.k8s.cache import ObjectCache
from dagline.k8s.callback_events import kubernetes_event_channel, secret_reader
from dagline.k8s.listing import Listing
from dagline.k8s.mirror import StatusSync, SyncStopped
from dagline.k8s.objects import DaglineObjects
from dagline.k8s.settings import OperatorSettings
from dagline.scheduler.channels import SecretReader
from dagline.scheduler.deliveries import CallbackSettings
from dagline.scheduler.loop import Scheduler
from dagline.scheduler.settings import SchedulerSettings
from dagline.store.read_models import database_collector

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Health:
    """Heartbeats of the parts of a replica (monotonic seconds) and the scheduler's figures."""

    timeout_s: float
    started: float = dataclasses.field(default_factory=time.monotonic)
    kopf_beat: float | None = None
    scheduler_enabled: bool = True
    scheduler_beat: float | None = None
    scheduler_error: str | None = None
    sync_beat: float | None = None
    watch_problems: Callable[[], list[str]] | None = None  # the listing's watch check
    loops: int = 0
    last_loop_s: float = 0.0

    def looped(self, seconds: float) -> None:
        self.loops += 1
        self.last_loop_s = seconds
        self.scheduler_beat = time.monotonic()

    def problems(self) -> list[str]:
        """Why the replica is not live (empty: it is)."""
        now = time.monotonic()
        found = []

        def stale(beat: float | None, what: str) -> None:
            age = now - (beat if beat is not None else self.started)
            if age > self.timeout_s:
                found.append(f"{what} for {age:.0f} s (limit {self.timeout_s:g} s)")

        stale(self.kopf_beat, "kopf's event loop has not turned")
        if self.scheduler_enabled:
            if self.scheduler_error is not None:
                found.append(f"the scheduler loop stopped: {self.scheduler_error}")
            else:
                stale(self.scheduler_beat, "the scheduler loop has made no progress")
        stale(self.sync_beat, "the status sync has not run")
        if self.watch_problems is not None:
            found.extend(self.watch_problems())
        return found


class InstrumentedScheduler(Scheduler):
    """The scheduler, timing each iteration for the health check and the metrics."""

    def __init__(self, *args, health: Health, **kwargs):
        super().__init__(*args, **kwargs)
        self.health = health

    def iterate(self):
        began = time.monotonic()
        try:
            return super().iterate()
        finally:
            self.health.looped(time.monotonic() - began)


def open_operator_database(settings: OperatorSettings) -> Database:
    """The replicas' database, reachable and on the current schema (`dagline db upgrade` first)."""
    if settings.db_url is None:
        raise InvalidInput("not set: the operator's replicas share one database (postgresql://user@host/db)",
                           field="DAGLINE_DB_URL")
    db = open_database(settings.db_url)
    if db.is_sqlite:
        log.warning("SQLite database %s: run exactly one operator replica (use PostgreSQL for more)", db.sqlite_path)
    return db


class Runtime:
    """One replica's moving parts besides kopf. `executor=None` runs no scheduler loop (tests that drive
    the scheduler themselves, or a controller-only deployment)."""

    def __init__(self, settings: OperatorSettings, db: Database, *, executor: Executor | None = None,
                 clock: Clock | None = None, api_client=None, scheduler_settings: SchedulerSettings | None = None):
        from dagline.k8s.client import load_api_client

        api = api_client or load_api_client()
        self.settings = settings
        self.db = db
        self.clock = clock or SystemClock()
        self.who = f"operator:{socket.gethostname()}:{os.getpid()}"[:100]
        self.cache = ObjectCache()
        self.health = Health(settings.liveness_timeout_s, scheduler_enabled=executor is not None)
        # the Spark preflight (spark-k8s only, docs/adr/0080): its verdict goes on every DAG object
        make_preflight = getattr(executor, "spark_preflight", None)
        self.preflight = make_preflight() if make_preflight is not None else None
        self.sync = StatusSync(db, self.cache, DaglineObjects(api), clock=self.clock,
                               who=self.who, history_limit=settings.dagrun_history_limit,
                               spark_policy=settings.spark_policy,
                               spark_verdict=(lambda: self.preflight.verdict) if self.preflight else None)
        self.listing = Listing(db, self.cache, DaglineObjects(api), namespace=settings.namespace, clock=self.clock,
                               who=self.who, bound_s=settings.watch_bound_s)
        self.health.watch_problems = self.listing.problems
        read_secret = secret_reader(api)  # Secrets of the DAG key's namespace, nowhere else
        if executor is not None and hasattr(executor, "read_secret"):
            executor.read_secret = read_secret  # spark-k8s: the tasks' env secretKeyRefs
        self.scheduler = None if executor is None else InstrumentedScheduler(
            db, executor, clock=self.clock, settings=scheduler_settings or SchedulerSettings.from_env(),
            health=self.health, callback_settings=CallbackSettings.from_env(),
            callback_channels={Channel.KUBERNETES_EVENT: kubernetes_event_channel(self.cache, api,
                                                                                  reporter=self.who)},
            secret_reader=SecretReader(read_secret), api_url=settings.try_api_url)
        self.api = None  # the API server, once started
        self.on_fatal: Callable[[], None] | None = None  # called when the scheduler loop dies
        self.failed = False
        self.servers = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *,
                 open_db: Callable[[OperatorSettings], Database] | None = None, clock: Clock | None = None,
                 log_folder: str | None = None, all_namespaces: bool = False, **overrides) -> Runtime:
        """A replica configured by `DAGLINE_*` variables (see `OperatorSettings.from_env`), where `overrides`
        (command-line options) win. The settings are checked first, then the database is opened by
        `open_db` (default: `open_operator_database`, from `DAGLINE_DB_URL`); the executor is the one the
        settings name. `all_namespaces` serves every namespace whatever `DAGLINE_NAMESPACE` says."""
        settings = OperatorSettings.from_env(environ, **overrides)
        if all_namespaces:
            settings = dataclasses.replace(settings, namespace=None)
        clock = clock or SystemClock()
        db = (open_db or open_operator_database)(settings)
        executor = registry.make_executor(settings.executor, parallelism=settings.parallelism, clock=clock,
                                          log_folder=log_folder)
        return cls(settings, db, clock=clock, executor=executor)

    def start(self) -> None:
        from dagline.k8s.probes import ProbeServers

        logformat.configure(self.settings.log_format)  # after kopf set up its logging, so it holds
        self.set_platform_pools()
        metrics.watch_database(database_collector(self.db))  # the database gauges on /metrics
        self.servers = ProbeServers(self).start()
        if self.settings.api_port >= 0:
            from dagline.api import ApiSettings, create_app
            from dagline.api.server import ApiServer

            app = create_app(self.db, ApiSettings.from_env(), clock=self.clock)
            self.api = ApiServer(app, host="0.0.0.0", port=self.settings.api_port).start()
        if self.scheduler is not None:
            self._spawn("dagline-scheduler", self._run_scheduler)
        self._spawn("dagline-status-sync", self._run_sync)
        if self.preflight is not None:
            self._spawn("dagline-spark-preflight", self._run_preflight)
        self._spawn("dagline-listing", self._run_listing)
        log.info("operator replica %s: health on :%s, metrics on :%s, API on :%s, scheduler %s", self.who,
                 self.servers.health_port, self.servers.metrics_port, self.api.port if self.api else "-",
                 "off" if self.scheduler is None else f"with the {self.scheduler.executor.name} executor")

    def set_platform_pools(self) -> None:
        """The platform's shared pools from the chart's values (`DAGLINE_PLATFORM_POOLS`): set. Every
        namespace's tasks naming one take it from then on, whatever pool of that name a namespace made
        (the platform admin's values win; such a Pool object is refused `PlatformPool` by the status sync)."""
        from dagline.store.pools import set_pool

        for name, slots in self.settings.platform_pools:
            action = set_pool(self.db, name, slots, now=self.clock.now(), who=self.who, namespace=None)
            if action != "unchanged":
                log.info("platform pool %s: %s (%s slots)", name, action, slots)

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self.sync.stop()
        if self.scheduler is not None:
            self.scheduler.request_stop()
        for thread in self._threads:
            thread.join(timeout)
            if thread.is_alive():
                log.warning("%s did not stop within %s s", thread.name, timeout)
        self._threads = []
        if self.servers is not None:
            self.servers.stop()
        if self.api is not None:
            self.api.stop()
            self.api = None

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _run_scheduler(self) -> None:
        try:
            self.scheduler.run()
        except BaseException as exc:  # noqa: BLE001 - reported by /healthz and the exit status
            self.health.scheduler_error = f"{type(exc).__name__}: {exc}"
            self.failed = True
            log.exception("the scheduler loop stopped")
            if self.on_fatal is not None:
                self.on_fatal()
        else:
            if not self._stop.is_set():
                self.health.scheduler_error = "it returned without being asked to stop"

    def _run_preflight(self) -> None:
        """The Spark preflight at start, then every `DAGLINE_SPARK_PREFLIGHT_INTERVAL` (every 5 s while its
        probe waits for an answer)."""
        interval = self.scheduler.executor.settings.preflight_interval_s
        while not self._stop.is_set():
            try:
                self.preflight.check()
            except Exception as exc:  # noqa: BLE001 - a preflight must never stop the replica
                log.warning("Spark preflight failed: %s: %s", type(exc).__name__, exc)
            if self._stop.wait(min(interval, 5.0) if self.preflight.probing else interval):
                return

    def _run_listing(self) -> None:
        while True:
            try:
                self.listing.run()
            except Exception as exc:  # noqa: BLE001 - an outage of the API or the database: next time
                self.listing.stats.failed_listings += 1
                log.warning("listing of the served objects failed: %s: %s", type(exc).__name__, exc)
            if self._stop.wait(self.settings.list_interval_s):
                return

    def _run_sync(self) -> None:
        while True:
            try:
                self.sync.sync()
            except SyncStopped:
                return
            except Exception as exc:  # noqa: BLE001 - an outage of the database or the API: next time
                self.sync.stats.failed_syncs += 1
                log.warning("status sync failed: %s: %s", type(exc).__name__, exc)
            self.health.sync_beat = time.monotonic()
            if self._stop.wait(self.settings.status_interval_s):
                return

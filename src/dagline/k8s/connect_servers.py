"""The DAGs' Spark Connect servers as one `spark-k8s` executor replica knows them (ADR 0086).

A Connect try (`spark.connect: true`) runs as a Pod against its DAG's spark-operator `SparkConnect`
(`dagline.k8s.sparkconnect` builds both). Before a try's Pod is created, `in_use` makes sure the server
exists (created by the DAG's first Connect try; a 409 means a replica or an earlier try created it), is
`Ready` (looked at at most once per `look_interval_s`) and carries this sync's `dagline.io/last-used`
mark, written before any Pod uses it. `delete_idle` (at most once per `idle_check_interval_s`, by any
replica that ran a Connect try) deletes the servers dagline created that no try started on for
`DAGLINE_SPARK_CONNECT_IDLE_TIMEOUT` and that no Pod uses, each with a `resourceVersion` precondition,
so a mark by another replica in between keeps it.

The executor (`dagline.k8s.executor`) owns the tries; this module owns the servers and answers it with
a `Use`: ready, not yet (why, for the try's pending-timeout message), or refused (the try fails).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Callable, Collection

from dagline.executors.base import TaskLaunch
from dagline.k8s import sparkconnect
from dagline.k8s.client import AlreadyExists, ApiRejected, ApiUnavailable, Pods, SparkConnects
from dagline.k8s.spark_settings import SparkK8sSettings

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Server:
    """A DAG's SparkConnect as this replica knows it."""

    name: str
    manifest: dict
    created: bool = False            # exists (created here, or found)
    ready: bool = False              # last seen `status.state: Ready`
    state: str = ""                  # what the last look said
    checked: float = float("-inf")   # monotonic time of the last look
    marked: int = -1                 # the sync at which `dagline.io/last-used` was last written


@dataclasses.dataclass(frozen=True)
class Use:
    """Whether a try may use its server now: `ready`; else `waiting` says why (the try waits for a
    later sync), or `refused` is why the try fails."""

    ready: bool
    waiting: str | None = None
    refused: str | None = None


READY = Use(True)


class ConnectServers:
    """The SparkConnects of this replica's Connect tries, by name."""

    def __init__(self, settings: SparkK8sSettings, *, connects: Callable[[], SparkConnects], pods: Callable[[], Pods],
                 clock, on_api_error: Callable[[str, Exception], None], look_interval_s: float,
                 idle_check_interval_s: float):
        self.settings = settings
        self._connects = connects
        self._pods = pods
        self.clock = clock
        self._api_error = on_api_error
        self.look_interval_s = look_interval_s  # at most one look at a server not Ready per this long
        self.idle_check_interval_s = idle_check_interval_s  # at most one look for idle servers per this long
        self._last_idle_check = float("-inf")
        self.known: dict[str, Server] = {}

    def build_try(self, launch: TaskLaunch, now: dt.datetime) -> tuple[str, dict]:
        """A Connect try's server name and Pod manifest; its server is remembered, created at `in_use`."""
        s = self.settings
        server = sparkconnect.build_server(launch, namespace=s.namespace, image=s.connect_image,
                                           spark_version=s.connect_spark_version, service_account=s.service_account,
                                           pod_security=s.pod_security, used_at=now)
        name = server["metadata"]["name"]
        pod = sparkconnect.build_driver_pod(launch, server=name, namespace=s.namespace,
                                            default_image=s.connect_client_image, pod_security=s.pod_security,
                                            launched_at=now)
        self.known.setdefault(name, Server(name, server))
        return name, pod

    def in_use(self, name: str | None, sync: int) -> Use:
        """Ready once the server exists, is Ready and carries the mark of sync number `sync` (written
        before any Pod uses it, so a replica deleting it as idle at the same time fails its precondition)."""
        server = self.known.get(name)
        if server is None:  # followed after an adoption: nothing to create
            return READY
        if not server.created:
            try:
                self._connects().create(server.manifest)
            except AlreadyExists:
                pass  # this DAG's server for this size, created by a replica or an earlier try
            except ApiRejected as exc:
                hint = (" (is the spark-operator 2.3 or later installed, with its sparkconnects.sparkoperator.k8s.io "
                        "CRD?)" if exc.status == 404 else "")
                return Use(False, refused=f"the Kubernetes API refused the SparkConnect {server.name} (the DAG's "
                                          f"Spark Connect server): {exc}{hint}")
            except ApiUnavailable as exc:
                self._api_error(f"creating SparkConnect {server.name}", exc)
                return Use(False, waiting=str(exc))
            server.created = True
            server.checked = float("-inf")
        if not server.ready:
            if time.monotonic() - server.checked >= self.look_interval_s:
                self._look_at(server)
            if not server.ready:
                return Use(False, waiting=f"the Spark Connect server {server.name} is not Ready "
                                          f"({server.state or 'no state'})")
        if server.marked != sync:
            try:
                seen = self._connects().patch_metadata(
                    server.name, {"annotations": {sparkconnect.ANNOTATION_LAST_USED: self.clock.now().isoformat()}})
            except (ApiUnavailable, ApiRejected) as exc:
                self._api_error(f"marking SparkConnect {server.name} in use", exc)
                return Use(False, waiting=str(exc))
            if seen is None:  # deleted as idle meanwhile: created again at the next sync
                server.created = server.ready = False
                return Use(False, waiting=f"the Spark Connect server {server.name} was deleted; it is created again")
            server.marked = sync
        return READY

    def awaited(self, name: str | None) -> Server | None:
        """The try's server, when it was created and the try waited for it to be Ready (for the message
        of its pending timeout); None when the server is not the reason."""
        server = self.known.get(name)
        return server if server is not None and server.created else None

    def idle_check_due(self) -> bool:
        return bool(self.known) and time.monotonic() - self._last_idle_check >= self.idle_check_interval_s

    def delete_idle(self, followed: Collection[str]) -> None:
        """Delete dagline's SparkConnects that no try has started on for DAGLINE_SPARK_CONNECT_IDLE_TIMEOUT,
        that no try this replica follows (`followed`: their servers' names) and no Pod uses, each only in
        the version seen (a try marking it meanwhile keeps it)."""
        self._last_idle_check = time.monotonic()
        try:
            servers = self._connects().list(sparkconnect.SERVERS_SELECTOR)
        except (ApiUnavailable, ApiRejected) as exc:
            if not (isinstance(exc, ApiRejected) and exc.status == 404):  # no SparkConnect CRD: nothing to do
                self._api_error("listing SparkConnects", exc)
            return
        now = self.clock.now()
        idle = dt.timedelta(seconds=self.settings.connect_idle_timeout_s)
        for obj in servers:
            meta = obj.get("metadata") or {}
            name, used = meta.get("name"), sparkconnect.last_used(obj)
            known = self.known.get(name)
            if known is not None:  # seen anyway: keep what this replica knows of its readiness current
                known.ready, known.state = sparkconnect.server_ready(obj), sparkconnect.server_state(obj)
                known.checked = time.monotonic()
            if used is None or now - used < idle or name in followed:
                continue
            try:
                if self._pods().list(f"{sparkconnect.PODS_SELECTOR}={name}"):
                    continue  # a try of another replica still runs on it
                self._connects().delete(name, resource_version=meta.get("resourceVersion"))
            except ApiRejected as exc:
                log.info("SparkConnect %s not deleted as idle: %s", name, exc)  # 409: marked in use meanwhile
                continue
            except ApiUnavailable as exc:
                self._api_error(f"deleting idle SparkConnect {name}", exc)
                return
            log.info("SparkConnect %s deleted: idle since %s", name, used.isoformat())
            if known is not None:
                known.created = known.ready = False  # a later try of its DAG creates it again

    def forget(self) -> None:
        """The replica stops following: servers stay for the other replicas (an idle one is deleted by
        whoever sees it)."""
        self.known.clear()

    def _look_at(self, server: Server) -> None:
        server.checked = time.monotonic()
        try:
            obj = self._connects().get(server.name)
        except (ApiUnavailable, ApiRejected) as exc:
            self._api_error(f"reading SparkConnect {server.name}", exc)
            return
        if obj is None:
            server.created = server.ready = False
            server.state = "deleted"
            return
        server.ready = sparkconnect.server_ready(obj)
        server.state = sparkconnect.server_state(obj)

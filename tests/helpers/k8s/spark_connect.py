"""A stand-in for the spark-operator's SparkConnect controller, and a kubelet for Spark Connect tries' Pods.

It plays, over HTTP against the emulator, the two parts a Spark Connect task on Kubernetes meets:

* **the SparkConnect controller** (`sparkoperator.k8s.io/v1alpha1` `sparkconnects`, every namespace): for a
  new server it creates the server Pod `<name>-server` (owned by the SparkConnect, labelled as the real
  controller labels it) and writes `status` as the real one does: `state: NotReady`, then `Ready` with the
  `ServerPodReady` condition, `server.podName` and `server.serviceName` (`<name>-server`). In mode `pyspark`
  the server is real: a local Spark Connect server (`dagline.executors.connect_server`, one per
  SparkConnect) that is Ready once it listens; in mode `instant` it is Ready at once and serves nothing.
  `hold()` keeps new servers NotReady (a server that cannot start).
* **a kubelet for the tries' Pods** (those labelled `dagline.io/connect-server`): it waits, Pending, until
  every `secretKeyRef` of the container's env can be read (as the kubelet retries a missing Secret), then
  runs the container's `command` as a local process (`python` is this interpreter) with that env -- and
  `SPARK_REMOTE` pointing at the local server in mode `pyspark` -- writing `status.phase` Running, then
  Succeeded or Failed with the container's `terminated` state (`exitCode`, `reason`, and with
  `terminationMessagePolicy: FallbackToLogsOnError` the log's last lines as `message`). Its output is
  the Pod's log (`emulator.pod_logs`). Deleting a Pod sends its process SIGTERM, then SIGKILL after the
  Pod's `terminationGracePeriodSeconds`.

It polls (every 50 ms) instead of watching: it is a test helper, and polling keeps it short.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from tests.helpers.k8s.cluster import Cluster, KubeApiError

GROUP, VERSION, PLURAL = "sparkoperator.k8s.io", "v1alpha1", "sparkconnects"
TRY_LABEL = "dagline.io/connect-server"
TAIL_BYTES = 2048  # what the kubelet keeps of a log as a termination message


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass(eq=False)
class Server:
    namespace: str
    name: str
    uid: str
    process: Any = None   # dagline's ConnectServer in mode pyspark
    ready: bool = False


@dataclasses.dataclass(eq=False)
class Job:
    namespace: str
    name: str
    uid: str
    pod: dict[str, Any]
    proc: subprocess.Popen | None = None
    log: Path | None = None
    done: bool = False
    killed_at: float | None = None


class SparkConnectOperator:
    """Start with `.start()`, stop with `.stop()`; `servers`, `jobs` and `hold()` are what tests use."""

    def __init__(self, cluster: Cluster, mode: str = "instant", *, logs: Path):
        if mode not in ("instant", "pyspark"):
            raise ValueError(f"mode must be instant or pyspark, not {mode!r}")
        self.cluster = cluster
        self.mode = mode
        self.logs = logs
        self.servers: dict[str, Server] = {}   # by uid
        self.jobs: dict[str, Job] = {}         # by uid
        self.errors: list[str] = []
        self.held = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, held: bool = True) -> SparkConnectOperator:
        """Keep servers NotReady (as a server pod that cannot start) until `hold(False)`."""
        self.held = held
        return self

    def start(self) -> SparkConnectOperator:
        self.logs.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._loop, name="sparkconnect-operator", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        for job in self.jobs.values():
            self._kill(job, grace=0)
        for server in self.servers.values():
            if server.process is not None:
                server.process.stop()

    # ------------------------------------------------------------------------------------ loop
    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._servers_tick()
                self._pods_tick()
            except Exception as exc:  # noqa: BLE001 - kept for the test to see, the loop goes on
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self._stop.wait(0.05)

    def _servers_tick(self) -> None:
        listed = self.cluster.request("GET", f"/apis/{GROUP}/{VERSION}/{PLURAL}")["items"]
        seen = set()
        for obj in listed:
            meta = obj["metadata"]
            seen.add(meta["uid"])
            server = self.servers.get(meta["uid"])
            if server is None:
                server = self.servers[meta["uid"]] = Server(meta["namespace"], meta["name"], meta["uid"])
                self._server_pod(server)
                if self.mode == "pyspark":
                    server.process = self._local_server(server)
                self._status(server, ready=False)
            if not server.ready and not self.held and self._listening(server):
                server.ready = True
                self._status(server, ready=True)
        for uid in [uid for uid in self.servers if uid not in seen]:  # deleted: its pod went with it
            server = self.servers.pop(uid)
            if server.process is not None:
                server.process.stop()

    def _local_server(self, server: Server):
        from dagline.executors.connect_server import ConnectServer, ConnectSettings

        process = ConnectServer(ConnectSettings(driver_memory="512m", cores=1, start_timeout_s=600),
                                self.logs / f"{server.namespace}.{server.name}-server.log")
        process.ensure()
        return process

    def _listening(self, server: Server) -> bool:
        if server.process is None:
            return True
        return server.process.check() is None and server.process.healthy  # listens (never blocks the loop)

    def _server_pod(self, server: Server) -> None:
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"{server.name}-server", "namespace": server.namespace,
                             "labels": {"sparkoperator.k8s.io/launched-by-spark-operator": "true",
                                        "sparkoperator.k8s.io/connect-name": server.name,
                                        "spark-role": "connect-server"},
                             "ownerReferences": [{"apiVersion": f"{GROUP}/{VERSION}", "kind": "SparkConnect",
                                                  "name": server.name, "uid": server.uid, "controller": True}]},
                "spec": {"containers": [{"name": "spark-kubernetes-driver", "image": "spark"}]}}
        try:
            self.cluster.request("POST", f"/api/v1/namespaces/{server.namespace}/pods", body)
        except KubeApiError as exc:
            if exc.status != 409:
                raise

    def _status(self, server: Server, *, ready: bool) -> None:
        condition = {"type": "ServerPodReady", "status": "True" if ready else "False",
                     "reason": "ServerPodReady" if ready else "ServerPodNotReady",
                     "message": "Server pod is ready" if ready else "Server pod is not ready: ContainersNotReady",
                     "lastTransitionTime": _now()}
        status = {"state": "Ready" if ready else "NotReady", "conditions": [condition], "startTime": _now(),
                  "lastUpdateTime": _now(),
                  "server": {"podName": f"{server.name}-server", "serviceName": f"{server.name}-server"}}
        try:
            self.cluster.request("PATCH", f"/apis/{GROUP}/{VERSION}/namespaces/{server.namespace}/{PLURAL}/"
                                          f"{server.name}/status", {"status": status},
                                 content_type="application/merge-patch+json")
        except KubeApiError as exc:
            if exc.status != 404:
                raise

    # ------------------------------------------------------------------------------------ kubelet
    def _pods_tick(self) -> None:
        listed = self.cluster.request("GET", "/api/v1/pods", params={"labelSelector": TRY_LABEL})["items"]
        seen = set()
        for pod in listed:
            meta = pod["metadata"]
            seen.add(meta["uid"])
            job = self.jobs.get(meta["uid"])
            if job is None:
                job = self.jobs[meta["uid"]] = Job(meta["namespace"], meta["name"], meta["uid"], pod)
            if job.proc is None and not job.done:
                self._run(job)
            elif job.proc is not None and job.proc.poll() is not None and not job.done:
                self._finished(job)
        for uid in [uid for uid in self.jobs if uid not in seen]:
            job = self.jobs[uid]
            if job.proc is not None and job.proc.poll() is None:
                self._kill(job, grace=float((job.pod["spec"].get("terminationGracePeriodSeconds") or 30)))
            elif job.proc is None or job.proc.poll() is not None:
                del self.jobs[uid]

    def _env(self, job: Job) -> dict[str, str] | None:
        """The container's env, its secretKeyRefs read; None while a Secret or key is missing."""
        [container] = job.pod["spec"]["containers"]
        env = {}
        for item in container.get("env") or ():
            ref = (item.get("valueFrom") or {}).get("secretKeyRef")
            if ref is None:
                env[item["name"]] = str(item.get("value", ""))
                continue
            try:
                secret = self.cluster.request("GET", f"/api/v1/namespaces/{job.namespace}/secrets/{ref['name']}")
            except KubeApiError as exc:
                if exc.status == 404:
                    return None
                raise
            data = {**{k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()},
                    **(secret.get("stringData") or {})}
            if ref["key"] not in data:
                return None
            env[item["name"]] = data[ref["key"]]
        return env

    def _run(self, job: Job) -> None:
        env = self._env(job)
        if env is None:
            return  # Pending (CreateContainerConfigError): tried again at the next tick
        [container] = job.pod["spec"]["containers"]
        if self.mode == "pyspark":
            server = next((s for s in self.servers.values() if s.namespace == job.namespace
                           and s.name == job.pod["metadata"]["labels"][TRY_LABEL]), None)
            if server is not None and server.process is not None:
                env["SPARK_REMOTE"] = server.process.url
        command = [sys.executable if c == "python" else c for c in container["command"]]
        job.log = self.logs / f"{job.namespace}.{job.name}.log"
        self.cluster.emulator.pod_logs[(job.namespace, job.name)] = job.log
        with open(job.log, "ab") as log:
            job.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                        env={**os.environ, **env})
        self._phase(job, "Running", {"running": {"startedAt": _now()}})

    def _finished(self, job: Job) -> None:
        job.done = True
        code = job.proc.returncode
        code = 128 - code if code < 0 else code  # killed by a signal: the kubelet's 128 + signal
        terminated: dict[str, Any] = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                      "finishedAt": _now()}
        [container] = job.pod["spec"]["containers"]
        if code != 0 and container.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            terminated["message"] = job.log.read_bytes()[-TAIL_BYTES:].decode(errors="replace")
        self._phase(job, "Succeeded" if code == 0 else "Failed", {"terminated": terminated})

    def _phase(self, job: Job, phase: str, state: dict[str, Any]) -> None:
        status = {"phase": phase, "containerStatuses": [{"name": "job", "state": state, "ready": phase == "Running",
                                                         "restartCount": 0, "image": "job", "imageID": ""}]}
        try:
            self.cluster.request("PATCH", f"/api/v1/namespaces/{job.namespace}/pods/{job.name}/status",
                                 {"status": status}, content_type="application/merge-patch+json")
        except KubeApiError as exc:
            if exc.status != 404:
                raise

    def _kill(self, job: Job, *, grace: float) -> None:
        proc = job.proc
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        except OSError:
            pass

"""A stand-in for the Kubeflow spark-operator: it watches SparkApplications over HTTP and writes their status.

It plays the operator's part for the spark-k8s executor's tests. Like the real one, it watches
`sparkoperator.k8s.io/v1beta2` `sparkapplications` in every namespace, submits each new application
once, and moves `status.applicationState.state` through the operator's states:

    "" -> SUBMITTED -> RUNNING -> SUCCEEDING -> COMPLETED
                              \\-> FAILING -> FAILED  (-> PENDING_RERUN -> SUBMITTED ... with restartPolicy)
       -> SUBMISSION_FAILED
    a spec change: INVALIDATING -> PENDING_RERUN -> SUBMITTED ...

writing `submissionAttempts`, `lastSubmissionAttemptTime`, `submissionID`, `driverInfo.podName`,
`sparkApplicationId`, `executionAttempts`, `terminationTime` and `applicationState.errorMessage`
through the status subresource. Deleting an application stops its run.

Which namespaces it watches (`namespaces`, the real one's `spark.jobNamespaces`): every one by default
(None); a list makes it ignore applications elsewhere, as the real one does with its default `[default]`.
An application with `spec.suspend: true` goes SUSPENDING -> SUSPENDED and is never submitted (2.4+).

What an application does is chosen per test:
- mode `instant` (the default): every application completes at once;
- rules (`operator.on(match, Behaviour(...))`, the `script` mode): a behaviour for the applications a
  rule matches (by name glob, labels or a predicate), e.g. fail the first try, stay SUBMITTED forever,
  run for N seconds; unmatched applications follow the mode;
- mode `pyspark`: runs `spec.mainApplicationFile` with the installed pyspark's `spark-submit` in local mode,
  with `spec.arguments` and `spec.sparkConf` (`local:///x` and `file:///x` mean `/x`; a relative path is
  taken from `workdir`), COMPLETED on exit 0, else FAILED with the log's last line as `errorMessage`.
"""

from __future__ import annotations

import dataclasses
import datetime
import fnmatch
import heapq
import http.client
import itertools
import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.helpers.k8s.cluster import Cluster, KubeApiError

GROUP, VERSION, PLURAL = "sparkoperator.k8s.io", "v1beta2", "sparkapplications"

SUBMITTED, RUNNING, COMPLETED, FAILED = "SUBMITTED", "RUNNING", "COMPLETED", "FAILED"
SUBMISSION_FAILED, PENDING_RERUN, INVALIDATING = "SUBMISSION_FAILED", "PENDING_RERUN", "INVALIDATING"
SUCCEEDING, FAILING, UNKNOWN = "SUCCEEDING", "FAILING", "UNKNOWN"
TERMINAL = (COMPLETED, FAILED, SUBMISSION_FAILED)


@dataclasses.dataclass(frozen=True)
class Behaviour:
    """What one run of an application does.

    `outcome`: COMPLETED, FAILED or SUBMISSION_FAILED. `stay`: stop in this state for good (SUBMITTED,
    RUNNING, or UNKNOWN as when the driver pod is lost). `seconds`: time spent RUNNING. `error`: the
    errorMessage of a failure. `pyspark`: really run the application (the `pyspark` mode).
    """

    outcome: str = COMPLETED
    stay: str | None = None
    seconds: float = 0.0
    error: str = "driver container failed with ExitCode: 1, Reason: Error"
    pyspark: bool = False

    @classmethod
    def fail(cls, error: str = "driver container failed with ExitCode: 1, Reason: Error", seconds: float = 0.0
             ) -> Behaviour:
        return cls(outcome=FAILED, error=error, seconds=seconds)

    @classmethod
    def reject(cls, error: str = "failed to run spark-submit: admission webhook denied the request") -> Behaviour:
        return cls(outcome=SUBMISSION_FAILED, error=error)

    @classmethod
    def hang(cls, state: str = SUBMITTED) -> Behaviour:
        return cls(stay=state)

    @classmethod
    def slow(cls, seconds: float) -> Behaviour:
        return cls(seconds=seconds)


INSTANT = Behaviour()
PYSPARK = Behaviour(pyspark=True)


@dataclasses.dataclass
class Rule:
    match: Callable[[dict[str, Any]], bool]
    behaviour: Behaviour
    times: int | None  # how many runs it still applies to (None: all)


@dataclasses.dataclass
class Submission:
    """One run the stand-in started: which application, which try of it, with what spec."""

    namespace: str
    name: str
    uid: str
    attempt: int
    spec: dict[str, Any]
    behaviour: Behaviour


@dataclasses.dataclass(eq=False)
class App:
    namespace: str
    name: str
    uid: str
    generation: int
    spec: dict[str, Any]
    labels: dict[str, str]
    status: dict[str, Any] = dataclasses.field(default_factory=dict)
    run: int = 0                       # bumped when a run is cancelled: timers of older runs are ignored
    proc: subprocess.Popen | None = None
    log: Path | None = None
    behaviour: Behaviour = INSTANT
    gone: bool = False


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def local_path(uri: str, workdir: Path) -> str:
    """`local:///a/b.py` and `file:///a/b.py` -> `/a/b.py`; a relative path is taken from `workdir`."""
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme in ("local", "file"):
        return urllib.parse.unquote(parsed.path)
    return uri if os.path.isabs(uri) else str(workdir / uri)


def last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def spark_submit() -> str:
    from pyspark.find_spark_home import _find_spark_home

    return os.path.join(_find_spark_home(), "bin", "spark-submit")


class SparkOperator:
    """Start with `.start()`, stop with `.stop()`; `mode`, `on()` and `submissions` are what tests use."""

    def __init__(self, cluster: Cluster, mode: str = "instant", *, workdir: Path | None = None,
                 logs: Path | None = None, namespaces: list[str] | None = None):
        self.cluster = cluster
        self.namespaces = namespaces  # None: every namespace (may be changed while it runs)
        self.mode = mode
        self.workdir = workdir or Path.cwd()
        self.logs = logs or Path(cluster.kubeconfig_path).parent / "spark-operator-logs"
        self.submissions: list[Submission] = []
        self.errors: list[str] = []
        self._rules: list[Rule] = []
        self._apps: dict[str, App] = {}            # by uid
        self._inbox: queue.Queue = queue.Queue()
        self._timers: list[tuple[float, int, str, int, str]] = []   # (due, seq, uid, run, step)
        self._seq = itertools.count()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None
        self._threads: list[threading.Thread] = []

    # --------------------------------------------------------------------------------- test API
    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        if value not in ("instant", "script", "pyspark"):
            raise ValueError(f"mode must be instant, script or pyspark, not {value!r}")
        self._mode = value

    def on(self, match: str | dict[str, str] | Callable[[dict[str, Any]], bool], behaviour: Behaviour, *,
           times: int | None = None) -> SparkOperator:
        """Give `behaviour` to the applications `match` selects: a name glob (`"*-try-1"`), labels that must all
        be present (`{"dagline.io/try": "1"}`) or a predicate on the object. `times`: for that many runs only.
        Rules are tried in the order they were added; the first that applies wins."""
        if isinstance(match, str):
            pattern = match
            predicate = lambda obj: fnmatch.fnmatchcase(obj["metadata"]["name"], pattern)  # noqa: E731
        elif isinstance(match, dict):
            wanted = dict(match)
            predicate = lambda obj: all(  # noqa: E731
                (obj["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())
        else:
            predicate = match
        with self._lock:
            self._rules.append(Rule(predicate, behaviour, times))
        return self

    def watch_namespaces(self, namespaces: list[str] | None) -> None:
        """Watch these namespaces from now on (None: every one), as the real operator restarted with new
        `--namespaces`: it lists again and picks up the applications it now watches."""
        self.namespaces = namespaces
        for obj in self.cluster.request("GET", f"/apis/{GROUP}/{VERSION}/{PLURAL}")["items"]:
            self._inbox.put(("ADDED", obj))

    def log_of(self, namespace: str, name: str) -> Path:
        """Where the `pyspark` mode writes an application's spark-submit output."""
        return self.logs / f"{namespace}.{name}.log"

    def submissions_of(self, name: str) -> list[Submission]:
        return [s for s in self.submissions if s.name == name]

    # -------------------------------------------------------------------------------- lifecycle
    def start(self) -> SparkOperator:
        self.logs.mkdir(parents=True, exist_ok=True)
        listed = threading.Event()
        for target, name in ((self._watch_loop, "spark-operator-watch"), (self._work_loop, "spark-operator")):
            thread = threading.Thread(target=target, name=name, daemon=True,
                                      args=(listed,) if target == self._watch_loop else ())
            thread.start()
            self._threads.append(thread)
        if not listed.wait(10):
            raise RuntimeError(f"the spark-operator stand-in could not list SparkApplications: {self.errors}")
        return self

    def stop(self) -> None:
        self._stop.set()
        conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._inbox.put(None)
        for thread in self._threads:
            thread.join(5)
        for app in self._apps.values():
            self._kill(app)
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            raise RuntimeError(f"spark-operator threads did not stop: {alive}")

    # --------------------------------------------------------------------------------- watching
    def _watch_loop(self, listed: threading.Event) -> None:
        path = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
        url = urllib.parse.urlparse(self.cluster.url)
        rv = None
        while not self._stop.is_set():
            try:
                if rv is None:
                    answer = self.cluster.request("GET", path)
                    for obj in answer["items"]:
                        self._inbox.put(("ADDED", obj))
                    rv = answer["metadata"]["resourceVersion"]
                    listed.set()
                self._conn = http.client.HTTPConnection(url.hostname, url.port)
                self._conn.request("GET", f"{path}?watch=true&allowWatchBookmarks=true&resourceVersion={rv}")
                response = self._conn.getresponse()
                while not self._stop.is_set():
                    line = response.readline()
                    if not line:
                        break
                    event = json.loads(line)
                    if event["type"] == "ERROR":
                        rv = None  # 410 Gone and friends: list again
                        break
                    rv = event["object"]["metadata"].get("resourceVersion", rv)
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self._inbox.put((event["type"], event["object"]))
            except (OSError, http.client.HTTPException, ValueError, KubeApiError) as exc:
                if not self._stop.is_set():
                    self.errors.append(f"watch: {exc!r}")
                    time.sleep(0.05)
            finally:
                if self._conn is not None:
                    self._conn.close()

    # ---------------------------------------------------------------------------------- working
    def _work_loop(self) -> None:
        while not self._stop.is_set():
            timeout = 0.05 if any(a.proc for a in self._apps.values()) else 0.5
            if self._timers:
                timeout = max(0.0, min(timeout, self._timers[0][0] - time.monotonic()))
            try:
                item = self._inbox.get(timeout=timeout)
            except queue.Empty:
                item = None
            try:
                if item is not None:
                    self._on_event(*item)
                while self._timers and self._timers[0][0] <= time.monotonic():
                    _due, _seq, uid, run, step = heapq.heappop(self._timers)
                    app = self._apps.get(uid)
                    if app is not None and not app.gone and app.run == run:
                        self._step(app, step)
                for app in list(self._apps.values()):
                    if app.proc is not None and app.proc.poll() is not None:
                        self._finished(app)
            except Exception as exc:  # noqa: BLE001 - kept for the test to see, the loop goes on
                self.errors.append(f"work: {exc!r}")

    def _on_event(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        uid = meta["uid"]
        app = self._apps.get(uid)
        if self.namespaces is not None and meta["namespace"] not in self.namespaces:
            return  # not a namespace it watches: as if it never saw the application
        if kind == "DELETED":
            if app is not None:
                app.gone = True
                self._kill(app)
                del self._apps[uid]
            return
        state = ((obj.get("status") or {}).get("applicationState") or {}).get("state", "")
        if app is None:
            app = App(meta["namespace"], meta["name"], uid, meta.get("generation", 1), obj.get("spec") or {},
                      meta.get("labels") or {}, status=obj.get("status") or {})
            self._apps[uid] = app
            if state in ("", None) and (obj.get("spec") or {}).get("suspend"):
                self._write(app, "SUSPENDING")
                self._write(app, "SUSPENDED")
            elif state in ("", None):
                self._submit(app, obj)
            return  # an application someone else already ran is left as it is
        if meta.get("generation", 1) != app.generation:  # the spec changed: the operator re-runs it
            app.generation, app.spec = meta.get("generation", 1), obj.get("spec") or {}
            self._kill(app)
            app.run += 1
            self._write(app, INVALIDATING, executionAttempts=0, submissionAttempts=0)
            self._write(app, PENDING_RERUN)
            self._submit(app, obj)

    def _behaviour(self, obj: dict[str, Any]) -> Behaviour:
        with self._lock:
            for rule in self._rules:
                if (rule.times is None or rule.times > 0) and rule.match(obj):
                    if rule.times is not None:
                        rule.times -= 1
                    return rule.behaviour
        return PYSPARK if self.mode == "pyspark" else INSTANT

    def _submit(self, app: App, obj: dict[str, Any]) -> None:
        app.behaviour = behaviour = self._behaviour(obj)
        attempts = int(app.status.get("submissionAttempts") or 0) + 1
        self.submissions.append(Submission(app.namespace, app.name, app.uid, attempts,
                                           json.loads(json.dumps(app.spec)), behaviour))
        common = {"submissionAttempts": attempts, "lastSubmissionAttemptTime": _now()}
        if behaviour.outcome == SUBMISSION_FAILED:
            self._write(app, SUBMISSION_FAILED, error=behaviour.error, terminationTime=_now(), **common)
            return
        self._write(app, SUBMITTED, submissionID=str(uuid.uuid4()),
                    driverInfo={"podName": f"{app.name}-driver"}, **common)
        self._driver_pod(app, obj)
        if behaviour.stay == SUBMITTED:
            return
        self._timer(app, 0.0, RUNNING)

    def _timer(self, app: App, delay: float, step: str) -> None:
        heapq.heappush(self._timers, (time.monotonic() + delay, next(self._seq), app.uid, app.run, step))

    def _step(self, app: App, step: str) -> None:
        behaviour = app.behaviour
        if step == RUNNING:
            executions = int(app.status.get("executionAttempts") or 0) + 1
            self._write(app, RUNNING, executionAttempts=executions,
                        sparkApplicationId=f"spark-{uuid.uuid4().hex}")
            if behaviour.stay in (RUNNING, UNKNOWN):
                if behaviour.stay == UNKNOWN:
                    self._write(app, UNKNOWN)
                return
            if behaviour.pyspark:
                self._launch(app)
            else:
                self._timer(app, behaviour.seconds, "END")
        elif step == "END":
            self._end(app, behaviour.outcome == COMPLETED, behaviour.error)

    def _end(self, app: App, success: bool, error: str) -> None:
        if success:
            self._write(app, SUCCEEDING)
            self._write(app, COMPLETED, terminationTime=_now())
            return
        self._write(app, FAILING, error=error)
        policy = app.spec.get("restartPolicy") or {}
        retries = int(policy.get("onFailureRetries") or 0)
        if policy.get("type") in ("OnFailure", "Always") and int(app.status.get("executionAttempts") or 0) <= retries:
            self._write(app, PENDING_RERUN, error=error, submissionAttempts=0)
            app.run += 1
            self._submit(app, {"metadata": {"name": app.name, "namespace": app.namespace, "labels": app.labels},
                               "spec": app.spec})
            return
        self._write(app, FAILED, error=error, terminationTime=_now())

    def _driver_pod(self, app: App, obj: dict[str, Any]) -> None:
        """The driver Pod the real operator's spark-submit creates (owned by the application, so deleting
        the application collects it), with its log: the job's output in pyspark mode, else a few lines."""
        pod = f"{app.name}-driver"
        uid = (obj.get("metadata") or {}).get("uid") or app.uid
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod, "namespace": app.namespace,
                             "labels": {"spark-role": "driver", "sparkoperator.k8s.io/app-name": app.name},
                             "ownerReferences": [{"apiVersion": f"{GROUP}/{VERSION}", "kind": "SparkApplication",
                                                  "name": app.name, "uid": uid, "controller": True}]},
                "spec": {"containers": [{"name": "spark-kubernetes-driver", "image": app.spec.get("image") or "spark"}]}}
        try:
            self.cluster.request("POST", f"/api/v1/namespaces/{app.namespace}/pods", body)
        except Exception as exc:  # noqa: BLE001 - a rerun finds its pod there already
            if getattr(exc, "status", None) != 409:
                raise
        behaviour = app.behaviour
        if behaviour.pyspark:
            self.cluster.emulator.pod_logs[(app.namespace, pod)] = self.log_of(app.namespace, app.name)
        else:
            outcome = "exits with an error: " + behaviour.error if behaviour.outcome == FAILED else "completes"
            self.cluster.emulator.pod_logs[(app.namespace, pod)] = (
                f"[spark-operator stand-in] driver of {app.namespace}/{app.name} (run {app.run})\n"
                f"main application file: {app.spec.get('mainApplicationFile')}\n"
                f"arguments: {' '.join(str(a) for a in app.spec.get('arguments') or ())}\n"
                f"the job {outcome}\n")

    # ---------------------------------------------------------------------------------- pyspark
    def _launch(self, app: App) -> None:
        spec = app.spec
        main = spec.get("mainApplicationFile")
        if not main:
            self._end(app, False, "spec.mainApplicationFile: Required value")
            return
        cmd = [spark_submit(), "--master", "local[1]", "--name", app.name,
               "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
               "--conf", "spark.ui.enabled=false"]
        for key, value in (spec.get("sparkConf") or {}).items():
            cmd += ["--conf", f"{key}={value}"]
        for key, value in (spec.get("hadoopConf") or {}).items():
            cmd += ["--conf", f"spark.hadoop.{key}={value}"]
        py_files = (spec.get("deps") or {}).get("pyFiles") or []
        if py_files:
            cmd += ["--py-files", ",".join(local_path(p, self.workdir) for p in py_files)]
        cmd.append(local_path(main, self.workdir))
        cmd += [str(a) for a in spec.get("arguments") or ()]
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
                   PYSPARK_DRIVER_PYTHON=sys.executable)
        for item in ((spec.get("driver") or {}).get("env") or ()):
            if "name" in item and "value" in item:
                env[item["name"]] = str(item["value"])
        app.log = self.log_of(app.namespace, app.name)
        with open(app.log, "ab") as log:
            log.write(f"[spark-operator stand-in] {subprocess.list2cmdline(cmd)}\n".encode())
            app.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.workdir,
                                        start_new_session=True)

    def _finished(self, app: App) -> None:
        code = app.proc.returncode
        app.proc = None
        self._end(app, code == 0, f"driver exited with code {code}: {last_line(app.log)}")

    def _kill(self, app: App) -> None:
        proc, app.proc = app.proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, 15)
                proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()

    # ---------------------------------------------------------------------------------- writing
    def _write(self, app: App, state: str, *, error: str | None = None, **fields: Any) -> None:
        """Write one state through the status subresource, as the operator's status update does."""
        status = dict(app.status)
        status.update(fields)
        status["applicationState"] = {"state": state, "errorMessage": error}  # None clears an older message
        try:
            self.cluster.request("PATCH", f"/apis/{GROUP}/{VERSION}/namespaces/{app.namespace}/{PLURAL}/{app.name}"
                                          "/status", {"status": status}, content_type="application/merge-patch+json")
        except KubeApiError as exc:
            if exc.status == 404:  # deleted meanwhile: the DELETED event ends it
                app.gone = True
                self._kill(app)
                return
            raise
        status["applicationState"] = {"state": state, **({"errorMessage": error} if error else {})}
        app.status = status

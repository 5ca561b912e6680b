"""Spark Connect tasks on Kubernetes: the DAG's SparkConnect server and each try's small driver Pod.

Pure code (no API calls). The `spark-k8s` executor (`dagline.k8s.executor`) runs a task with
`spark.connect: true` this way instead of as a SparkApplication (ADR 0086):

* **One server per DAG**, a spark-operator `sparkoperator.k8s.io/v1alpha1` `SparkConnect` that dagline
  creates (`build_server`) in the Spark namespace, labelled `dagline.io/managed-by=dagline` and
  `dagline.io/dag`, sized from the DAG's `defaults.spark.connectServer` (the server's cores and memory,
  its executors' instances, cores and memory), with the platform's image, service account and pod
  security. Its name is `<dag>-<10 hex>`, the hex a digest of the DAG id and everything the server is
  built from, so a DAG whose size changes gets a new server and the old one goes idle; at most 56
  characters, because the spark-operator names the server's Service `<name>-server` (a DNS-1035 label).
  The spark-operator creates the server pod `<name>-server`, the Service `<name>-server` (port 15002 for
  Spark Connect) and sets `status.state` to `Ready` once the pod is ready.
* **One Pod per try** (`build_driver_pod`), named as the try's SparkApplication would be
  (`sparkapp.application_name`), that runs the job as `python <file> <args>` with
  `SPARK_REMOTE=sc://<name>-server.<namespace>.svc:15002`, through dagline's launcher
  (`dagline.executors.connect_job`, given inline as `python -c`, so the image needs Python and the Spark
  Connect client -- `pyspark-client` or `pyspark[connect]` 4.x -- and the job file, not dagline). The
  launcher sets the task's session confs and releases the session when the job ends. The try's
  `DAGLINE_API_URL` and `DAGLINE_SIGNAL_TOKEN` and the task's `env` come from the try's Secret
  (`sparkapp.build_env_secret`, created after the Pod and owned by it), as `secretKeyRef`s. The task's
  `spark.pod` (tolerations, nodeSelector, affinity, podSecurityContext, securityContext, volumeMounts),
  `spark.volumes` and `spark.driver.serviceAccount` place the Pod, the platform's pod security is its
  default, and it gets no service account token unless the task names an account: it talks to the
  server only. `terminationMessagePolicy: FallbackToLogsOnError` makes the end of the job's log the
  failure message of a failed try.

Pod phases (`observe`): Pending is waiting, Running running, Succeeded success, Failed failed (with the
container's exit code and the last line of its termination message), Unknown waiting.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import importlib.resources
import json
import re

from dagline.executors.base import TaskLaunch
from dagline.k8s import sparkapp
from dagline.k8s.resources import LABEL_MANAGED
from dagline.k8s.sparkapp import (
    LABEL_OUTCOME,
    MANAGED_BY,
    MESSAGE_MAX,
    OUTCOME_PENDING,
    ManifestError,
    Observation,
    Phase,
)

GROUP = "sparkoperator.k8s.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "SparkConnect"
PLURAL = "sparkconnects"
PORT = 15002                                   # the spark-operator's Service port for Spark Connect

LABEL_SERVER = "dagline.io/connect-server"     # on a try's Pod: the SparkConnect it uses
ANNOTATION_LAST_USED = "dagline.io/last-used"  # on a server: dagline's clock when a try last started on it
SERVERS_SELECTOR = f"{LABEL_MANAGED}={MANAGED_BY}"
PODS_SELECTOR = f"{LABEL_MANAGED}={MANAGED_BY},{LABEL_OUTCOME}={OUTCOME_PENDING},{LABEL_SERVER}"

MAX_SERVER_NAME = 56                           # 63 (DNS-1035 label) minus len("-server")
SERVER_CONTAINER = "spark-kubernetes-driver"   # the container the spark-operator fills in
EXECUTOR_CONTAINER = "spark-kubernetes-executor"
JOB_CONTAINER = "job"
# The driver pod only sends plans and reads results: small, but room for a modest toPandas().
DRIVER_RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}

_NAME_UNSAFE = re.compile(r"[^a-z0-9]+")


@functools.cache
def launcher_source() -> str:
    """The source of `dagline.executors.connect_job`, run in the Pod as `python -c` (standard library only)."""
    return importlib.resources.files("dagline.executors").joinpath("connect_job.py").read_text(encoding="utf-8")


def server_spec(launch: TaskLaunch, *, image: str, spark_version: str, service_account: str,
                pod_security: dict | None = None) -> dict:
    """The SparkConnect `spec` of the try's DAG: its size from `defaults.spark.connectServer`, the rest the
    platform's. Pod templates carry the service account and the pod security (the spark-operator copies the
    server's template into its pod and gives the executors theirs through Spark's pod template file)."""
    size = launch.job.connect_server or {}
    executor_size = size.get("executor") or {}
    server: dict = {}
    executor: dict = {}
    _put(server, cores=size.get("cores"), memory=size.get("memory"))
    _put(executor, instances=executor_size.get("instances"), cores=executor_size.get("cores"),
         memory=executor_size.get("memory"))
    security = pod_security or {}
    for role, container in ((server, SERVER_CONTAINER), (executor, EXECUTOR_CONTAINER)):
        pod: dict = {"containers": [{"name": container, **_security_context(security)}]}
        if role is server:
            pod["serviceAccountName"] = service_account
        if security.get("podSecurityContext"):
            pod["securityContext"] = sparkapp._copy(security["podSecurityContext"])
        role["template"] = {"metadata": {"labels": {**sparkapp.dag_labels(launch.key.dag_id),
                                                    LABEL_MANAGED: MANAGED_BY}},
                            "spec": pod}
    return {"sparkVersion": spark_version, "image": image, "server": server, "executor": executor}


def _security_context(security: dict) -> dict:
    return {"securityContext": sparkapp._copy(security["securityContext"])} if security.get("securityContext") else {}


def server_name(dag_id: str, spec: dict) -> str:
    """The DAG's server for this spec: `<dag>-<10 hex>`, a DNS-1035 label of at most 56 characters."""
    digest = hashlib.sha256(json.dumps([dag_id, spec], sort_keys=True).encode()).hexdigest()[:10]
    stem = _NAME_UNSAFE.sub("-", dag_id.lower()).strip("-")
    if not stem[:1].isalpha():
        stem = f"dl-{stem}".rstrip("-")
    stem = stem[: MAX_SERVER_NAME - 11].rstrip("-")
    return f"{stem}-{digest}"


def build_server(launch: TaskLaunch, *, namespace: str, image: str, spark_version: str, service_account: str,
                 pod_security: dict | None = None, used_at: dt.datetime) -> dict:
    """The SparkConnect of the try's DAG (the same object for every try of that DAG and size)."""
    spec = server_spec(launch, image=image, spark_version=spark_version, service_account=service_account,
                       pod_security=pod_security)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": server_name(launch.key.dag_id, spec),
            "namespace": namespace,
            "labels": {**sparkapp.dag_labels(launch.key.dag_id), LABEL_MANAGED: MANAGED_BY},
            "annotations": {sparkapp.ANNOTATION_DAG_ID: launch.key.dag_id,
                            ANNOTATION_LAST_USED: used_at.isoformat()},
        },
        "spec": spec,
    }


def service_host(server: str, namespace: str) -> str:
    """The spark-operator's Service of a server (`<name>-server`), by its cluster DNS name."""
    return f"{server}-server.{namespace}.svc"


def remote_url(server: str, namespace: str) -> str:
    return f"sc://{service_host(server, namespace)}:{PORT}"


def job_path(main: str) -> str:
    """The job file inside the Pod: `local:///opt/jobs/a.py` or `/opt/jobs/a.py` is `/opt/jobs/a.py`."""
    if main.startswith("local://"):
        main = main[len("local://"):]
    if not main.startswith("/"):
        raise ManifestError(
            f"spark.mainApplicationFile {main!r}: a Spark Connect task's driver runs `python <file>` in its pod, "
            f"so on Kubernetes the file must be in the image, as local:///path/to/job.py (or set spark.connect: "
            f"false to run it as a SparkApplication, which can read s3a://, gs://... files)")
    return main


def build_driver_pod(launch: TaskLaunch, *, server: str, namespace: str, default_image: str | None,
                     pod_security: dict | None = None, launched_at: dt.datetime) -> dict:
    """The Pod of one Connect try. Raises `ManifestError` when the task cannot run this way."""
    job = launch.job
    path = job_path(job.main_application_file)
    image = job.image or default_image
    if not image:
        raise ManifestError("spark.image is not set and there is no default image for Spark Connect drivers "
                            "(DAGLINE_SPARK_CONNECT_CLIENT_IMAGE): the pod needs Python, the Spark Connect client "
                            "(pyspark-client 4) and the job file")
    placement = sparkapp._copy({**(pod_security or {}), **(job.pod or {})})
    command = ["python", "-c", launcher_source()]
    for key, value in job.conf:
        command += ["--conf", f"{key}={value}"]
    command += ["--", path, *[str(a) for a in job.arguments]]
    secret = sparkapp.env_secret_name(launch.key)
    env = [{"name": "SPARK_REMOTE", "value": remote_url(server, namespace)},
           {"name": "PYTHONUNBUFFERED", "value": "1"}]
    env += [{"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": name}}}
            for name in sparkapp.env_names(launch)]
    container: dict = {
        "name": JOB_CONTAINER, "image": image, "command": command, "env": env,
        "resources": sparkapp._copy(DRIVER_RESOURCES), "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if placement.get("securityContext"):
        container["securityContext"] = placement["securityContext"]
    if placement.get("volumeMounts"):
        container["volumeMounts"] = placement["volumeMounts"]
    spec: dict = {"restartPolicy": "Never", "containers": [container]}
    if job.driver_service_account:
        spec["serviceAccountName"] = job.driver_service_account
    else:
        spec["automountServiceAccountToken"] = False  # it talks to the server only, never to the API
    if placement.get("podSecurityContext"):
        spec["securityContext"] = placement["podSecurityContext"]
    for field in ("tolerations", "nodeSelector", "affinity"):
        if placement.get(field):
            spec[field] = placement[field]
    if job.volumes:
        spec["volumes"] = sparkapp._copy(list(job.volumes))
    if launch.streaming:
        spec["terminationGracePeriodSeconds"] = max(1, int(round(launch.stop_grace_s)))
    labels = sparkapp.try_labels(launch.key)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": sparkapp.application_name(launch.key),
            "namespace": namespace,
            "labels": {**labels, LABEL_MANAGED: MANAGED_BY, LABEL_OUTCOME: OUTCOME_PENDING, LABEL_SERVER: server},
            "annotations": sparkapp.try_annotations(launch, launched_at),
        },
        "spec": spec,
    }


def pod_owner_reference(pod: dict) -> dict | None:
    """An ownerReference to this Pod (None if it has no uid yet): the try's Secret goes with it."""
    meta = pod.get("metadata") or {}
    if not meta.get("uid"):
        return None
    return {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"],
            "blockOwnerDeletion": False, "controller": False}


def server_ready(obj: dict) -> bool:
    return str((obj.get("status") or {}).get("state") or "") == "Ready"


def server_state(obj: dict) -> str:
    status = obj.get("status") or {}
    state = str(status.get("state") or "") or "no state"
    conditions = [c for c in status.get("conditions") or () if isinstance(c, dict) and c.get("message")]
    return f"{state} ({conditions[-1]['message']})" if conditions else state


def last_used(obj: dict) -> dt.datetime | None:
    text = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_LAST_USED)
    try:
        value = dt.datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)


POD_PHASES = {"": Phase.WAITING, "Pending": Phase.WAITING, "Unknown": Phase.WAITING,
              "Running": Phase.RUNNING, "Succeeded": Phase.SUCCESS, "Failed": Phase.FAILED}


def observe(pod: dict) -> Observation:
    """What a try's Pod says: its phase, and for a failure why."""
    status = pod.get("status") or {}
    phase_name = str(status.get("phase") or "")
    phase = POD_PHASES.get(phase_name, Phase.WAITING)
    return Observation(phase_name, phase, failure_message(pod) if phase == Phase.FAILED else None)


def failure_message(pod: dict) -> str:
    """`driver pod <name> failed: exit code N (<reason>): <last line of the job's output>`."""
    status = pod.get("status") or {}
    name = (pod.get("metadata") or {}).get("name") or "?"
    terminated = {}
    for container in status.get("containerStatuses") or ():
        if container.get("name") == JOB_CONTAINER:
            terminated = (container.get("state") or {}).get("terminated") or {}
    lines = [line.strip() for line in str(terminated.get("message") or status.get("message") or "").splitlines()]
    last = next((line for line in reversed(lines) if line), "")
    head = f"Spark Connect driver pod {name} failed"
    if "exitCode" in terminated:
        head += f": exit code {terminated['exitCode']}"
    reason = terminated.get("reason") or status.get("reason")
    if reason:
        head += f" ({reason})"
    message = f"{head}: {last}" if last else head
    return message if len(message) <= MESSAGE_MAX else message[: MESSAGE_MAX - 3] + "..."


def _put(target: dict, **values) -> None:
    target.update({k: v for k, v in values.items() if v is not None})

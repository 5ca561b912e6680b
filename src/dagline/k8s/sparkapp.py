"""SparkApplication documents for task instance tries: their names, labels and manifests, and what a status means.

Pure code (no API calls). The `spark-k8s` executor (`dagline.k8s.executor`) builds each try's
`sparkoperator.k8s.io/v1beta2` SparkApplication with `build_manifest` and reads every object it
observes back with `observe`.

Names. A try's application name is deterministic, so a replica that dies after creating it, or a
replayed launch, finds the same object (409 AlreadyExists) instead of creating a second one:
`<dag>-<task>-<12 hex of sha256(dag, run, task)>-<try>` (`<dag>` is the DAG's key with '/' as '-':
`a-team-etl` for `etl` of namespace `a-team`; the hash is of the key), the readable part cut so the whole name is
at most 56 characters. The spark-operator derives its UI Service name as `<name>-ui-svc`, which
must be a DNS-1035 label of at most 63 characters (its webhook checks the application name against
DNS-1035 too), so the name also starts with a letter (`dl-` is put first when a DAG id starts with
a digit). Different tries never share a name unless 48 bits of SHA-256 collide; even then the
annotations below tell them apart (`same_try`), and a clash fails the try instead of adopting a
stranger's application.

Labels and annotations. Label values must be at most 63 characters of `[A-Za-z0-9_.-]`, starting
and ending with a letter or digit; run ids (`scheduled__2026-03-01T00:00:00+00:00`) and task ids
need not be. `label_value` replaces other characters by `_`, trims the ends, and cuts long values to
52 characters plus a 10-hex digest of the original. Labels are for selecting (`kubectl get sparkapp
-l dagline.io/namespace=a-team,dagline.io/dag=sales-daily`): `dagline.io/dag` is the DAG's name and
`dagline.io/namespace` its namespace (a '/' never reaches a label value); the exact ids are in the
`dagline.io/*-id` annotations (`dagline.io/dag-id` is the DAG's key, `a-team/sales-daily`), which are
authoritative. `dagline.io/outcome` is `pending` while dagline follows the application, and the
reported outcome (`success` / `failed`) once it kept a finished one; the executor lists only
`pending` ones, so kept applications cost nothing per sync.

Signals. A try's `DAGLINE_API_URL` and `DAGLINE_SIGNAL_TOKEN` (`TaskLaunch.env`) go into a Secret of
its own, `<application name>-env` (`build_env_secret`, created after the application and owned by
it), which the driver and the executors read as
environment variables through Spark's own `spark.kubernetes.{driver,executor}.secretKeyRef.<VAR>`
settings: Spark builds the pods with them, so this needs no mutating webhook of the spark-operator,
and the token never appears in the SparkApplication. The task's own `env` goes the same way: its
literal values and the keys its `secretKeyRef`s name, read by the operator from the DAG object's
namespace (never from the Spark namespace), are copied into that Secret, so a SparkApplication only
ever names its own try's Secret (ADR 0040). A streaming try's driver pod gets the task's
`stopGracePeriod` as its `terminationGracePeriodSeconds`: deleting the application (a stop) sends
SIGTERM to the driver, which then has that long to stop its queries before the kill.

Placement. The task's `spark.pod` (tolerations, nodeSelector, affinity, podSecurityContext,
securityContext, volumeMounts) is given to the driver and the executors alike, `spark.volumes` becomes
the application's `volumes`, and `spark.driver.serviceAccount` replaces the platform's service account
on the driver; the Spark policy checked them at apply (`dagline.domain.spark_policy.pod_refusals`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import hashlib
import re

from dagline.domain import names
from dagline.errors import DaglineError
from dagline.executors.base import TaskKey, TaskLaunch
from dagline.k8s.resources import LABEL_DAG, LABEL_MANAGED, LABEL_NAMESPACE, LABEL_RUN, LABEL_TASK, LABEL_TRY

GROUP = "sparkoperator.k8s.io"
VERSION = "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "SparkApplication"
PLURAL = "sparkapplications"

MANAGED_BY = "dagline"                       # value of `dagline.io/managed-by` on every application
LABEL_OUTCOME = "dagline.io/outcome"         # pending | success | failed
OUTCOME_PENDING = "pending"
ANNOTATION_DAG_ID = "dagline.io/dag-id"
ANNOTATION_RUN_ID = "dagline.io/run-id"
ANNOTATION_TASK_ID = "dagline.io/task-id"
ANNOTATION_TRY_NUMBER = "dagline.io/try-number"
ANNOTATION_TI_ID = "dagline.io/ti-id"
ANNOTATION_LAUNCHED_AT = "dagline.io/launched-at"  # dagline's clock when the try was launched (ISO-8601)
# A finished application whose outcome was recorded: dagline deletes it from then on (ISO-8601; see the
# executor's retention). Until then its driver pod, and the log the web UI shows, stay.
ANNOTATION_DELETE_AFTER = "dagline.io/delete-after"

FOLLOWED_SELECTOR = f"{LABEL_MANAGED}={MANAGED_BY},{LABEL_OUTCOME}={OUTCOME_PENDING}"
FINISHED_SELECTOR = f"{LABEL_MANAGED}={MANAGED_BY},{LABEL_OUTCOME}!={OUTCOME_PENDING}"

MAX_NAME_LENGTH = 56     # 63 (DNS-1035 label) minus len("-ui-svc")
LABEL_VALUE_MAX = 63
MESSAGE_MAX = 600        # spark-submit's errorMessage can hold a whole log: keep the report readable

_NAME_UNSAFE = re.compile(r"[^a-z0-9]+")
_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_LABEL_ENDS = "_.-"
_URI_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def _digest(text: str, length: int) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def application_name(key: TaskKey) -> str:
    """The SparkApplication name of one try: deterministic, a DNS-1035 label, at most 56 characters."""
    identity = "\0".join((key.dag_id, key.run_id, key.task_id))
    suffix = f"-{_digest(identity, 12)}-{int(key.try_number)}"
    stem = _NAME_UNSAFE.sub("-", f"{key.dag_id}-{key.task_id}".lower()).strip("-")
    if not stem[:1].isalpha():
        stem = f"dl-{stem}".rstrip("-")
    stem = stem[: MAX_NAME_LENGTH - len(suffix)].rstrip("-")
    return stem + suffix


def label_value(text: str) -> str:
    """A valid label value for any text: unsafe characters become `_`, long values end in a digest."""
    value = _LABEL_UNSAFE.sub("_", str(text)).strip(_LABEL_ENDS)
    if value and len(value) <= LABEL_VALUE_MAX:
        return value
    head = value[: LABEL_VALUE_MAX - 11].rstrip(_LABEL_ENDS)
    digest = _digest(str(text), 10)
    return f"{head}-{digest}" if head else digest


def dag_labels(dag_id: str) -> dict[str, str]:
    """The labels naming a DAG (by its key): its namespace and its name, each a valid label value."""
    namespace, name = names.split(dag_id)
    return {LABEL_NAMESPACE: label_value(namespace), LABEL_DAG: label_value(name)}


def try_labels(key: TaskKey) -> dict[str, str]:
    """The labels naming a try (also put on the driver and executor pods)."""
    return {
        **dag_labels(key.dag_id),
        LABEL_RUN: label_value(key.run_id),
        LABEL_TASK: label_value(key.task_id),
        LABEL_TRY: str(int(key.try_number)),
    }


def try_annotations(launch: TaskLaunch, launched_at: dt.datetime) -> dict[str, str]:
    key = launch.key
    return {
        ANNOTATION_DAG_ID: key.dag_id,
        ANNOTATION_RUN_ID: key.run_id,
        ANNOTATION_TASK_ID: key.task_id,
        ANNOTATION_TRY_NUMBER: str(int(key.try_number)),
        ANNOTATION_TI_ID: str(launch.ti_id),
        ANNOTATION_LAUNCHED_AT: launched_at.isoformat(),
    }


def same_try(obj: dict, key: TaskKey) -> bool:
    """True if this object is the application of exactly this try (by its annotations)."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return (
        annotations.get(ANNOTATION_DAG_ID) == key.dag_id
        and annotations.get(ANNOTATION_RUN_ID) == key.run_id
        and annotations.get(ANNOTATION_TASK_ID) == key.task_id
        and annotations.get(ANNOTATION_TRY_NUMBER) == str(int(key.try_number))
    )


def launched_at(obj: dict) -> dt.datetime | None:
    """When dagline launched this application (its own clock, from the annotation), if recorded."""
    text = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_LAUNCHED_AT)
    try:
        value = dt.datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)


class ManifestError(DaglineError, ValueError):
    """A try that cannot become a SparkApplication (the message names the field): the DAG's fault, exit 2, 422."""

    exit_code = 2
    http_status = 422


def build_manifest(
    launch: TaskLaunch, *, namespace: str, default_image: str, service_account: str, spark_version: str,
    launched_at: dt.datetime, pod_security: dict | None = None,
) -> dict:
    """The SparkApplication of one try. Raises `ManifestError` when the task cannot run on Kubernetes.
    `pod_security` (`podSecurityContext`, `securityContext`) is the platform's default for both pods: a
    task's `spark.pod` field of the same name replaces it."""
    job = launch.job
    main = job.main_application_file
    if not (_URI_SCHEME.match(main) or main.startswith("/")):
        raise ManifestError(
            f"spark.mainApplicationFile {main!r} is a relative path: on Kubernetes it must be a path or URI the "
            f"driver can read, such as local:///opt/jobs/{main.rsplit('/', 1)[-1]} or s3a://bucket/{main}"
        )
    image = job.image or default_image
    if not image:
        raise ManifestError("spark.image is not set and there is no default image (DAGLINE_SPARK_IMAGE)")
    labels = try_labels(launch.key)
    driver: dict = {"serviceAccount": service_account, "labels": dict(labels)}
    executor: dict = {"labels": dict(labels)}
    _put(driver, cores=job.driver_cores, memory=job.driver_memory)
    if launch.streaming:
        driver["terminationGracePeriodSeconds"] = max(1, int(round(launch.stop_grace_s)))
    _put(executor, instances=job.executor_instances, cores=job.executor_cores, memory=job.executor_memory)
    for role in (driver, executor):  # the task's spark.pod reaches both pods (SparkPodSpec fields)
        role.update(_copy({**(pod_security or {}), **(job.pod or {})}))
    if job.driver_service_account:
        driver["serviceAccount"] = job.driver_service_account
    spec_volumes = {"volumes": _copy(list(job.volumes))} if job.volumes else {}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": application_name(launch.key),
            "namespace": namespace,
            "labels": {**labels, LABEL_MANAGED: MANAGED_BY, LABEL_OUTCOME: OUTCOME_PENDING},
            "annotations": try_annotations(launch, launched_at),
        },
        "spec": {
            "type": "Python",
            "mode": "cluster",
            "sparkVersion": spark_version,
            "image": image,
            "mainApplicationFile": main,
            "arguments": [str(a) for a in job.arguments],
            "sparkConf": {**{str(k): str(v) for k, v in job.conf}, **env_conf(launch)},
            "restartPolicy": {"type": "Never"},  # dagline does the retrying, as a new try
            "driver": driver,
            "executor": executor,
            **spec_volumes,
        },
    }


def env_secret_name(key: TaskKey) -> str:
    """The name of the Secret holding a try's environment (at most 60 characters)."""
    return f"{application_name(key)}-env"


def build_env_secret(launch: TaskLaunch, *, namespace: str, owner: dict | None = None,
                     task_values: tuple[tuple[str, str], ...] = ()) -> dict | None:
    """The Secret of a try's environment (`launch.env`, then the task's `env` read: `task_values`), or
    None when it has none; `owner` (an `owner_reference`) makes Kubernetes delete it with the application."""
    values = {**dict(launch.env), **dict(task_values)}
    if not values:
        return None
    metadata = {"name": env_secret_name(launch.key), "namespace": namespace,
                "labels": {**try_labels(launch.key), LABEL_MANAGED: MANAGED_BY}}
    if owner:
        metadata["ownerReferences"] = [owner]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": metadata,
        "stringData": values,
    }


def env_names(launch: TaskLaunch) -> list[str]:
    """The variables a try's driver and executors get: dagline's (`DAGLINE_API_URL`, `DAGLINE_SIGNAL_TOKEN`)
    and the task's `env`, in that order, each once."""
    return list(dict.fromkeys([name for name, _ in launch.env] + [var.name for var in launch.task_env]))


def has_env(launch: TaskLaunch) -> bool:
    return bool(launch.env or launch.task_env)


def env_conf(launch: TaskLaunch) -> dict[str, str]:
    """Spark settings that make the driver and the executors read the try's Secret as environment."""
    secret = env_secret_name(launch.key)
    conf = {}
    for name in env_names(launch):
        for role in ("driver", "executor"):
            conf[f"spark.kubernetes.{role}.secretKeyRef.{name}"] = f"{secret}:{name}"
    return conf


def owner_reference(app: dict) -> dict | None:
    """An ownerReference to this application (None if it has no uid yet)."""
    meta = app.get("metadata") or {}
    if not meta.get("uid"):
        return None
    return {"apiVersion": API_VERSION, "kind": KIND, "name": meta["name"], "uid": meta["uid"],
            "blockOwnerDeletion": False, "controller": False}


def _copy(value):
    """A deep copy of JSON data (the manifest never shares lists or dicts with the task's spec)."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_copy(v) for v in value]
    return value


def _put(target: dict, **values) -> None:
    target.update({k: v for k, v in values.items() if v is not None})


class Phase(enum.Enum):
    """What an application's state means to dagline."""

    WAITING = "waiting"   # no driver running yet, or nothing new (a state dagline does not know)
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"


# Every `status.applicationState.state` of the spark-operator (api/v1beta2: ApplicationStateType).
STATE_PHASES: dict[str, Phase] = {
    "": Phase.WAITING,                  # new: not submitted yet
    "SUBMITTED": Phase.WAITING,         # spark-submit done; the driver pod may still be pending
    "PENDING_RERUN": Phase.WAITING,
    "INVALIDATING": Phase.WAITING,      # the spec changed; the operator resubmits it
    "UNKNOWN": Phase.WAITING,           # the driver pod's state is unknown for now
    "RUNNING": Phase.RUNNING,
    "SUCCEEDING": Phase.RUNNING,        # the driver ended well; the operator is finishing up
    "FAILING": Phase.RUNNING,           # the driver failed; the operator is finishing up
    # spark-operator 2.x `spec.suspend` (set by a queue such as Kueue when it preempts an application): the
    # driver is stopped and the application waits to be resumed and resubmitted. The try is not over: it
    # stays launched, its execution timeout still runs, and the resumed driver runs it again from the start.
    "SUSPENDING": Phase.WAITING,
    "SUSPENDED": Phase.WAITING,
    "RESUMING": Phase.WAITING,
    "COMPLETED": Phase.SUCCESS,
    "FAILED": Phase.FAILED,
    "SUBMISSION_FAILED": Phase.FAILED,
}


@dataclasses.dataclass(frozen=True)
class Observation:
    """One look at an application: its raw state, what it means, and a message for a failure."""

    state: str
    phase: Phase
    message: str | None = None


def application_state(obj: dict) -> str:
    app_state = ((obj.get("status") or {}).get("applicationState")) or {}
    return str(app_state.get("state") or "")


def observe(obj: dict) -> Observation:
    state = application_state(obj)
    phase = STATE_PHASES.get(state, Phase.WAITING)
    return Observation(state, phase, failure_message(obj) if phase == Phase.FAILED else None)


def driver_pod_name(obj: dict | None, name: str) -> str:
    """The driver pod `status.driverInfo.podName` names; the spark-operator's `<application>-driver` before."""
    status = (obj or {}).get("status") or {}
    return (status.get("driverInfo") or {}).get("podName") or f"{name}-driver"


def failure_message(obj: dict) -> str:
    """`<STATE>: <errorMessage> (driver pod <name>)`, shortened to a readable length."""
    status = obj.get("status") or {}
    state = application_state(obj) or "no state"
    error = " ".join(str((status.get("applicationState") or {}).get("errorMessage") or "").split())
    message = f"SparkApplication {state}: {error}" if error else f"SparkApplication {state} (no error message)"
    if len(message) > MESSAGE_MAX:
        message = message[: MESSAGE_MAX - 3] + "..."
    pod = (status.get("driverInfo") or {}).get("podName")
    return f"{message} (driver pod {pod})" if pod else message

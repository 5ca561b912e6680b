"""`dagline tasks logs` for spark-k8s tries: the driver pod's log, read through the Kubernetes API.

A try of the spark-k8s executor is a SparkApplication (`sparkapp.application_name(key)`, in the
namespace its `external_id` names); its driver pod is the one `status.driverInfo.podName` names (the
spark-operator's `<application>-driver` when the status says nothing). The log is CoreV1
`read_namespaced_pod_log`, streamed in chunks, so a large log is never held in memory. A finished
application that the executor's retention deleted takes its pods along: the error says so.

`--follow` reads the log again every poll and prints what lies past the bytes already printed (`skip`):
a pod's log only grows while its container runs, and polling works alike on every API server, where
a held-open `follow=true` stream would tie the reader to one connection that may drop.
"""

from __future__ import annotations

from collections.abc import Iterator

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dagline.errors import OperationFailed
from dagline.executors.base import TaskKey
from dagline.k8s.client import CALL_ERRORS, DEFAULT_TIMEOUT, SparkApplications, api_message, load_api_client
from dagline.k8s.sparkapp import application_name


def driver_pod(apps: SparkApplications, name: str) -> str:
    """The driver pod of an application (raises `OperationFailed` when the application is gone)."""
    app = apps.get(name)
    if app is None:
        raise OperationFailed(
            f"SparkApplication {apps.namespace}/{name} no longer exists, and its driver pod went with it "
            "(DAGLINE_SPARK_RETENTION=keep keeps finished applications and their logs)")
    return ((app.get("status") or {}).get("driverInfo") or {}).get("podName") or f"{name}-driver"


def driver_log(key: TaskKey, namespace: str, *, api_client=None, tail_lines: int | None = None,
               skip: int = 0) -> Iterator[bytes]:
    """The driver log of one try, in chunks, less its first `skip` bytes."""
    api_client = api_client or load_api_client()
    name = application_name(key)
    pod = driver_pod(SparkApplications(api_client, namespace), name)
    kwargs = {"_preload_content": False, "_request_timeout": DEFAULT_TIMEOUT}
    if tail_lines is not None:
        kwargs["tail_lines"] = tail_lines
    try:
        response = client.CoreV1Api(api_client).read_namespaced_pod_log(pod, namespace, **kwargs)
    except CALL_ERRORS as exc:
        if isinstance(exc, ApiException):
            raise OperationFailed(f"driver pod {namespace}/{pod} of SparkApplication {name}: "
                                  f"{exc.status} {api_message(exc)}") from None
        raise OperationFailed(f"the Kubernetes API could not be reached: {exc}") from None
    try:
        for chunk in response.stream(1 << 16):
            if skip >= len(chunk):
                skip -= len(chunk)
                continue
            yield chunk[skip:]
            skip = 0
    finally:
        response.release_conn()

"""The log reader of spark-k8s tries (`dagline tasks logs`, the web UI): the driver pod's log, read
through the Kubernetes API.

A try of the spark-k8s executor is a SparkApplication (`sparkapp.application_name(key)`, in the
namespace its `external_id` names); its driver pod is the one `status.driverInfo.podName` names (the
spark-operator's `<application>-driver` when the status says nothing). A Spark Connect try is a Pod of
that name (`dagline.k8s.sparkconnect`), whose log is the job's. The log is CoreV1
`read_namespaced_pod_log`, streamed in chunks, so a large log is never held in memory. A finished
application that the executor's retention deleted takes its pods along (it keeps them
`DAGLINE_SPARK_KEEP_FINISHED`, a day by default, ADR 0085), and a pod deleted on its own leaves an
application without a driver: the error says which.

`DriverLog` is the `TryLog` the registry opens for a stored spark-k8s try (in the namespace its
`external_id` names, else `DAGLINE_SPARK_NAMESPACE`, else `default`). Following it (`--follow`, a
page following a running try) reads the log again and keeps what lies past the bytes already read
(`skip`): a pod's log only grows while its container runs, and polling works alike on every API
server, where a held-open `follow=true` stream would tie the reader to one connection that may drop.
When the application or its pod cannot be read, `NoLog` says why.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dagline.errors import OperationFailed
from dagline.executors.base import TaskKey
from dagline.executors.try_logs import NoLog, SkipFollower, StoredTry
from dagline.k8s.client import (
    CALL_ERRORS,
    DEFAULT_TIMEOUT,
    ApiRejected,
    ApiUnavailable,
    Pods,
    SparkApplications,
    api_message,
    load_api_client,
)
from dagline.k8s.sparkapp import application_name, driver_pod_name


def driver_pod(apps: SparkApplications, name: str, pods: Pods | None = None) -> str:
    """The driver pod of an application, or the try's own Pod for a Spark Connect try (raises `NoLog` when
    neither exists)."""
    try:
        app = apps.get(name)
        if app is None and pods is not None and pods.get(name) is not None:
            return name  # a Spark Connect try: its Pod has the application's name (ADR 0086)
    except (ApiUnavailable, ApiRejected) as exc:
        raise NoLog(f"SparkApplication {apps.namespace}/{name} could not be read: {exc}") from None
    if app is None:
        raise NoLog(
            f"SparkApplication {apps.namespace}/{name} no longer exists, and its driver pod and log went with it "
            "(finished applications are deleted DAGLINE_SPARK_KEEP_FINISHED after their end, PT24H by default, "
            "or never with DAGLINE_SPARK_RETENTION=keep)")
    return driver_pod_name(app, name)


def driver_log(key: TaskKey, namespace: str, *, api_client=None, tail_lines: int | None = None,
               skip: int = 0) -> Iterator[bytes]:
    """The driver log of one try, in chunks, less its first `skip` bytes."""
    try:
        api_client = api_client or load_api_client()
    except OperationFailed as exc:  # no credentials
        raise NoLog(str(exc)) from None
    name = application_name(key)
    pod = driver_pod(SparkApplications(api_client, namespace), name, Pods(api_client, namespace))
    kwargs = {"_preload_content": False, "_request_timeout": DEFAULT_TIMEOUT}
    if tail_lines is not None:
        kwargs["tail_lines"] = tail_lines
    try:
        response = client.CoreV1Api(api_client).read_namespaced_pod_log(pod, namespace, **kwargs)
    except CALL_ERRORS as exc:
        if isinstance(exc, ApiException) and exc.status == 404:
            raise NoLog(f"the driver pod {namespace}/{pod} of SparkApplication {name} is gone (deleted by hand, "
                        f"evicted, or its node removed), and its log with it") from None
        if isinstance(exc, ApiException):
            raise NoLog(f"driver pod {namespace}/{pod} of SparkApplication {name}: "
                        f"{exc.status} {api_message(exc)}") from None
        raise NoLog(f"the Kubernetes API could not be reached: {exc}") from None
    try:
        for chunk in response.stream(1 << 16):
            if skip >= len(chunk):
                skip -= len(chunk)
                continue
            yield chunk[skip:]
            skip = 0
    except CALL_ERRORS as exc:
        raise NoLog(f"the log of driver pod {namespace}/{pod} broke off: {exc}") from None
    finally:
        response.release_conn()


class DriverLog:
    """A stored spark-k8s try's log: its driver pod's."""

    what = "the driver log"

    def __init__(self, stored: StoredTry, *, api_client=None):
        self.key = stored.key
        self.namespace = ((stored.external_id or "").partition("/")[0]
                          or os.environ.get("DAGLINE_SPARK_NAMESPACE") or "default")
        self.api_client = api_client

    def read(self, skip: int = 0) -> Iterator[bytes]:
        chunks = driver_log(self.key, self.namespace, api_client=self.api_client, skip=skip)
        first = next(chunks, b"")  # the lookups happen now: a missing log raises here, not while printing
        return _rest(first, chunks)

    def size(self) -> int | None:
        return None  # the API tells a log's length only by sending it

    def follow(self) -> SkipFollower:
        return SkipFollower(self)


def _rest(first: bytes, chunks: Iterator[bytes]) -> Iterator[bytes]:
    try:
        if first:
            yield first
        yield from chunks
    finally:
        chunks.close()  # a reader that stops early releases the connection

"""The spark-k8s executor's settings: `SparkK8sSettings`, read once from `DAGLINE_SPARK_*` (the
Spark namespace, image, service account, timeouts, retention, pod security, the Spark Connect servers)
and bounded there, so a bad value is an error naming its variable before any try is launched; and the
rows `dagline config` shows for them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re

from dagline.errors import InvalidInput
from dagline.executors.registry import ShownSetting
from dagline.times import duration_seconds, parse_duration

SERVICE_ACCOUNT_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
RETENTIONS = ("delete-succeeded", "delete", "keep")
DEFAULT_SPARK_VERSION = "3.5.3"
DEFAULT_PENDING_TIMEOUT_S = 600.0
DEFAULT_PICKUP_TIMEOUT_S = 60.0
DEFAULT_PREFLIGHT_INTERVAL_S = 300.0
DEFAULT_KEEP_FINISHED_S = 86400.0  # a day: the driver log of last night's run can be read in the morning
KEEP_FINISHED_SETTING = "DAGLINE_SPARK_KEEP_FINISHED"
DEFAULT_CONNECT_SPARK_VERSION = "4.0.1"   # Spark Connect servers: Spark 4 has Connect built in
DEFAULT_CONNECT_IDLE_TIMEOUT_S = 1800.0

# Used with fullmatch: `$` would also match before a trailing newline.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_NO_SPACE = re.compile(r"\S+")


@dataclasses.dataclass(frozen=True)
class SparkK8sSettings:
    """Where and how tries run. `image` defaults to the official `spark:<spark_version>` image."""

    namespace: str = "default"
    image: str | None = None
    service_account: str = "spark"
    pending_timeout_s: float = DEFAULT_PENDING_TIMEOUT_S
    retention: str = "delete-succeeded"
    keep_finished_s: float = DEFAULT_KEEP_FINISHED_S  # how long a finished application the retention deletes stays
    spark_version: str = DEFAULT_SPARK_VERSION
    # DAGLINE_SPARK_POD_SECURITY: {podSecurityContext, securityContext} every driver and executor gets unless
    # its task's spark.pod sets its own (the chart's spark.podSecurity: PodSecurity `restricted` by default)
    pod_security: dict | None = None
    # an application with no status this long after launch was picked up by no spark-operator (docs/adr/0080)
    pickup_timeout_s: float = DEFAULT_PICKUP_TIMEOUT_S
    preflight_interval_s: float = DEFAULT_PREFLIGHT_INTERVAL_S  # 0: no preflight
    # Spark Connect tasks (ADR 0086): the DAGs' SparkConnect servers' image and Spark version, the default image
    # of their tries' driver pods (Python and the Spark Connect client), and how long an unused server is kept
    connect_spark_version: str = DEFAULT_CONNECT_SPARK_VERSION
    connect_image: str | None = None
    connect_client_image: str | None = None
    connect_idle_timeout_s: float = DEFAULT_CONNECT_IDLE_TIMEOUT_S

    def __post_init__(self):
        if self.image is None:
            object.__setattr__(self, "image", f"spark:{self.spark_version}")
        if self.connect_image is None:
            object.__setattr__(self, "connect_image", f"spark:{self.connect_spark_version}")

    @classmethod
    def from_env(cls, environ=None, *, namespace_file: str = SERVICE_ACCOUNT_NAMESPACE_FILE) -> SparkK8sSettings:
        """Read `DAGLINE_SPARK_*`; an invalid value raises `InvalidInput` naming the variable."""
        env = os.environ if environ is None else environ

        def get(name: str) -> str | None:
            value = env.get(name)
            return value.strip() if value is not None and value.strip() else None

        def check(name: str, value: str, pattern: re.Pattern, what: str) -> str:
            if not pattern.fullmatch(value):
                raise InvalidInput(f"{value!r} is not {what}", field=name)
            return value

        namespace = get("DAGLINE_SPARK_NAMESPACE")
        if namespace is None:
            namespace = _pod_namespace(namespace_file) or "default"
        else:
            check("DAGLINE_SPARK_NAMESPACE", namespace, _DNS_LABEL, "a namespace name (a lowercase DNS-1123 label)")
        version = get("DAGLINE_SPARK_SPARK_VERSION") or DEFAULT_SPARK_VERSION
        check("DAGLINE_SPARK_SPARK_VERSION", version, re.compile(r"\d+\.\d+(\.\d+)?\S*"),
              "a Spark version such as 3.5.3")
        image = get("DAGLINE_SPARK_IMAGE")
        if image is not None:
            check("DAGLINE_SPARK_IMAGE", image, _NO_SPACE, "a container image reference")
        account = get("DAGLINE_SPARK_SERVICE_ACCOUNT") or "spark"
        check("DAGLINE_SPARK_SERVICE_ACCOUNT", account, _DNS_SUBDOMAIN, "a service account name")
        retention = get("DAGLINE_SPARK_RETENTION") or "delete-succeeded"
        if retention not in RETENTIONS:
            raise InvalidInput(f"{retention!r} is not one of {', '.join(RETENTIONS)}", field="DAGLINE_SPARK_RETENTION")
        timeout_text = get("DAGLINE_SPARK_PENDING_TIMEOUT")
        timeout = DEFAULT_PENDING_TIMEOUT_S
        if timeout_text is not None:
            timeout = parse_timeout(timeout_text, field="DAGLINE_SPARK_PENDING_TIMEOUT")
        security = _pod_security(get(POD_SECURITY_SETTING))
        pickup_text = get("DAGLINE_SPARK_PICKUP_TIMEOUT")
        pickup = DEFAULT_PICKUP_TIMEOUT_S if pickup_text is None else parse_timeout(
            pickup_text, field="DAGLINE_SPARK_PICKUP_TIMEOUT")
        interval_text = get("DAGLINE_SPARK_PREFLIGHT_INTERVAL")
        interval = DEFAULT_PREFLIGHT_INTERVAL_S
        if interval_text is not None:
            interval = 0.0 if interval_text == "off" else parse_timeout(
                interval_text, field="DAGLINE_SPARK_PREFLIGHT_INTERVAL", zero=True)
        keep_text = get(KEEP_FINISHED_SETTING)
        keep = DEFAULT_KEEP_FINISHED_S if keep_text is None else parse_timeout(
            keep_text, field=KEEP_FINISHED_SETTING, zero=True)
        connect_version = get("DAGLINE_SPARK_CONNECT_SPARK_VERSION") or DEFAULT_CONNECT_SPARK_VERSION
        check("DAGLINE_SPARK_CONNECT_SPARK_VERSION", connect_version, re.compile(r"\d+\.\d+(\.\d+)?\S*"),
              "a Spark version such as 4.0.1")
        connect_images = {}
        for name in ("DAGLINE_SPARK_CONNECT_IMAGE", "DAGLINE_SPARK_CONNECT_CLIENT_IMAGE"):
            connect_images[name] = get(name)
            if connect_images[name] is not None:
                check(name, connect_images[name], _NO_SPACE, "a container image reference")
        idle_text = get("DAGLINE_SPARK_CONNECT_IDLE_TIMEOUT")
        idle = (parse_timeout(idle_text, field="DAGLINE_SPARK_CONNECT_IDLE_TIMEOUT") if idle_text is not None
                else DEFAULT_CONNECT_IDLE_TIMEOUT_S)
        return cls(namespace=namespace, image=image, service_account=account, pending_timeout_s=timeout,
                   retention=retention, keep_finished_s=keep, spark_version=version, pod_security=security,
                   pickup_timeout_s=pickup, preflight_interval_s=interval,
                   connect_spark_version=connect_version, connect_image=connect_images["DAGLINE_SPARK_CONNECT_IMAGE"],
                   connect_client_image=connect_images["DAGLINE_SPARK_CONNECT_CLIENT_IMAGE"],
                   connect_idle_timeout_s=idle)


POD_SECURITY_SETTING = "DAGLINE_SPARK_POD_SECURITY"


def _pod_security(text: str | None) -> dict | None:
    """The default security contexts of Spark pods: a JSON object of `podSecurityContext` and/or
    `securityContext` objects (Kubernetes' own fields); unset or `{}`: none."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InvalidInput(f"not JSON: {exc}", field=POD_SECURITY_SETTING) from None
    if not isinstance(value, dict) or set(value) - {"podSecurityContext", "securityContext"} or not all(
            isinstance(v, dict) for v in value.values()):
        raise InvalidInput("must be a JSON object of podSecurityContext and securityContext objects",
                           field=POD_SECURITY_SETTING)
    return {k: v for k, v in value.items() if v} or None


def parse_timeout(text: str, *, field: str, zero: bool = False) -> float:
    """Seconds (`600`, `90.5`) or an ISO-8601 duration (`PT10M`), more than zero (or zero, with `zero`)."""
    try:
        seconds = float(text)
    except ValueError:
        try:
            seconds = duration_seconds(parse_duration(text))
        except ValueError:
            raise InvalidInput(
                f"{text!r} is neither a number of seconds nor an ISO-8601 duration (e.g. 600 or PT10M)", field=field
            ) from None
    if not (seconds >= 0 if zero else seconds > 0) or seconds == float("inf"):
        raise InvalidInput(f"{text!r} must be a {'non-negative' if zero else 'positive'}, finite duration",
                           field=field)
    return seconds


def _pod_namespace(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


_SHOWN = {"namespace": "DAGLINE_SPARK_NAMESPACE", "image": "DAGLINE_SPARK_IMAGE",
          "service_account": "DAGLINE_SPARK_SERVICE_ACCOUNT", "pending_timeout_s": "DAGLINE_SPARK_PENDING_TIMEOUT",
          "retention": "DAGLINE_SPARK_RETENTION", "keep_finished_s": KEEP_FINISHED_SETTING,
          "spark_version": "DAGLINE_SPARK_SPARK_VERSION",
          "pod_security": POD_SECURITY_SETTING, "pickup_timeout_s": "DAGLINE_SPARK_PICKUP_TIMEOUT",
          "preflight_interval_s": "DAGLINE_SPARK_PREFLIGHT_INTERVAL",
          "connect_spark_version": "DAGLINE_SPARK_CONNECT_SPARK_VERSION",
          "connect_image": "DAGLINE_SPARK_CONNECT_IMAGE", "connect_client_image": "DAGLINE_SPARK_CONNECT_CLIENT_IMAGE",
          "connect_idle_timeout_s": "DAGLINE_SPARK_CONNECT_IDLE_TIMEOUT"}


def shown(environ) -> list[ShownSetting]:
    spark = SparkK8sSettings.from_env(environ)
    return [ShownSetting(f"spark_k8s.{name}", _show(getattr(spark, name)), variable)
            for name, variable in _SHOWN.items()]


def _show(value):
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return "" if value is None else value

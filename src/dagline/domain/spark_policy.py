"""The Spark policy: which `spark.conf` keys a DAG author may set, and why the others are refused.

Pure domain, used when a spec is loaded (`dagline.spec.checks`): a task's `spark.conf` goes into its
SparkApplication (and its `spark-submit` locally) as it is, so a key that changes the identity the job
runs as, mounts a Secret or a node's disk, sets a pod template, or chooses the master, the image or
the namespace would let a DAG author reach past the RBAC the platform admin set up. Such a key is
refused at apply (`dagline dags apply` exits 2, a DAG object gets `Invalid`), naming the key and why.

The same policy holds locally and on Kubernetes: a DAG file is meant to run in both homes, and a key
refused on the cluster should be refused on the laptop before it gets there (Kubernetes keys do
nothing under `spark-submit --master local[*]`, and the master is the local executor's own choice).

A platform admin allows a key with `DAGLINE_SPARK_ALLOWED_CONF` (the chart's `spark.allowedConf`): a
comma list of keys, or of prefixes written with a trailing `*` (`spark.kubernetes.driver.annotation.*`).
An allowed entry wins over the refusals below. Keys are compared without case and surrounding spaces
(Spark's own keys are case-sensitive, so a key spelt in another case would only be ignored by Spark;
refusing it too costs nothing and closes any reader that is not).

The same refusals hold for a task's pod fields (`pod_refusals`): a volume of `spark.volumes` of type
hostPath, nfs, secret or projected (a projected volume can carry Secrets and service account tokens),
and `spark.driver.serviceAccount`, are refused unless the admin allowed the Spark conf key that would do
the same for both pods (`spark.kubernetes.{driver,executor}.volumes.hostPath.*`, `...volumes.nfs.*`,
`...secrets.*`, and `spark.kubernetes.authenticate.driver.serviceAccountName`): one allow-list, one meaning.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from dagline.errors import InvalidInput

ALLOWED_CONF_SETTING = "DAGLINE_SPARK_ALLOWED_CONF"


@dataclasses.dataclass(frozen=True)
class Refusal:
    """A refused key (or every key under a prefix, when `prefix`) and the reason users read."""

    key: str
    prefix: bool
    why: str

    def matches(self, key: str) -> bool:
        return key.startswith(self.key) if self.prefix else key == self.key


_IDENTITY = ("changes the identity the driver or executors run as (service account, token, certificate); "
             "the platform's Spark service account is every task's identity")
_SECRETS = "mounts or reads a Kubernetes Secret of the Spark namespace into the pods"
_SECRET_ENV = ("puts a key of a Kubernetes Secret of the Spark namespace into the pods' environment; "
               "take environment variables from your own namespace's Secrets with the task's env")
_TEMPLATE = "a pod template can set anything of the pods (service account, volumes, privileges)"
_NODE_DISK = "mounts a path of the node (hostPath) into the pods"
_NFS = "mounts an NFS export chosen by the DAG into the pods"
_MASTER = "the master and deploy mode are dagline's choice (spark-submit --master local[*], or the spark-operator)"
_IMAGE = "use the task's spark.image field instead"
_NAMESPACE = "the namespace of Spark pods is the platform's choice (the chart's spark.namespace)"
_KERBEROS = "reads a Secret or a ConfigMap of the Spark namespace for Kerberos credentials"


def _rules() -> tuple[Refusal, ...]:
    rules = [
        # Identity: every spark.kubernetes.authenticate.* key (service accounts of driver and executors,
        # OAuth tokens and their files, client keys and certificates, the CA file).
        Refusal("spark.kubernetes.authenticate.", True, _IDENTITY),
        Refusal("spark.kubernetes.kerberos.", True, _KERBEROS),
        Refusal("spark.master", False, _MASTER),
        Refusal("spark.kubernetes.driver.master", False, _MASTER),
        Refusal("spark.submit.deploymode", False, _MASTER),
        Refusal("spark.kubernetes.namespace", False, _NAMESPACE),
        Refusal("spark.kubernetes.container.image", False, _IMAGE),
    ]
    for role in ("driver", "executor"):
        rules += [
            Refusal(f"spark.kubernetes.{role}.secrets.", True, _SECRETS),
            Refusal(f"spark.kubernetes.{role}.secretkeyref.", True, _SECRET_ENV),
            Refusal(f"spark.kubernetes.{role}.podtemplatefile", False, _TEMPLATE),
            Refusal(f"spark.kubernetes.{role}.podtemplatecontainername", False, _TEMPLATE),
            Refusal(f"spark.kubernetes.{role}.volumes.hostpath.", True, _NODE_DISK),
            Refusal(f"spark.kubernetes.{role}.volumes.nfs.", True, _NFS),
            Refusal(f"spark.kubernetes.{role}.container.image", False, _IMAGE),
        ]
    return tuple(rules)


REFUSED: tuple[Refusal, ...] = _rules()
"""Refused keys and prefixes, lower case. They include every key the spark-operator's own validating
webhook denies (kubeflow/spark-operator `internal/webhook/sparkconf_validator.go`, added by its pull
request 3043, on master at commit 38082f33 of 2026-08; not yet in release v2.5.2): the driver's and
executors' service account names and the six OAuth token keys (all under `spark.kubernetes.authenticate.`),
`spark.master`, `spark.kubernetes.driver.master`, the three container image keys, and
`spark.kubernetes.namespace` unless it equals the application's namespace (refused here whatever its
value: dagline chooses the namespace). Refusing them at apply means a task never fails at every launch
for a key the cluster would deny."""


@dataclasses.dataclass(frozen=True)
class SparkPolicy:
    """The refusals above, minus what the platform admin allowed (`allowed`: keys, or prefixes ending `*`)."""

    allowed: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str | None, *, field: str = ALLOWED_CONF_SETTING) -> SparkPolicy:
        """The policy of a comma list such as `spark.kubernetes.driver.secrets.*, spark.kubernetes.namespace`."""
        entries = []
        for raw in (text or "").split(","):
            entry = raw.strip()
            if not entry:
                continue
            if any(ch.isspace() for ch in entry) or "*" in entry[:-1] or entry == "*":
                raise InvalidInput(f"{entry!r} is not a Spark conf key or a prefix ending in '*' (allowing "
                                   "every key is not an option: list the keys)", field=field)
            entries.append(entry.lower())
        return cls(tuple(entries))

    def is_allowed(self, key: str) -> bool:
        key = _normal(key)
        return any(key.startswith(entry[:-1]) if entry.endswith("*") else key == entry for entry in self.allowed)

    def refusal(self, key: str) -> str | None:
        """Why `key` may not be set, or None when it may."""
        normal = _normal(key)
        rule = next((r for r in REFUSED if r.matches(normal)), None)
        if rule is None or self.is_allowed(key):
            return None
        return (f"{rule.why}; refused by the Spark policy (a platform admin can allow it with "
                f"{ALLOWED_CONF_SETTING} / the chart's spark.allowedConf)")

    def refusals(self, keys: Iterable[str]) -> list[tuple[str, str]]:
        """(key, why) for every refused key, in the order given."""
        return [(key, why) for key in keys if (why := self.refusal(key)) is not None]

    def pod_refusals(self, volumes: Iterable[Mapping[str, Any]], service_account: str | None,
                     ) -> list[tuple[tuple[str | int, ...], str]]:
        """(path under the task's `spark`, why) for every volume and the driver service account refused."""
        found: list[tuple[tuple[str | int, ...], str]] = []
        for index, volume in enumerate(volumes):
            for kind, conf in VOLUME_CONF.items():
                if kind in volume and (why := self._refused_like(conf)) is not None:
                    found.append((("volumes", index, kind), f"a {kind} volume {why}"))
        if service_account and (why := self._refused_like(SERVICE_ACCOUNT_CONF)) is not None:
            found.append((("driver", "serviceAccount"), f"{service_account!r} {why}"))
        return found

    def _refused_like(self, conf: str) -> str | None:
        keys = [conf.replace("{role}", role) for role in ("driver", "executor")] if "{role}" in conf else [conf]
        rule = next((r for key in keys if (r := self._rule(key)) is not None), None)
        if rule is None:
            return None
        allow = " and ".join(k if not k.endswith(".") else k + "*" for k in dict.fromkeys(
            (k[: k.rindex(".x")] + "." if k.endswith(".x") else k) for k in keys))
        return (f"{rule.why}; refused by the Spark policy (a platform admin can allow it by listing {allow} in "
                f"{ALLOWED_CONF_SETTING} / the chart's spark.allowedConf)")

    def _rule(self, key: str) -> Refusal | None:
        normal = _normal(key)
        rule = next((r for r in REFUSED if r.matches(normal)), None)
        return None if rule is None or self.is_allowed(key) else rule


VOLUME_CONF = {  # volume type: the Spark conf key (".x": any key under the prefix) that does the same
    "hostPath": "spark.kubernetes.{role}.volumes.hostPath.x",
    "nfs": "spark.kubernetes.{role}.volumes.nfs.x",
    "secret": "spark.kubernetes.{role}.secrets.x",
    "projected": "spark.kubernetes.{role}.secrets.x",
}
SERVICE_ACCOUNT_CONF = "spark.kubernetes.authenticate.driver.serviceAccountName"


def _normal(key: str) -> str:
    return key.strip().lower()


DEFAULT_POLICY = SparkPolicy()

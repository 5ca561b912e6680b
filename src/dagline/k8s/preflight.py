"""The Spark preflight: can tries run at all? Is the SparkApplication kind installed, and does a
spark-operator watch the Spark namespace? (docs/adr/0080)

The answer is a `Verdict` decided by `decide`, a pure function of three findings:
- the kind: a one-item list of SparkApplications in the Spark namespace (a 404 "could not find the
  requested resource" means no CRD; the chart already grants `list` there, so nothing more is asked);
- the probe: a SparkApplication `dagline-preflight-probe` with `spec.suspend: true` and an unscheduled
  main file, created in the Spark namespace. A spark-operator that watches the namespace writes a status
  (2.4 and later: SUSPENDED with no pod; older ones fail its submission at once); none within
  `DAGLINE_SPARK_PICKUP_TIMEOUT` (dagline's clock) means no operator picked it up. It is deleted once
  answered, and created again at the next preflight;
- the tries: the spark-k8s executor's own evidence (`Pickups`): the latest try's application picked up
  (it got a status) or not within the same bound.
The newest evidence of the probe and the tries wins, so a spark-operator installed or reconfigured
later turns the verdict back to True at the next preflight or picked-up try.

`Preflight.check()` (every `DAGLINE_SPARK_PREFLIGHT_INTERVAL`, from the replica's runtime, first at its
start) gathers the findings and keeps the verdict; the status sync puts it on each DAG object as the
`SparkReady` condition (with an Event when it changes), `/metrics` as `dagline_spark_ready`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
from typing import Any

from dagline.k8s import conditions
from dagline.k8s.client import AlreadyExists, ApiRejected, ApiUnavailable, SparkApplications
from dagline.k8s.sparkapp import API_VERSION, KIND

log = logging.getLogger(__name__)

CONDITION = "SparkReady"
WATCHING = "SparkOperatorWatching"
NOT_WATCHING = "SparkOperatorNotWatching"
CRD_MISSING = "SparkApplicationCRDMissing"
CHECKING = "Checking"
UNREACHABLE = "SparkCheckFailed"
PROBE_NAME = "dagline-preflight-probe"
LABEL_PREFLIGHT = "dagline.io/preflight"
CRD_NAME = "sparkapplications.sparkoperator.k8s.io"


@dataclasses.dataclass(frozen=True)
class Verdict:
    """`status` "True", "False" or "Unknown", with the condition's reason and message."""

    status: str
    reason: str
    message: str

    @property
    def ready(self) -> bool | None:
        return {"True": True, "False": False}.get(self.status)


@dataclasses.dataclass(frozen=True)
class Pickup:
    """One finding about whether a spark-operator picked an application up: `picked` or not, when."""

    picked: bool
    at: dt.datetime
    name: str


def decide(*, namespace: str, crd_installed: bool | None, probe: Pickup | None, latest_try: Pickup | None,
           pickup_timeout_s: float, error: str | None = None) -> Verdict:
    """The verdict from the findings (None: not known yet). Pure."""
    if crd_installed is False:
        return Verdict("False", CRD_MISSING,
                       f"the SparkApplication kind is not installed (no CustomResourceDefinition {CRD_NAME}): "
                       "install the spark-operator; every try fails until then")
    if crd_installed is None and error is not None:
        return Verdict("Unknown", UNREACHABLE, f"the Spark preflight could not ask the Kubernetes API: {error}")
    findings = [f for f in (probe, latest_try) if f is not None]
    if not findings:
        return Verdict("Unknown", CHECKING, f"waiting for a spark-operator to pick up the preflight probe in "
                                            f"namespace {namespace} (at most {pickup_timeout_s:g} s)")
    newest = max(findings, key=lambda f: f.at)
    if newest.picked:
        return Verdict("True", WATCHING, f"a spark-operator watches namespace {namespace}: it picked up a "
                                         "SparkApplication there")
    return Verdict("False", NOT_WATCHING,
                   f"no spark-operator picked up SparkApplication {namespace}/{newest.name} within "
                   f"{pickup_timeout_s:g} s: is the spark-operator installed, and does it watch namespace "
                   f"{namespace}? (its Helm value spark.jobNamespaces, default [default]); tries fail after "
                   f"{pickup_timeout_s:g} s until it does")


def probe_manifest(namespace: str, *, spark_version: str, image: str, service_account: str,
                   created_at: dt.datetime) -> dict[str, Any]:
    """The probe: suspended (no pod on spark-operator 2.4+), a main file that does not exist (older ones
    fail its submission at once), labelled so the executor never follows it."""
    return {
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"name": PROBE_NAME, "namespace": namespace,
                     "labels": {LABEL_PREFLIGHT: "probe", "app.kubernetes.io/managed-by": "dagline"},
                     "annotations": {"dagline.io/created-at": created_at.isoformat(),
                                     "dagline.io/purpose": "does a spark-operator watch this namespace? "
                                                           "(deleted once answered)"}},
        "spec": {"type": "Python", "mode": "cluster", "pythonVersion": "3", "sparkVersion": spark_version,
                 "image": image, "suspend": True,
                 "mainApplicationFile": "local:///dagline/preflight-probe-is-never-run.py",
                 "restartPolicy": {"type": "Never"},
                 "driver": {"cores": 1, "memory": "512m", "serviceAccount": service_account},
                 "executor": {"instances": 1, "cores": 1, "memory": "512m"}},
    }


def condition(verdict: Verdict, *, now: dt.datetime, previous=None) -> dict[str, Any]:
    """The `SparkReady` condition (keeping its transition time while its status stays)."""
    return conditions.condition(CONDITION, verdict.status, verdict.reason, verdict.message, now=now,
                                previous=previous)


def with_condition(current: list[dict[str, Any]] | None, verdict: Verdict | None, *, now: dt.datetime,
                   previous=None) -> list[dict[str, Any]]:
    """`conditions` with the `SparkReady` one replaced (or dropped when there is no verdict)."""
    kept = [c for c in current or () if c.get("type") != CONDITION]
    return kept if verdict is None else [*kept, condition(verdict, now=now, previous=previous)]


class Pickups:
    """The spark-k8s executor's evidence, written from the scheduler thread, read by the preflight."""

    def __init__(self):
        self._lock = threading.Lock()
        self.latest: Pickup | None = None

    def record(self, picked: bool, at: dt.datetime, name: str) -> None:
        with self._lock:
            if self.latest is None or at >= self.latest.at:
                self.latest = Pickup(picked, at, name)


def _created_at(obj: dict[str, Any]) -> dt.datetime | None:
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get("dagline.io/created-at")
    try:
        return dt.datetime.fromisoformat(raw) if raw else None
    except ValueError:
        return None


class Preflight:
    """Runs the checks against the Spark namespace; `verdict` is the latest (None before the first)."""

    def __init__(self, apps: SparkApplications, *, clock, pickup_timeout_s: float, spark_version: str,
                 image: str, service_account: str, pickups: Pickups | None = None):
        self.apps = apps
        self.clock = clock
        self.pickup_timeout_s = pickup_timeout_s
        self.spark_version, self.image, self.service_account = spark_version, image, service_account
        self.pickups = pickups or Pickups()
        self._probe_out = False
        self.probe: Pickup | None = None
        self.crd: bool | None = None
        self.error: str | None = None
        self.checks = 0          # preflights done
        self._logged: Verdict | None = None

    @property
    def verdict(self) -> Verdict | None:
        """The verdict from the latest findings (the tries' too, as they come); None before the first check."""
        if not self.checks:
            return None
        return decide(namespace=self.namespace, crd_installed=self.crd, probe=self.probe,
                      latest_try=self.pickups.latest, pickup_timeout_s=self.pickup_timeout_s, error=self.error)

    @property
    def probing(self) -> bool:
        """A probe is out, unanswered: check again soon rather than at the next interval."""
        return self._probe_out

    @property
    def namespace(self) -> str:
        return self.apps.namespace

    def check(self) -> Verdict:
        """One preflight: the kind, then the probe (created, read, or deleted once it answered)."""
        self.crd, self.error = None, None
        try:
            self.crd = self.apps.kind_installed()
            if self.crd:
                self._probe()
        except (ApiUnavailable, ApiRejected) as exc:
            self.error = str(exc)
        self.checks += 1
        verdict = self.verdict
        if verdict != self._logged:
            (log.info if verdict.ready else log.warning)("Spark preflight: %s: %s", verdict.reason, verdict.message)
            self._logged = verdict
        return verdict

    def _probe(self) -> None:
        now = self.clock.now()
        obj = self.apps.get(PROBE_NAME)
        self._probe_out = obj is None or not obj.get("status")
        if obj is None:
            try:
                self.apps.create(probe_manifest(self.namespace, spark_version=self.spark_version, image=self.image,
                                                service_account=self.service_account, created_at=now))
            except AlreadyExists:  # another replica's, just created: read at the next check
                pass
            return
        created = _created_at(obj) or now
        if obj.get("status"):
            self.probe = Pickup(True, now, PROBE_NAME)
            self.apps.delete(PROBE_NAME)  # answered; the next preflight asks again
        elif (now - created).total_seconds() > self.pickup_timeout_s:
            self.probe = Pickup(False, now, PROBE_NAME)
            self._probe_out = False
            self.apps.delete(PROBE_NAME)  # so a spark-operator started later is asked afresh

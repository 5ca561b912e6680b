"""The Spark preflight on the emulator: a spark-operator that does not watch the Spark namespace, or no
SparkApplication CRD at all, is said on every DAG's `SparkReady` condition, in an Event and on
`/metrics`, and a try nobody picks up fails after the pickup timeout (1 minute, on the injected clock)
with that reason, not after the 15-minute pending timeout."""

from __future__ import annotations

import datetime as dt

import pytest

from dagline.clock import FixedClock
from dagline.k8s import crds as dagline_crds
from dagline.k8s import resources as dagline_resources
from dagline.k8s.client import load_api_client
from dagline.k8s.executor import SparkK8sExecutor, SparkK8sSettings
from tests.helpers.harness import events
from tests.helpers.k8s.operator_harness import (
    NS,
    condition,
    dag_manifest,
    dagrun_manifest,
    http_get,
    replica,
)

APPS = "sparkapplications"
PROBE = "dagline-preflight-probe"
START = dt.datetime(2026, 3, 2, 1, tzinfo=dt.timezone.utc)


def spark_executor(clock) -> SparkK8sExecutor:
    settings = SparkK8sSettings(namespace=NS, image="spark:3.5.3", pending_timeout_s=900.0, pickup_timeout_s=60.0,
                                preflight_interval_s=0.2)
    return SparkK8sExecutor(settings, parallelism=4, clock=clock, api_client=load_api_client(), list_interval_s=0.0,
                            retry_interval_s=0.0)


def spark_ready(kube, status: str, reason: str) -> dict:
    """The DAG object `daily` once its SparkReady condition has this status and reason."""
    return kube.wait_for(lambda: kube.get("dags", NS, "daily"), timeout=15, what=f"SparkReady {status} {reason}",
                         until=lambda d: ((condition(d, "SparkReady") or {}).get("status"),
                                          (condition(d, "SparkReady") or {}).get("reason")) == (status, reason))


def warnings_on_dag(kube, reason: str) -> list[dict]:
    return [e for e in kube.events(NS, involving="daily") if e["reason"] == reason]


def try_failures(db, reason: str) -> list:
    return [e for e in events(db, entity="task_instance")
            if e.to_state in ("failed", "up_for_retry") and reason in (e.detail or "")]


def test_a_spark_operator_not_watching_the_namespace_fails_the_try_in_a_minute_and_the_dag_says_why(
        kube, run_kopf, spark_operator, pg_db):
    spark_operator.watch_namespaces(["spark-elsewhere"])  # the chart's default jobNamespaces is [default]: not ours
    clock = FixedClock(START)
    with replica(run_kopf, pg_db, executor=spark_executor(clock), clock=clock) as runtime:
        kube.create("dags", NS, dag_manifest("daily", schedule=None))
        dag = spark_ready(kube, "Unknown", "Checking")  # the probe is out; nobody has answered yet
        assert condition(dag, "Ready")["status"] == "True"
        kube.create("dagruns", NS, dagrun_manifest("daily-1", logicalDate="2026-03-01"))
        [app] = kube.wait_for(lambda: kube.list(APPS, NS, label_selector="dagline.io/task=extract"),
                              what="extract's SparkApplication")
        assert not app.get("status")  # no spark-operator picked it up

        clock.advance(dt.timedelta(seconds=61))  # one minute, not fifteen
        [failure] = kube.wait_for(lambda: try_failures(pg_db, "SparkOperatorNotWatching"), timeout=15,
                                  what="the try failed with the reason")
        assert "namespace default" in failure.detail and "DAGLINE_SPARK_PICKUP_TIMEOUT" in failure.detail
        dag = spark_ready(kube, "False", "SparkOperatorNotWatching")
        assert "namespace default" in condition(dag, "SparkReady")["message"]
        assert "spark.jobNamespaces" in condition(dag, "SparkReady")["message"]
        [event] = kube.wait_for(lambda: warnings_on_dag(kube, "SparkOperatorNotWatching"), what="a Warning Event")
        assert event["type"] == "Warning" and "namespace default" in event["message"]
        _, page = http_get(runtime.servers.metrics_port, "/metrics")
        assert 'dagline_spark_ready{reason="SparkOperatorNotWatching"} 0.0' in page
        assert kube.get(APPS, NS, app["metadata"]["name"], missing_ok=True) is None  # it cannot start later

        spark_operator.watch_namespaces(None)  # the platform fixes the spark-operator's jobNamespaces
        spark_ready(kube, "True", "SparkOperatorWatching")  # the next probe is picked up
        kube.wait_for(lambda: [e for e in kube.events(NS, involving="daily") if e["reason"] == "SparkOperatorWatching"],
                      what="a Normal Event saying Spark is ready again")
    assert spark_operator.submissions == []  # neither the unwatched try nor the suspended probe ever ran


def test_a_spark_operator_watching_the_namespace_makes_every_dag_spark_ready(kube, run_kopf, spark_operator, pg_db):
    clock = FixedClock(START)
    with replica(run_kopf, pg_db, executor=spark_executor(clock), clock=clock) as runtime:
        kube.create("dags", NS, dag_manifest("daily", schedule=None))
        dag = spark_ready(kube, "True", "SparkOperatorWatching")
        assert "namespace default" in condition(dag, "SparkReady")["message"]
        _, page = http_get(runtime.servers.metrics_port, "/metrics")
        assert 'dagline_spark_ready{reason="SparkOperatorWatching"} 1.0' in page
        kube.create("dagruns", NS, dagrun_manifest("daily-1", logicalDate="2026-03-01"))
        kube.wait_for(lambda: kube.get("dagruns", NS, "daily-1"), timeout=15, what="run success",
                      until=lambda r: (r.get("status") or {}).get("state") == "success")
    assert not warnings_on_dag(kube, "SparkOperatorNotWatching")
    probes = [s for s in spark_operator.submissions if s.name == PROBE]
    assert probes == [] and len(spark_operator.submissions) == 2  # the probe is suspended: it never runs


DAGLINE_CRDS_ONLY = [dagline_crds.custom_resource_definition(k) for k in dagline_resources.KINDS]


@pytest.mark.parametrize("kube", [DAGLINE_CRDS_ONLY], indirect=True)
def test_no_sparkapplication_crd_is_said_on_the_dag_and_fails_a_try_at_once(kube, run_kopf, pg_db):
    clock = FixedClock(START)
    with replica(run_kopf, pg_db, executor=spark_executor(clock), clock=clock) as runtime:
        kube.create("dags", NS, dag_manifest("daily", schedule=None))
        dag = spark_ready(kube, "False", "SparkApplicationCRDMissing")
        assert "sparkapplications.sparkoperator.k8s.io" in condition(dag, "SparkReady")["message"]
        [event] = kube.wait_for(lambda: warnings_on_dag(kube, "SparkApplicationCRDMissing"), what="a Warning Event")
        assert event["type"] == "Warning"
        kube.create("dagruns", NS, dagrun_manifest("daily-1", logicalDate="2026-03-01"))
        [failure] = kube.wait_for(lambda: try_failures(pg_db, "SparkApplicationCRDMissing"), timeout=15,
                                  what="the try failed at once, naming the missing CRD")
        assert "install the spark-operator" in failure.detail
        _, page = http_get(runtime.servers.metrics_port, "/metrics")
        assert 'dagline_spark_ready{reason="SparkApplicationCRDMissing"} 0.0' in page

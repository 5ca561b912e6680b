"""The whole path through the API: DAG object -> DagRun object -> a SparkApplication per task, run by the
spark-operator stand-in -> the run succeeds and the DagRun's status says so."""

from __future__ import annotations

import datetime as dt

from dagline.clock import FixedClock
from dagline.k8s.client import load_api_client
from dagline.k8s.executor import SparkK8sExecutor, SparkK8sSettings
from tests.helpers.k8s.operator_harness import NS, dag_manifest, dagrun_manifest, is_ready, replica, run_rows


def test_a_dagrun_object_runs_its_tasks_as_spark_applications(kube, run_kopf, spark_operator, pg_db):
    clock = FixedClock(dt.datetime(2026, 3, 2, 1, tzinfo=dt.timezone.utc))
    executor = SparkK8sExecutor(SparkK8sSettings(namespace=NS, image="spark:3.5.3"), parallelism=4, clock=clock,
                                api_client=load_api_client(), list_interval_s=0.0, retry_interval_s=0.0)
    with replica(run_kopf, pg_db, executor=executor, clock=clock):
        kube.create("dags", NS, dag_manifest("daily", schedule=None))
        kube.wait_for(lambda: kube.get("dags", NS, "daily"), until=is_ready, what="DAG Ready")
        kube.create("dagruns", NS, dagrun_manifest("daily-1", logicalDate="2026-03-01"))
        run = kube.wait_for(lambda: kube.get("dagruns", NS, "daily-1"), timeout=15, what="run success",
                            until=lambda r: (r.get("status") or {}).get("state") == "success")
    assert run["status"]["taskCounts"] == {"success": 2}
    [row] = run_rows(pg_db, "daily")
    submitted = list(spark_operator.submissions)
    assert len(submitted) == 2  # one SparkApplication per task, each launched once
    assert {s.spec["arguments"][1] for s in submitted} == {"2026-03-01"}  # `{{ ds }}` rendered
    assert sorted(s.spec["mainApplicationFile"] for s in submitted) == ["local:///jobs/extract.py",
                                                                         "local:///jobs/load.py"]
    assert row.state == "success"

"""A task's placement fields (`spark.pod`, `spark.volumes`, `spark.driver.serviceAccount`): read from the
spec into the try's Spark job, refused by the Spark policy where they reach past the platform's RBAC,
and absent from the stored spec (and its version) when unset."""

from __future__ import annotations

import pytest

from dagline.domain.spark_policy import DEFAULT_POLICY, SparkPolicy
from dagline.errors import InvalidInput
from dagline.scheduler.launches import spark_job
from dagline.spec import Dag, parse_dag_yaml

DAG = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {{name: placed}}
spec:
  tasks:
    - id: a
      spark: {{mainApplicationFile: a.py{extra}}}
"""
PLACED = (", volumes: [{name: scratch, emptyDir: {}}], driver: {serviceAccount: team-spark},"
          " pod: {nodeSelector: {pool: spark}, tolerations: [{key: dedicated, effect: NoSchedule}],"
          " podSecurityContext: {runAsNonRoot: true}, volumeMounts: [{name: scratch, mountPath: /s}]}")
ALLOW_ACCOUNT = SparkPolicy.parse("spark.kubernetes.authenticate.driver.serviceAccountName")


def parse(extra: str = "", policy=DEFAULT_POLICY) -> Dag:
    (document,) = parse_dag_yaml(DAG.format(extra=extra), spark_policy=policy)
    return Dag.from_document(document)


def test_a_dag_without_placement_keeps_its_version_and_stores_none_of_the_fields():
    plain = parse()
    spark = plain.spec_json["tasks"][0]["spark"]
    assert not {"pod", "volumes"} & spark.keys() and "serviceAccount" not in spark["driver"]
    assert parse(PLACED, ALLOW_ACCOUNT).version != plain.version


def test_placement_fields_reach_the_try_s_spark_job():
    job = spark_job(parse(PLACED, ALLOW_ACCOUNT).tasks["a"], {})
    assert job.pod == {"nodeSelector": {"pool": "spark"}, "tolerations": [{"key": "dedicated", "effect": "NoSchedule"}],
                       "podSecurityContext": {"runAsNonRoot": True},
                       "volumeMounts": [{"name": "scratch", "mountPath": "/s"}]}
    assert job.volumes == ({"name": "scratch", "emptyDir": {}},)
    assert job.driver_service_account == "team-spark"
    plain = spark_job(parse().tasks["a"], {})
    assert (plain.pod, plain.volumes, plain.driver_service_account) == (None, (), None)


@pytest.mark.parametrize("extra, field", [
    (", volumes: [{name: root, hostPath: {path: /}}]", "spec.tasks[0].spark.volumes[0].hostPath"),
    (", driver: {serviceAccount: admin}", "spec.tasks[0].spark.driver.serviceAccount"),
    (", volumes: [{emptyDir: {}}]", "spec.tasks[0].spark"),
    (", volumes: [{name: a, emptyDir: {}}, {name: a, emptyDir: {}}]", "spec.tasks[0].spark"),
    (", pod: {volumeMounts: [{name: nowhere, mountPath: /n}]}", "spec.tasks[0].spark"),
    (", pod: {nodeSelector: {pool: [spark]}}", "spec.tasks[0].spark.pod.nodeSelector.pool"),
    (", pod: {tolerations: {key: x}}", "spec.tasks[0].spark.pod.tolerations"),
])
def test_bad_or_refused_placement_names_the_field(extra, field):
    with pytest.raises(InvalidInput) as exc:
        parse(extra)
    assert field in str(exc.value)

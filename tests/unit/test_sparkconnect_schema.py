"""The SparkConnect servers dagline builds for Spark Connect tasks are valid for the spark-operator's own CRD
(v1alpha1 openAPIV3Schema, tests/unit/data/README.md says which version): every field set exists where it is
set (the API server would prune a misplaced one silently, so unknown fields are errors here) with the CRD's
type, and the name leaves room for the Service the spark-operator derives from it."""

from __future__ import annotations

import datetime as dt

import pytest

from dagline.executors.base import SparkJob, TaskKey, TaskLaunch
from dagline.k8s import sparkconnect
from tests.helpers.spark_crds import PLACED, crd_validator

LAUNCHED = dt.datetime(2026, 3, 2, 2, 0, tzinfo=dt.timezone.utc)
KEY = TaskKey("sales-daily", "scheduled__2026-03-01T00:00:00+00:00", "clean_orders", 1)
SECURITY = {"podSecurityContext": {"runAsNonRoot": True, "runAsUser": 185, "seccompProfile": {"type": "RuntimeDefault"}},
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}
SIZED = {"cores": 2, "memory": "4g", "executor": {"instances": 3, "cores": 2, "memory": "2g"}}


@pytest.fixture(scope="module")
def validator():
    return crd_validator("sparkoperator.k8s.io_sparkconnects.yaml.gz", sparkconnect.VERSION)


def server_of(size=None, security=None, dag="sales-daily"):
    launch = TaskLaunch(ti_id=7, key=TaskKey(dag, KEY.run_id, KEY.task_id, 1),
                        job=SparkJob("local:///opt/jobs/a.py", connect=True, connect_server=size))
    return sparkconnect.build_server(launch, namespace="jobs", image="spark:4.0.1", spark_version="4.0.1",
                                     service_account="spark", pod_security=security, used_at=LAUNCHED)


@pytest.mark.parametrize("size, security", [(None, None), (SIZED, SECURITY)], ids=["defaults", "sized-secured"])
def test_built_servers_are_valid_for_the_spark_operator_crd(validator, size, security):
    server = server_of(size, security)
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(server)]
    assert errors == []


def test_the_server_is_sized_from_the_dag_spec_and_runs_as_the_platform_says():
    spec = server_of(SIZED, SECURITY)["spec"]
    assert (spec["server"]["cores"], spec["server"]["memory"]) == (2, "4g")
    assert spec["executor"]["instances"] == 3 and spec["executor"]["memory"] == "2g"
    assert spec["sparkVersion"] == "4.0.1" and spec["image"] == "spark:4.0.1"
    template = spec["server"]["template"]["spec"]
    assert template["serviceAccountName"] == "spark"
    assert template["securityContext"]["runAsNonRoot"] is True
    assert template["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_the_check_catches_a_misplaced_field(validator):
    server = server_of(SIZED)
    server["spec"]["server"]["instances"] = 2  # executors only: the API server would prune it silently
    server["spec"]["executor"]["cores"] = "two"
    errors = sorted(".".join(map(str, e.absolute_path)) for e in validator.iter_errors(server))
    assert errors == ["spec.executor.cores", "spec.server"]


def test_a_size_change_is_a_new_server_and_every_name_leaves_room_for_its_service():
    assert server_of(SIZED)["metadata"]["name"] != server_of(None)["metadata"]["name"]
    assert server_of(SIZED)["metadata"]["name"] == server_of(dict(SIZED))["metadata"]["name"]
    for dag in ("sales-daily", "7-eleven", "x" * 63):
        name = server_of(dag=dag)["metadata"]["name"]
        service = f"{name}-server"
        assert len(service) <= 63 and name[0].isalpha() and name[-1].isalnum()


def test_the_driver_pod_runs_the_job_against_the_server_with_the_tries_secret_and_placement():
    launch = TaskLaunch(ti_id=7, key=KEY, job=PLACED.__class__(**{**PLACED.__dict__, "connect": True,
                                                                   "driver_memory": None, "driver_cores": None}),
                        env=(("DAGLINE_API_URL", "http://x"), ("DAGLINE_SIGNAL_TOKEN", "t")), streaming=True,
                        stop_grace_s=45)
    pod = sparkconnect.build_driver_pod(launch, server="sales-daily-0123456789", namespace="jobs",
                                        default_image="jobs:1", pod_security=SECURITY, launched_at=LAUNCHED)
    spec = pod["spec"]
    [container] = spec["containers"]
    assert container["command"][:2] == ["python", "-c"]
    assert container["command"][3:] == ["--conf", "spark.sql.shuffle.partitions=4", "--",
                                        "/opt/jobs/clean.py", "--ds", "2026-03-01"]
    env = {e["name"]: e for e in container["env"]}
    assert env["SPARK_REMOTE"]["value"] == "sc://sales-daily-0123456789-server.jobs.svc:15002"
    secret = f"{pod['metadata']['name']}-env"
    assert env["DAGLINE_SIGNAL_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": secret, "key": "DAGLINE_SIGNAL_TOKEN"}}
    assert "t" not in [e.get("value") for e in container["env"]]  # the token is only in the try's Secret
    assert spec["nodeSelector"] == {"pool": "spark"} and spec["tolerations"][0]["key"] == "dedicated"
    assert spec["securityContext"]["fsGroup"] == 185  # the task's spark.pod wins over the platform's default
    assert container["volumeMounts"][0]["mountPath"] == "/scratch" and spec["volumes"][0]["name"] == "scratch"
    assert spec["serviceAccountName"] == "team-spark" and spec["restartPolicy"] == "Never"
    assert spec["terminationGracePeriodSeconds"] == 45
    assert pod["metadata"]["labels"]["dagline.io/connect-server"] == "sales-daily-0123456789"


def test_a_connect_task_on_kubernetes_needs_its_file_in_the_image_and_an_image():
    remote = TaskLaunch(ti_id=7, key=KEY, job=SparkJob("s3a://bucket/jobs/a.py", connect=True))
    with pytest.raises(sparkconnect.ManifestError, match="spark.mainApplicationFile"):
        sparkconnect.build_driver_pod(remote, server="s", namespace="jobs", default_image="i", launched_at=LAUNCHED)
    plain = TaskLaunch(ti_id=7, key=KEY, job=SparkJob("local:///opt/jobs/a.py", connect=True))
    with pytest.raises(sparkconnect.ManifestError, match="DAGLINE_SPARK_CONNECT_CLIENT_IMAGE"):
        sparkconnect.build_driver_pod(plain, server="s", namespace="jobs", default_image=None, launched_at=LAUNCHED)
    pod = sparkconnect.build_driver_pod(plain, server="s", namespace="jobs", default_image="i", launched_at=LAUNCHED)
    assert pod["spec"]["automountServiceAccountToken"] is False  # it talks to the server only


def test_pod_phases_are_try_states_and_a_failure_says_why():
    def pod(phase, **terminated):
        statuses = [{"name": "job", "state": {"terminated": terminated}}] if terminated else []
        return {"metadata": {"name": "p"}, "status": {"phase": phase, "containerStatuses": statuses}}

    assert [sparkconnect.observe(pod(p)).phase.value for p in ("Pending", "Running", "Succeeded", "Unknown")] == [
        "waiting", "running", "success", "waiting"]
    failed = sparkconnect.observe(pod("Failed", exitCode=1, reason="Error",
                                      message="Traceback ...\nValueError: no orders for 2026-03-01\n"))
    assert failed.phase.value == "failed"
    assert failed.message == ("Spark Connect driver pod p failed: exit code 1 (Error): "
                              "ValueError: no orders for 2026-03-01")

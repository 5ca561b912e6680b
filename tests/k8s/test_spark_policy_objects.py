"""The Spark policy on Kubernetes (issue 26, defect 3): a DAG object whose Spark conf mounts a Secret of the
Spark namespace (`spark.kubernetes.driver.secretKeyRef.*`) is refused on its status, naming the key, and
nothing is stored; a replica whose platform admin allowed the key (DAGLINE_SPARK_ALLOWED_CONF, the chart's
spark.allowedConf) applies the same object."""

from __future__ import annotations

from tests.helpers.k8s.operator_harness import NS, condition, dag_manifest, dag_row, is_ready, replica, task

KEY = "spark.kubernetes.driver.secretKeyRef.DB_URL"


def _sneaky() -> dict:
    load = task("load")
    load["spark"]["conf"] = {KEY: "dagline-db:url"}
    return dag_manifest("sneaky", tasks=[load])


def test_a_secret_key_ref_is_refused_on_the_dag_status_and_allowed_when_the_admin_allows_it(kube, run_kopf, pg_db):
    with replica(run_kopf, pg_db):
        kube.create("dags", NS, _sneaky())
        dag = kube.wait_for(lambda: kube.get("dags", NS, "sneaky"), until=lambda d: condition(d, "Invalid"),
                            what="Invalid condition")
        message = condition(dag, "Invalid")["message"]
        assert message.startswith(f'spec.tasks[0].spark.conf["{KEY}"]') and "Secret" in message
        assert condition(dag, "Ready")["status"] == "False"
        assert dag_row(pg_db, "sneaky") is None
    # the admin allows the key: the next replica applies the same object when it resumes it
    with replica(run_kopf, pg_db, spark_allowed_conf="spark.kubernetes.driver.secretKeyRef.*"):
        kube.wait_for(lambda: kube.get("dags", NS, "sneaky"), until=is_ready, what="DAG Ready")
    assert dag_row(pg_db, "sneaky").is_active


def _placed(name: str, volume: dict) -> dict:
    load = task("load")
    load["spark"]["volumes"] = [{"name": "scratch", "emptyDir": {}}, volume]
    load["spark"]["pod"] = {"tolerations": [{"key": "dedicated", "value": "spark", "effect": "NoSchedule"}],
                            "affinity": {"nodeAffinity": {}}, "volumeMounts": [{"name": "scratch", "mountPath": "/s"}]}
    return dag_manifest(name, tasks=[load])


def test_a_host_path_volume_is_refused_on_the_dag_status_and_placement_fields_survive_the_crd(kube, run_kopf, pg_db):
    with replica(run_kopf, pg_db):
        kube.create("dags", NS, _placed("rooted", {"name": "root", "hostPath": {"path": "/"}}))
        dag = kube.wait_for(lambda: kube.get("dags", NS, "rooted"), until=lambda d: condition(d, "Invalid"),
                            what="Invalid condition")
        assert condition(dag, "Invalid")["message"].startswith("spec.tasks[0].spark.volumes[1].hostPath")
        assert dag_row(pg_db, "rooted") is None
        kube.create("dags", NS, _placed("placed", {"name": "more", "emptyDir": {}}))
        dag = kube.wait_for(lambda: kube.get("dags", NS, "placed"), until=is_ready, what="DAG Ready")
    spark = dag["spec"]["tasks"][0]["spark"]  # what the CRD kept: nothing of the free-form objects pruned
    assert spark["pod"]["affinity"] == {"nodeAffinity": {}} and spark["pod"]["tolerations"][0]["key"] == "dedicated"
    assert dag_row(pg_db, "placed").is_active

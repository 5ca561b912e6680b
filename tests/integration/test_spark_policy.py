"""The Spark policy at `dagline dags apply` (issue 26, defect 3): a conf key that mounts a Secret, changes
the identity, sets a pod template or picks the master or image is refused with exit 2, naming the key
and why, and nothing is stored; a platform admin's DAGLINE_SPARK_ALLOWED_CONF lets it through. On both
databases. (The DAG object's status on Kubernetes: tests/k8s/test_spark_policy_objects.py.)"""

from __future__ import annotations

import pytest

from tests.helpers.cli import cli, snapshot

SNEAKY = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: sneaky}
spec:
  schedule: null
  tasks:
    - id: load
      spark:
        mainApplicationFile: load.py
        conf:
          spark.executor.memory: 1g
          %s: "%s"
"""


def _write(tmp_path, key: str, value: str = "x"):
    path = tmp_path / "sneaky.yaml"
    path.write_text(SNEAKY % (key, value))
    return str(path)


def test_a_secret_key_ref_in_spark_conf_is_refused_at_apply_naming_the_key_and_nothing_is_stored(db, tmp_path):
    before = snapshot(db)
    result = cli(db, "dags", "apply", _write(tmp_path, "spark.kubernetes.driver.secretKeyRef.DB_URL", "dagline-db:url"),
                 expect=2)
    assert 'spec.tasks[0].spark.conf["spark.kubernetes.driver.secretKeyRef.DB_URL"]' in result.stderr
    assert "Secret" in result.stderr and "DAGLINE_SPARK_ALLOWED_CONF" in result.stderr
    assert snapshot(db) == before


@pytest.mark.parametrize("key, why", [
    ("spark.kubernetes.executor.secrets.db", "Secret"),
    ("spark.kubernetes.authenticate.driver.serviceAccountName", "identity"),
    ("spark.kubernetes.authenticate.executor.oauthToken", "identity"),
    ("spark.kubernetes.driver.podTemplateFile", "pod template"),
    ("spark.master", "master"),
    ("spark.kubernetes.container.image", "spark.image"),
    ("spark.kubernetes.namespace", "namespace"),
    ("spark.kubernetes.driver.volumes.hostPath.root.mount.path", "hostPath"),
])
def test_identity_secret_template_master_image_and_namespace_keys_are_refused(sqlite_db, tmp_path, key, why):
    result = cli(sqlite_db, "dags", "apply", _write(tmp_path, key), expect=2)
    assert f'conf["{key}"]' in result.stderr and why in result.stderr


def test_a_key_the_platform_admin_allows_is_applied(db, tmp_path, monkeypatch):
    path = _write(tmp_path, "spark.kubernetes.driver.secretKeyRef.DB_URL", "team-db:url")
    monkeypatch.setenv("DAGLINE_SPARK_ALLOWED_CONF", "spark.kubernetes.driver.secretKeyRef.*")
    assert "sneaky: created" in cli(db, "dags", "apply", path).output
    # the allow-list names what it names: the executor's twin of the key stays refused
    other = _write(tmp_path, "spark.kubernetes.executor.secretKeyRef.DB_URL", "team-db:url")
    cli(db, "dags", "apply", other, expect=2)


def test_a_malformed_allow_list_is_an_error_naming_the_setting(sqlite_db, tmp_path, monkeypatch):
    monkeypatch.setenv("DAGLINE_SPARK_ALLOWED_CONF", "*")
    result = cli(sqlite_db, "dags", "apply", _write(tmp_path, "spark.master"), expect=2)
    assert "DAGLINE_SPARK_ALLOWED_CONF" in result.stderr


def test_ordinary_spark_conf_and_volume_claims_are_applied(sqlite_db, tmp_path):
    path = _write(tmp_path, "spark.kubernetes.driver.volumes.persistentVolumeClaim.data.mount.path", "/data")
    assert "sneaky: created" in cli(sqlite_db, "dags", "apply", path).output


PLACED = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: placed}
spec:
  schedule: null
  tasks:
    - id: load
      spark:
        mainApplicationFile: load.py
        volumes:
          - {name: scratch, emptyDir: {}}
          - %s
        driver: {%s}
        pod:
          tolerations: [{key: dedicated, value: spark, effect: NoSchedule}]
          volumeMounts: [{name: scratch, mountPath: /scratch}]
"""


def _placed(tmp_path, volume: str = "{name: more, emptyDir: {}}", driver: str = ""):
    path = tmp_path / "placed.yaml"
    path.write_text(PLACED % (volume, driver))
    return str(path)


def test_a_host_path_volume_is_refused_at_apply_naming_the_field_and_nothing_is_stored(db, tmp_path):
    before = snapshot(db)
    result = cli(db, "dags", "apply", _placed(tmp_path, "{name: root, hostPath: {path: /}}"), expect=2)
    assert "spec.tasks[0].spark.volumes[1].hostPath" in result.stderr
    assert "hostPath" in result.stderr and "DAGLINE_SPARK_ALLOWED_CONF" in result.stderr
    assert snapshot(db) == before


@pytest.mark.parametrize("volume", ["{name: s, secret: {secretName: db}}", "{name: n, nfs: {server: x, path: /}}",
                                    "{name: p, projected: {sources: []}}"])
def test_secret_nfs_and_projected_volumes_are_refused(sqlite_db, tmp_path, volume):
    result = cli(sqlite_db, "dags", "apply", _placed(tmp_path, volume), expect=2)
    assert "spec.tasks[0].spark.volumes[1]." in result.stderr


def test_a_driver_service_account_is_refused_unless_the_platform_admin_allows_it(sqlite_db, tmp_path, monkeypatch):
    path = _placed(tmp_path, driver="serviceAccount: team-spark")
    result = cli(sqlite_db, "dags", "apply", path, expect=2)
    assert "spec.tasks[0].spark.driver.serviceAccount" in result.stderr and "team-spark" in result.stderr
    monkeypatch.setenv("DAGLINE_SPARK_ALLOWED_CONF", "spark.kubernetes.authenticate.driver.serviceAccountName")
    assert "placed: created" in cli(sqlite_db, "dags", "apply", path).output


def test_a_host_path_the_platform_admin_allows_for_both_pods_is_applied(sqlite_db, tmp_path, monkeypatch):
    path = _placed(tmp_path, "{name: root, hostPath: {path: /mnt/cache}}")
    monkeypatch.setenv("DAGLINE_SPARK_ALLOWED_CONF", "spark.kubernetes.driver.volumes.hostPath.*")
    cli(sqlite_db, "dags", "apply", path, expect=2)  # the executors would get it too
    monkeypatch.setenv("DAGLINE_SPARK_ALLOWED_CONF",
                       "spark.kubernetes.driver.volumes.hostPath.*,spark.kubernetes.executor.volumes.hostPath.*")
    assert "placed: created" in cli(sqlite_db, "dags", "apply", path).output


def test_placement_fields_and_ordinary_volumes_are_applied(sqlite_db, tmp_path):
    assert "placed: created" in cli(sqlite_db, "dags", "apply", _placed(tmp_path)).output


def test_a_mount_of_a_volume_not_given_is_refused_naming_it(sqlite_db, tmp_path):
    path = tmp_path / "placed.yaml"
    path.write_text((PLACED % ("{name: more, emptyDir: {}}", "")).replace("name: scratch, mountPath", "name: typo, mountPath"))
    result = cli(sqlite_db, "dags", "apply", str(path), expect=2)
    assert "typo" in result.stderr and "volumeMounts" in result.stderr

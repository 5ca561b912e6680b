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

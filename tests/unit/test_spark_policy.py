"""The Spark policy's rules (`dagline.domain.spark_policy`): every key the spark-operator's webhook denies is
refused, and so are the keys that reach Secrets, node paths or pod templates; ordinary keys pass; an
admin's allow-list admits exactly the keys and prefixes it names."""

from __future__ import annotations

import pytest

from dagline.domain.spark_policy import DEFAULT_POLICY, SparkPolicy
from dagline.errors import InvalidInput

# kubeflow/spark-operator internal/webhook/sparkconf_validator.go (pull request 3043): its denied keys
OPERATOR_DENIES = [
    "spark.kubernetes.authenticate.driver.serviceAccountName",
    "spark.kubernetes.authenticate.executor.serviceAccountName",
    "spark.kubernetes.authenticate.oauthTokenFile", "spark.kubernetes.authenticate.oauthToken",
    "spark.kubernetes.authenticate.driver.oauthTokenFile", "spark.kubernetes.authenticate.driver.oauthToken",
    "spark.kubernetes.authenticate.executor.oauthTokenFile", "spark.kubernetes.authenticate.executor.oauthToken",
    "spark.master", "spark.kubernetes.driver.master", "spark.kubernetes.container.image",
    "spark.kubernetes.driver.container.image", "spark.kubernetes.executor.container.image",
    "spark.kubernetes.namespace",
]
ALSO_REFUSED = [
    "spark.kubernetes.driver.secretKeyRef.DB", "spark.kubernetes.executor.secretKeyRef.DB",
    "spark.kubernetes.driver.secrets.db", "spark.kubernetes.executor.secrets.db",
    "spark.kubernetes.driver.podTemplateFile", "spark.kubernetes.executor.podTemplateFile",
    "spark.kubernetes.driver.podTemplateContainerName", "spark.kubernetes.authenticate.submission.caCertFile",
    "spark.kubernetes.driver.volumes.hostPath.root.mount.path", "spark.kubernetes.executor.volumes.nfs.x.options.server",
    "spark.kubernetes.kerberos.tokenSecret.name", "spark.submit.deployMode",
    "SPARK.MASTER", " spark.kubernetes.Driver.SecretKeyRef.X ",  # case and blanks do not get around it
]
ALLOWED = ["spark.executor.memory", "spark.sql.shuffle.partitions", "spark.executorEnv.MODE",
           "spark.kubernetes.driver.volumes.persistentVolumeClaim.data.mount.path", "spark.kubernetes.driver.label.team",
           "spark.kubernetes.file.upload.path", "spark.masterish"]


@pytest.mark.parametrize("key", OPERATOR_DENIES + ALSO_REFUSED)
def test_refused_keys_say_why_and_how_an_admin_allows_them(key):
    why = DEFAULT_POLICY.refusal(key)
    assert why is not None and "DAGLINE_SPARK_ALLOWED_CONF" in why and "spark.allowedConf" in why


@pytest.mark.parametrize("key", ALLOWED)
def test_ordinary_keys_pass(key):
    assert DEFAULT_POLICY.refusal(key) is None


def test_an_allow_list_admits_exactly_its_keys_and_prefixes():
    policy = SparkPolicy.parse(" spark.kubernetes.driver.secretKeyRef.* , spark.kubernetes.namespace,")
    assert policy.refusal("spark.kubernetes.driver.secretKeyRef.TOKEN") is None
    assert policy.refusal("spark.kubernetes.namespace") is None
    assert policy.refusal("spark.kubernetes.executor.secretKeyRef.TOKEN") is not None
    assert policy.refusal("spark.master") is not None
    assert policy.refusals(["spark.master", "spark.executor.memory"]) == [("spark.master", DEFAULT_POLICY.refusal(
        "spark.master"))]


@pytest.mark.parametrize("text", ["*", "spark.*.secrets", "spark.kubernetes.driver secrets"])
def test_a_malformed_allow_list_names_the_setting(text):
    with pytest.raises(InvalidInput) as exc:
        SparkPolicy.parse(text)
    assert exc.value.field == "DAGLINE_SPARK_ALLOWED_CONF"

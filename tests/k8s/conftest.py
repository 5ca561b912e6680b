"""Fixtures for tests against Kubernetes: `kube` (the emulator), `run_kopf`, `spark_operator`.

`spark_operator` plays the spark-operator's part for SparkApplications in `kube` (mode `instant` until the
test sets `spark_operator.mode` or adds rules with `spark_operator.on(...)`).

`kube` starts a fresh emulator per test with the dagline and SparkApplication CRDs installed, writes a
kubeconfig for it and points `KUBECONFIG` at it, so kopf's login and `kubernetes.config.load_kube_config()`
both reach it. `run_kopf(target, namespace="default")` runs real kopf against it in a thread.
"""

from __future__ import annotations

import functools

import pytest

from tests.helpers.k8s.cluster import Cluster
from tests.helpers.k8s.kopf_runner import run_kopf as _run_kopf
from tests.helpers.k8s.spark_operator import SparkOperator


@pytest.fixture
def kube(tmp_path, monkeypatch, request):
    # `@pytest.mark.parametrize("kube", [crds], indirect=True)`: a cluster with only those CRDs installed
    cluster = Cluster(tmp_path).start(crds=getattr(request, "param", None))
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig_path))
    # The client reads $KUBECONFIG once, when it is imported: point its default at the emulator too.
    import kubernetes.config.kube_config

    monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(cluster.kubeconfig_path))
    monkeypatch.setattr(kubernetes.config, "KUBE_CONFIG_DEFAULT_LOCATION", str(cluster.kubeconfig_path))
    try:
        yield cluster
    finally:
        cluster.stop()
    # A bug in the emulator answers 500, which clients retry or report as an outage: make it a failure here.
    assert not cluster.server_errors, f"the Kubernetes emulator failed inside: {cluster.server_errors!r}"


@pytest.fixture
def run_kopf(kube):
    """`with run_kopf(registry_or_module, namespace="default", settings=None) as run:` kopf runs inside."""
    return functools.partial(_run_kopf, kube)


@pytest.fixture
def spark_operator(kube, tmp_path):
    """The spark-operator stand-in, watching every namespace of `kube`; relative application files are
    taken from `tmp_path`, spark-submit logs go to `tmp_path/spark-operator-logs`."""
    operator = SparkOperator(kube, "instant", workdir=tmp_path, logs=tmp_path / "spark-operator-logs").start()
    try:
        yield operator
    finally:
        operator.stop()
    assert not operator.errors, operator.errors

"""The Spark preflight's verdict (`dagline.k8s.preflight.decide`) and its settings: what a user reads on
each DAG's `SparkReady` condition, decided from the findings alone."""

from __future__ import annotations

import datetime as dt

import pytest

from dagline.errors import InvalidInput
from dagline.k8s.executor import SparkK8sSettings
from dagline.k8s.preflight import Pickup, decide, with_condition

T0 = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)


def verdict(**findings):
    values = dict(namespace="spark-jobs", crd_installed=True, probe=None, latest_try=None, pickup_timeout_s=60.0)
    values.update(findings)
    return decide(**values)


def test_no_crd_is_said_first_whatever_else_was_seen():
    found = verdict(crd_installed=False, probe=Pickup(True, T0, "p"))
    assert (found.status, found.reason) == ("False", "SparkApplicationCRDMissing")
    assert "sparkapplications.sparkoperator.k8s.io" in found.message and "install the spark-operator" in found.message


def test_a_probe_nobody_picked_up_names_the_namespace_and_the_helm_value():
    found = verdict(probe=Pickup(False, T0, "dagline-preflight-probe"))
    assert (found.status, found.reason) == ("False", "SparkOperatorNotWatching")
    assert "namespace spark-jobs" in found.message and "spark.jobNamespaces" in found.message
    assert "within 60 s" in found.message


def test_the_newest_finding_wins_so_a_fixed_spark_operator_turns_it_true():
    missed, picked = Pickup(False, T0, "probe"), Pickup(True, T0 + dt.timedelta(minutes=1), "a-try")
    assert verdict(probe=missed, latest_try=picked).reason == "SparkOperatorWatching"
    assert verdict(probe=picked, latest_try=Pickup(False, T0 + dt.timedelta(minutes=2), "b")).status == "False"


def test_unknown_until_something_was_seen_or_when_the_api_cannot_be_asked():
    assert (verdict().status, verdict().reason) == ("Unknown", "Checking")
    cut = verdict(crd_installed=None, error="HTTP 503: unavailable")
    assert (cut.status, cut.reason) == ("Unknown", "SparkCheckFailed") and "503" in cut.message


def test_the_condition_replaces_its_own_type_and_keeps_its_transition_time_while_unchanged():
    ready = {"type": "Ready", "status": "True", "reason": "Applied", "message": "v1",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}
    first = with_condition([ready], verdict(probe=Pickup(True, T0, "p")), now=T0)
    assert [c["type"] for c in first] == ["Ready", "SparkReady"]
    later = with_condition(first, verdict(probe=Pickup(True, T0, "p")), now=T0 + dt.timedelta(hours=1),
                           previous=first)
    assert later == first
    assert with_condition(first, None, now=T0) == [ready]


def test_settings_read_the_pickup_timeout_and_preflight_interval():
    settings = SparkK8sSettings.from_env({"DAGLINE_SPARK_NAMESPACE": "spark", "DAGLINE_SPARK_PICKUP_TIMEOUT": "PT2M",
                                          "DAGLINE_SPARK_PREFLIGHT_INTERVAL": "off"})
    assert settings.pickup_timeout_s == 120 and settings.preflight_interval_s == 0
    defaults = SparkK8sSettings.from_env({"DAGLINE_SPARK_NAMESPACE": "spark"})
    assert defaults.pickup_timeout_s == 60 and defaults.preflight_interval_s == 300
    with pytest.raises(InvalidInput) as refused:
        SparkK8sSettings.from_env({"DAGLINE_SPARK_NAMESPACE": "spark", "DAGLINE_SPARK_PICKUP_TIMEOUT": "soon"})
    assert refused.value.field == "DAGLINE_SPARK_PICKUP_TIMEOUT"

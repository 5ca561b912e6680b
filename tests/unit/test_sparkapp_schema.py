"""The SparkApplications dagline builds are valid for the spark-operator's own CRD (v1beta2 openAPIV3Schema,
tests/unit/data/README.md says which version): every field it sets exists where it is set (the API server
would silently prune a misplaced one, so unknown fields are errors here) and has the CRD's type."""

from __future__ import annotations

import datetime as dt

import pytest

from dagline.executors.base import SparkJob, TaskKey, TaskLaunch
from dagline.k8s import sparkapp
from tests.helpers.spark_crds import PLACED, crd_validator

LAUNCHED = dt.datetime(2026, 3, 2, 2, 0, tzinfo=dt.timezone.utc)
KEY = TaskKey("sales-daily", "scheduled__2026-03-01T00:00:00+00:00", "clean_orders", 1)


@pytest.fixture(scope="module")
def validator():
    return crd_validator("sparkoperator.k8s.io_sparkapplications.yaml.gz", sparkapp.VERSION)


@pytest.mark.parametrize("job, streaming", [
    (SparkJob("local:///opt/jobs/a.py"), False),
    (PLACED, False),
    (PLACED, True),
], ids=["plain", "placed", "placed-streaming"])
def test_built_applications_are_valid_for_the_spark_operator_crd(validator, job, streaming):
    launch = TaskLaunch(ti_id=7, key=KEY, job=job, streaming=streaming, env=(("DAGLINE_API_URL", "http://x"),))
    app = sparkapp.build_manifest(launch, namespace="jobs", default_image="spark:3.5.3", service_account="spark",
                                  spark_version="3.5.3", launched_at=LAUNCHED)
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(app)]
    assert errors == []


def test_the_check_catches_a_misplaced_field(validator):
    app = sparkapp.build_manifest(TaskLaunch(ti_id=7, key=KEY, job=PLACED), namespace="jobs", default_image="s",
                                  service_account="spark", spark_version="3.5.3", launched_at=LAUNCHED)
    app["spec"]["driver"]["podSecurityContexts"] = {}  # a typo the API server would silently prune
    app["spec"]["executor"]["nodeSelector"] = {"pool": 1}
    paths = sorted(".".join(map(str, e.absolute_path)) for e in validator.iter_errors(app))
    assert paths == ["spec.driver", "spec.executor.nodeSelector.pool"]


def test_the_preflight_probe_is_valid_for_the_crd_and_suspended(validator):
    from dagline.k8s.preflight import probe_manifest

    probe = probe_manifest("spark-jobs", spark_version="3.5.3", image="spark:3.5.3", service_account="spark",
                           created_at=LAUNCHED)
    errors = sorted(validator.iter_errors(probe), key=str)
    assert not errors, [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]
    assert probe["spec"]["suspend"] is True  # spark-operator 2.4+ starts no pod for it

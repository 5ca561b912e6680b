"""Checking built objects against the spark-operator's own CRDs (kept gzipped in tests/unit/data/, whose
README says which version): the CRD's schema for one version, closed wherever the API server would prune an
unknown field, and a fully placed Spark job to build objects from."""

from __future__ import annotations

import gzip
import pathlib

import jsonschema
import yaml

from dagline.executors.base import SparkJob

DATA = pathlib.Path(__file__).parent.parent / "unit" / "data"


def closed(schema):
    """The schema with unknown properties refused wherever the API server would prune them."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed(v) for k, v in schema.items()}
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def crd_validator(file_name: str, version: str) -> jsonschema.Draft7Validator:
    """A validator for one version of a CRD of the test data, unknown fields refused."""
    crd = yaml.safe_load(gzip.decompress((DATA / file_name).read_bytes()))
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"]
    return jsonschema.Draft7Validator(closed(schema))


PLACED = SparkJob(
    main_application_file="local:///opt/jobs/clean.py", arguments=("--ds", "2026-03-01"),
    conf=(("spark.sql.shuffle.partitions", "4"),), driver_cores=1, driver_memory="1g",
    executor_instances=2, executor_cores=2, executor_memory="2g",
    pod={
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "spark", "effect": "NoSchedule"}],
        "nodeSelector": {"pool": "spark"},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}}},
        "podSecurityContext": {"runAsNonRoot": True, "runAsUser": 185, "fsGroup": 185,
                               "seccompProfile": {"type": "RuntimeDefault"}},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch", "readOnly": False}],
    },
    volumes=({"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}},),
    driver_service_account="team-spark",
)

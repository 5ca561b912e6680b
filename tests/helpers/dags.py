"""The one way tests build a DAG spec: plain documents, as a user writes them in YAML.

    dag("chain", task("a"), task("b", "a", retries=1), maxActiveRuns=8)

is the document of a DAG `chain` with tasks `a` and `b` (b downstream of a). Keyword arguments are the
spec's own field names (camelCase, as in the YAML and the DAG resource), so what a test builds reads
like what a user writes. `write` puts it in a file for `dagline dags apply`; `loaded` parses it as
the Kubernetes handlers do. Scenario tests whose whole DAG is the point still spell it out in YAML.
"""

from __future__ import annotations

import pathlib
from typing import Any

import yaml

from dagline.spec import Dag, LoadedDag, parse_dag_document

API_VERSION = "dagline.io/v1alpha1"


def task(task_id: str, *upstream: str, app: str | None = None, spark: dict | None = None, **fields: Any) -> dict:
    """One task: its upstream ids, a Spark section running `app` (default `<task id>.py`), any other field."""
    body: dict[str, Any] = {"id": task_id}
    if upstream:
        body["upstream"] = list(upstream)
    body.update(fields)
    body["spark"] = {"mainApplicationFile": app or f"{task_id}.py", **(spark or {})}
    return body


def dag(name: str = "daily", *tasks: dict, schedule: str | None = None, metadata: dict | None = None,
        **spec: Any) -> dict:
    """A DAG document (`kind: DAG`); without tasks, a single task `a`. `schedule` defaults to null
    (runs only when triggered); `metadata` adds to the object's metadata (labels, annotations).
    Built DAGs say `paused: false` and `catchup: true` (the spec's safe defaults are the opposite):
    a test of the defaults passes `paused=None` / `catchup=None` to leave them out."""
    body = {"schedule": schedule, "paused": False, "catchup": True, **spec, "tasks": list(tasks) or [task("a")]}
    body = {key: value for key, value in body.items() if value is not None or key == "schedule"}
    return {"apiVersion": API_VERSION, "kind": "DAG", "metadata": {"name": name, **(metadata or {})}, "spec": body}


def write(folder: pathlib.Path | str, document: dict, filename: str | None = None) -> str:
    """Write the document as YAML into `folder` (as `<name>.yaml` unless named) and return its path."""
    path = pathlib.Path(folder) / (filename or f"{document['metadata']['name']}.yaml")
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return str(path)


def loaded(document: dict, source: str | None = None) -> LoadedDag:
    """The document parsed and validated, as the Kubernetes handlers load a DAG object."""
    name = document["metadata"]["name"]
    return LoadedDag(Dag.from_document(parse_dag_document(document)), source or f"k8s://default/{name}")


# A daily DAG of two tasks (extract -> load), unpaused and catching up from 2026-03-01: the history the
# retention and history-read tests build.
DAILY_EXTRACT_LOAD = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: daily}
spec:
  paused: false
  catchup: true
  schedule: "@daily"
  startDate: "2026-03-01"
  tasks:
    - {id: extract, spark: {mainApplicationFile: extract.py}}
    - {id: load, upstream: [extract], spark: {mainApplicationFile: load.py}}
"""

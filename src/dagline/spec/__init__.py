"""The DAG spec: pydantic models of the YAML documents, their validation, and the resolved `Dag`.

Three layers, each built from the one before:

* Models (`dagline.spec.models`: `DagDocument`, `DagSpec`, `TaskSpec`, `SparkSpec`, ...; and
  `dagline.spec.resources`: `BackfillSpec`, `DagRunSpec`, `PoolSpec`) mirror the YAML exactly, with the
  field types of `dagline.spec.fields`.
* Checks that span fields (`dagline.spec.checks`: task graph, start/end dates, `params` used by templates)
  run on a parsed spec; every problem becomes an `InvalidInput` naming the DAG and the field in YAML
  spelling (`dagline.spec.problems`).
* `Dag` / `Task` (`dagline.spec.dag`) are the resolved, ready-to-schedule view.

Loading (`dagline.spec.loading`) validates everything before returning anything, so callers can write to
the database knowing the whole batch is valid. This package re-exports the public names of its modules.
"""

from dagline.spec.checks import check_dag_spec
from dagline.spec.dag import Dag, Task, normalized_spec, spec_version
from dagline.spec.fields import DagId, InstantStr, IsoDuration, SparkMemory, TaskId, TemplatedStr
from dagline.spec.loading import (
    LoadedDag,
    load_dag_file,
    load_dag_paths,
    parse_dag_document,
    parse_dag_yaml,
)
from dagline.spec.models import (
    API_VERSION,
    DagDocument,
    DagMetadata,
    DagSpec,
    DriverSpec,
    ExecutorSpec,
    SparkSpec,
    TaskDefaults,
    TaskSpec,
)
from dagline.spec.problems import format_path
from dagline.spec.resources import BackfillSpec, DagRunSpec, PoolSpec

__all__ = [
    "API_VERSION",
    "BackfillSpec",
    "Dag",
    "DagDocument",
    "DagId",
    "DagMetadata",
    "DagRunSpec",
    "DagSpec",
    "DriverSpec",
    "ExecutorSpec",
    "InstantStr",
    "IsoDuration",
    "LoadedDag",
    "PoolSpec",
    "SparkMemory",
    "SparkSpec",
    "Task",
    "TaskDefaults",
    "TaskId",
    "TaskSpec",
    "TemplatedStr",
    "check_dag_spec",
    "format_path",
    "load_dag_file",
    "load_dag_paths",
    "normalized_spec",
    "parse_dag_document",
    "parse_dag_yaml",
    "spec_version",
]

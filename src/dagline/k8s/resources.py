"""The custom resources' names and status shapes: the contract between the CRDs, the handlers and kubectl.

Specs come from `dagline.spec` (the same models the CLI reads); statuses are defined here. Both feed the
generated CRD schemas (`dagline.k8s.crds`), so a field the handlers write is a field the schema declares.
Status is always derived from the database, never accumulated in the object: two replicas writing it
write the same thing.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from dagline.spec.models import DagSpec
from dagline.spec.resources import BackfillSpec, DagRunSpec, PoolSpec

GROUP = "dagline.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# Labels and annotations dagline puts on objects it creates.
LABEL_DAG = "dagline.io/dag"                      # the DAG's name (within its namespace)
LABEL_NAMESPACE = "dagline.io/namespace"          # the DAG's namespace (on objects of the Spark namespace)
LABEL_RUN = "dagline.io/run"
LABEL_TASK = "dagline.io/task"
LABEL_TRY = "dagline.io/try"
LABEL_MANAGED = "dagline.io/managed-by"          # "dagline" on DagRuns the controller mirrors
ANNOTATION_HISTORY_LIMIT = "dagline.io/dagrun-history-limit"  # on a DAG: how many DagRun objects to keep


class _Status(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class Condition(_Status):
    """A Kubernetes-style condition (`Ready`, `Invalid`)."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None


class DagStatus(_Status):
    """What the database holds for this DAG: its version, the next scheduled run, the latest run."""

    observed_generation: int | None = None
    version: int | None = Field(None, description="the DAG version number the database holds")
    version_hash: str | None = None
    active: bool | None = None
    paused: bool | None = Field(None, description="paused in the database (spec.paused only seeds a new DAG)")
    next_run: str | None = Field(None, description="when the next scheduled run will be created (UTC)")
    last_run_id: str | None = None
    last_run_state: str | None = None
    conditions: list[Condition] = Field(default_factory=list)


class DagRunStatus(_Status):
    """The run as the database holds it: state, interval, dates, task instances per state."""

    observed_generation: int | None = None
    id: int | None = Field(None, description="the run's numeric id in the database")
    run_id: str | None = None
    run_type: str | None = None
    state: str | None = None
    logical_date: str | None = None
    data_interval_start: str | None = None
    data_interval_end: str | None = None
    dag_version: int | None = None
    backfill_id: int | None = None
    start_date: str | None = None
    end_date: str | None = None
    task_counts: dict[str, int] = Field(default_factory=dict, description="task instances per state")
    message: str | None = None
    conditions: list[Condition] = Field(default_factory=list)


class BackfillStatus(_Status):
    """The backfill's progress: its runs counted by state."""

    observed_generation: int | None = None
    backfill_id: int | None = None
    phase: str | None = Field(None, description="Pending, Running, Paused, Succeeded, Failed, Cancelled, Invalid")
    total: int = 0
    queued: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    skipped_existing: int = 0
    overridden: int = 0
    message: str | None = None
    conditions: list[Condition] = Field(default_factory=list)


class PoolStatus(_Status):
    """The pool's slots and how many the queued and running task instances take."""

    observed_generation: int | None = None
    slots: int | None = None
    occupied_slots: int | None = None
    conditions: list[Condition] = Field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class PrinterColumn:
    name: str
    json_path: str
    type: str = "string"
    priority: int = 0

    def as_crd(self) -> dict[str, Any]:
        column = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.priority:
            column["priority"] = self.priority
        return column


@dataclasses.dataclass(frozen=True)
class Kind:
    """One custom resource kind: names, spec and status models, printer columns."""

    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    spec_model: type[BaseModel]
    status_model: type[BaseModel]
    columns: tuple[PrinterColumn, ...]


AGE = PrinterColumn("Age", ".metadata.creationTimestamp", "date")

DAG = Kind("DAG", "dags", "dag", ("dg",), DagSpec, DagStatus, (
    PrinterColumn("Schedule", ".spec.schedule"),
    # From status: a pause or unpause from the CLI, API or UI changes the database, not `spec.paused`.
    PrinterColumn("Paused", ".status.paused", "boolean"),
    PrinterColumn("Version", ".status.version", "integer"),
    # A string, not "date": kubectl shows a date column as the age of the time, "<invalid>" for a future one.
    PrinterColumn("Next Run", ".status.nextRun"),
    PrinterColumn("Last Run", ".status.lastRunState"),
    PrinterColumn("Ready", ".status.conditions[?(@.type==\"Ready\")].status"),
    AGE,
))
DAG_RUN = Kind("DagRun", "dagruns", "dagrun", ("dr",), DagRunSpec, DagRunStatus, (
    PrinterColumn("DAG", ".spec.dag"),
    PrinterColumn("Logical Date", ".status.logicalDate"),
    PrinterColumn("Type", ".status.runType"),
    PrinterColumn("State", ".status.state"),
    PrinterColumn("Run Id", ".status.runId", priority=1),
    AGE,
))
BACKFILL = Kind("Backfill", "backfills", "backfill", ("bf",), BackfillSpec, BackfillStatus, (
    PrinterColumn("DAG", ".spec.dag"),
    PrinterColumn("Start", ".spec.start"),
    PrinterColumn("End", ".spec.end"),
    PrinterColumn("Total", ".status.total", "integer"),
    PrinterColumn("Running", ".status.running", "integer"),
    PrinterColumn("Succeeded", ".status.succeeded", "integer"),
    PrinterColumn("Failed", ".status.failed", "integer"),
    PrinterColumn("Phase", ".status.phase"),
    AGE,
))
POOL = Kind("Pool", "pools", "pool", ("pl",), PoolSpec, PoolStatus, (
    PrinterColumn("Slots", ".spec.slots", "integer"),
    PrinterColumn("Occupied", ".status.occupiedSlots", "integer"),
    AGE,
))

KINDS = (DAG, DAG_RUN, BACKFILL, POOL)

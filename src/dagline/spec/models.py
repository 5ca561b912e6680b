"""Pydantic models of a DAG document: `DagDocument`, `DagSpec`, `TaskSpec`, `SparkSpec` and their parts.

They mirror the YAML exactly: camelCase keys, unknown keys refused. They are plain and structural because
the Kubernetes CRD schemas are generated from them (`model_json_schema(by_alias=True)`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import to_jsonable_python

from dagline.domain.callbacks import CallbackSpec, SecretKeyRef
from dagline.domain.deadlines import DeadlineSpec
from dagline.domain.deps import TriggerRule
from dagline.domain.secrets import check_task_variable
from dagline.domain.signal_rules import SignalRule, SignalTrigger
from dagline.limits import (
    MAX_ACTIVE_LIMIT,
    MAX_POOL_SLOTS,
    MAX_PRIORITY_WEIGHT,
    MAX_RETRIES,
    MAX_SPARK_CORES,
    MAX_SPARK_INSTANCES,
    MAX_TASK_ENV,
    MIN_PRIORITY_WEIGHT,
)
from dagline.spec.bounds import json_value_problem
from dagline.spec.fields import (
    DagId,
    ExecutionTimeout,
    IsoDuration,
    Namespace,
    PoolName,
    RetryDelay,
    SparkMemory,
    SpecModel,
    TaskId,
    TemplatedStr,
    check_schedule_interval,
)
from dagline.times import check_year, validate_timezone

API_VERSION = "dagline.io/v1alpha1"  # for the Kubernetes code; `DagDocument.api_version` spells it out


class DriverSpec(SpecModel):
    """Resources of the Spark driver (unset: Spark's defaults), and the identity it runs as."""

    cores: int | None = Field(None, ge=1, le=MAX_SPARK_CORES)
    memory: SparkMemory | None = Field(None, description="Spark memory size, e.g. 512m or 1g")
    service_account: str | None = Field(
        None, min_length=1, max_length=253,
        description="Kubernetes only: the driver's service account instead of the platform's Spark service "
                    "account (DAGLINE_SPARK_SERVICE_ACCOUNT); refused by the Spark policy unless the platform "
                    "admin allows spark.kubernetes.authenticate.driver.serviceAccountName")


class ExecutorSpec(SpecModel):
    """Resources of the Spark executors."""

    cores: int | None = Field(None, ge=1, le=MAX_SPARK_CORES)
    memory: SparkMemory | None = Field(None, description="Spark memory size, e.g. 512m or 1g")
    instances: int | None = Field(None, ge=1, le=MAX_SPARK_INSTANCES)


class VolumeMount(SpecModel):
    """Where a volume of `spark.volumes` appears in the driver's and executors' Spark container."""

    name: str = Field(min_length=1, max_length=63, description="the name of one of spark.volumes")
    mount_path: str = Field(min_length=1, description="an absolute path in the container")
    read_only: bool | None = None
    sub_path: str | None = None


class PodSpec(SpecModel):
    """Kubernetes only: how the driver and executor pods are placed and secured (spark-operator v1beta2
    SparkPodSpec fields, given to both). Free-form fields are Kubernetes objects as `kubectl explain pod.spec`
    describes them; the Kubernetes API checks them when the spark-operator creates the pods."""

    tolerations: list[dict[str, Any]] | None = Field(
        None, description="pod tolerations, e.g. [{key: dedicated, value: spark, effect: NoSchedule}]")
    node_selector: dict[str, str] | None = Field(None, description="node labels the pods must run on")
    affinity: dict[str, Any] | None = Field(None, description="pod affinity (nodeAffinity, podAntiAffinity...)")
    pod_security_context: dict[str, Any] | None = Field(
        None, description="the pods' securityContext (runAsNonRoot, runAsUser, fsGroup, seccompProfile...)")
    security_context: dict[str, Any] | None = Field(
        None, description="the Spark container's securityContext (allowPrivilegeEscalation, capabilities...)")
    volume_mounts: list[VolumeMount] | None = Field(None, description="mounts of spark.volumes")

    @field_validator("tolerations", "affinity", "pod_security_context", "security_context", mode="before")
    @classmethod
    def _bounded(cls, value: Any) -> Any:
        problem = json_value_problem(value)  # free-form: bounded before pydantic walks it
        if problem:
            raise ValueError(problem)
        return value


class SparkSpec(SpecModel):
    """The Spark job a task runs. Arguments and conf values are Jinja templates."""

    main_application_file: str = Field(
        min_length=1,
        description="locally a path inside the DAG file's folder or DAGLINE_JOBS_FOLDER (symlinks resolved), or an "
                    "s3a/gs/abfss/hdfs/https URI; on Kubernetes only local://, s3a://, gs://, abfss://, hdfs:// "
                    "or https:// URIs (ADR 64)",
    )
    arguments: list[TemplatedStr] = []
    conf: dict[str, TemplatedStr] = {}
    image: str | None = Field(None, description="container image (Kubernetes only)")
    driver: DriverSpec = Field(default_factory=DriverSpec)
    executor: ExecutorSpec = Field(default_factory=ExecutorSpec)
    pod: PodSpec | None = Field(None, description="Kubernetes only: placement and security of the driver and "
                                                    "executor pods")
    volumes: list[dict[str, Any]] | None = Field(
        None, description="Kubernetes only: pod volumes (each {name, <type>: ...}) that spark.pod.volumeMounts "
                          "mount; hostPath, nfs, secret and projected volumes are refused by the Spark policy "
                          "unless the platform admin allows them")
    connect: bool | None = Field(
        None, description="true: run the job as `python job.py` against a warm Spark Connect server (no static "
                          "confs, driver or executor sizes); unset: the DAG's `defaults.spark.connect`")

    @field_validator("volumes", mode="before")
    @classmethod
    def _bounded_volumes(cls, value: Any) -> Any:
        problem = json_value_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _mounts_name_volumes(self) -> SparkSpec:
        names = [v.get("name") for v in self.volumes or ()]
        for volume, name in zip(self.volumes or (), names, strict=True):
            if not isinstance(name, str) or not name:
                raise ValueError(f"volumes: every volume needs a name ({volume!r} has none)")
        if len(set(names)) != len(names):
            raise ValueError("volumes: a volume name is given twice")
        for mount in (self.pod.volume_mounts if self.pod else None) or ():
            if mount.name not in names:
                raise ValueError(f"pod.volumeMounts: {mount.name!r} is not the name of one of spark.volumes")
        return self


class ConnectServerSpec(SpecModel):
    """Kubernetes only: the size of the DAG's own Spark Connect server (a spark-operator SparkConnect that
    dagline creates for the DAG's Connect tasks, ADR 0086); unset sizes: the spark-operator's and Spark's
    defaults. Locally the replica's server is sized by the DAGLINE_CONNECT_* settings instead."""

    cores: int | None = Field(None, ge=1, le=MAX_SPARK_CORES, description="cores of the server (its Spark driver)")
    memory: SparkMemory | None = Field(None, description="memory of the server (its Spark driver), e.g. 2g")
    executor: ExecutorSpec = Field(default_factory=ExecutorSpec, description="the server's Spark executors")


class SparkDefaults(SpecModel):
    """Spark settings that apply to every task of the DAG unless the task's `spark` sets its own."""

    connect: bool = Field(False, description="run tasks against a warm Spark Connect server (ADR 0070)")
    connect_server: ConnectServerSpec | None = Field(
        None, description="Kubernetes only: the size of the DAG's Spark Connect server, shared by its Connect "
                          "tasks (ADR 0086)")


class EnvValueFrom(SpecModel):
    """Where a variable's value comes from: a key of a Secret (of the DAG's namespace on Kubernetes; outside
    it, the secret variable `SECRET_<NAME>__<KEY>`)."""

    secret_key_ref: SecretKeyRef


class EnvVar(SpecModel):
    """One environment variable of the task's job (the Spark driver and executors): a literal `value` or
    `valueFrom` a Secret. Never `DAGLINE_*`."""

    name: str = Field(description="a variable name; DAGLINE_* is dagline's own and refused")
    value: str | None = Field(None, description="a literal value (not a template; not for secrets)")
    value_from: EnvValueFrom | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_task_variable(value)

    @model_validator(mode="after")
    def _one_source(self) -> EnvVar:
        if (self.value is None) == (self.value_from is None):
            raise ValueError(f"variable {self.name}: give exactly one of value or valueFrom")
        return self


def _unique_names(env: list[EnvVar] | None) -> list[EnvVar] | None:
    seen: set[str] = set()
    for var in env or ():
        if var.name in seen:
            raise ValueError(f"variable {var.name} is given twice")
        seen.add(var.name)
    return env


class TaskDefaults(SpecModel):
    """Task settings that apply to every task of the DAG unless the task sets its own."""

    retries: int = Field(0, ge=0, le=MAX_RETRIES)
    retry_delay: RetryDelay = Field("PT5M", description="ISO-8601 duration; PT0S retries at once")
    retry_exponential_backoff: bool = False
    depends_on_past: bool = False
    pool: PoolName = "default"
    pool_slots: int = Field(1, ge=1, le=MAX_POOL_SLOTS)
    priority_weight: int = Field(1, ge=MIN_PRIORITY_WEIGHT, le=MAX_PRIORITY_WEIGHT)
    max_active_tis_per_dag: int | None = Field(None, ge=1, le=MAX_ACTIVE_LIMIT)
    execution_timeout: ExecutionTimeout | None = Field(None, description="ISO-8601 duration")
    callbacks: list[CallbackSpec] = Field(
        default_factory=list, description="callbacks of every task that sets none of its own")
    env: list[EnvVar] = Field(default_factory=list, max_length=MAX_TASK_ENV,
                              description="environment variables of every task's job (a task's own env adds "
                                          "to them, and wins for the same name)")

    _unique_env = field_validator("env")(classmethod(lambda cls, value: _unique_names(value)))

    spark: SparkDefaults = Field(default_factory=SparkDefaults)


class TaskSpec(SpecModel):
    """One task: a Spark job, its upstream tasks, and optional overrides of the DAG's task defaults."""

    id: TaskId
    upstream: list[str] = []
    trigger_rule: TriggerRule = TriggerRule.ALL_SUCCESS
    start_date: dt.datetime | None = Field(None, description="naive = in the DAG's time zone")
    retries: int | None = Field(None, ge=0, le=MAX_RETRIES)
    retry_delay: RetryDelay | None = None
    retry_exponential_backoff: bool | None = None
    depends_on_past: bool | None = None
    pool: PoolName | None = None
    pool_slots: int | None = Field(None, ge=1, le=MAX_POOL_SLOTS)
    priority_weight: int | None = Field(None, ge=MIN_PRIORITY_WEIGHT, le=MAX_PRIORITY_WEIGHT)
    max_active_tis_per_dag: int | None = Field(None, ge=1, le=MAX_ACTIVE_LIMIT)
    execution_timeout: ExecutionTimeout | None = None
    deadline: DeadlineSpec | None = Field(None, description="the task must be done within `within` of the run's `of`")
    callbacks: list[CallbackSpec] | None = Field(None, description="on success, failure, retry, deadline_miss")
    mode: Literal["batch", "streaming"] = Field(
        "batch", description="streaming: runs until stopped (a stopped try ends success); batch: runs to its end")
    stop_grace_period: IsoDuration | None = Field(
        None, description="ISO-8601 duration between the stop request (SIGTERM) and the kill; default PT30S")
    on: list[SignalRule] = Field([], alias="onSignal",
                                 description="signal rules acting on this task inside running runs")
    env: list[EnvVar] | None = Field(None, max_length=MAX_TASK_ENV,
                                     description="environment variables of the job (driver and executors): "
                                                 "{name, value} or {name, valueFrom: {secretKeyRef: {name, key}}}")
    spark: SparkSpec

    _unique_env = field_validator("env")(classmethod(lambda cls, value: _unique_names(value)))

    @model_validator(mode="before")
    @classmethod
    def _on_key(cls, data: Any) -> Any:
        # The key was `on:` until YAML 1.1 (PyYAML, and kubectl's go-yaml) was seen to read it unquoted as
        # the boolean true: kubectl sends `true`. Both old spellings are still read, with a warning
        # (`deprecated_spellings`), so files and objects written before the rename keep working.
        if isinstance(data, Mapping) and "onSignal" not in data:
            for spelling in ("on", True, "true"):
                if spelling in data:
                    data = {("onSignal" if k == spelling else k): v for k, v in data.items()}
                    break
        return data

    @field_validator("start_date")
    @classmethod
    def _year_in_range(cls, value: dt.datetime | None) -> dt.datetime | None:
        if value is not None:
            check_year(value)
        return value


class DagSpec(SpecModel):
    """A DAG: its schedule, limits, task defaults and tasks (the `spec` of a DAG document)."""

    schedule: str | None = Field(
        None, description="cron, a preset (@daily...), an ISO-8601 duration, or null (triggered runs only)"
    )
    timezone: str = Field("UTC", description="IANA time zone; cron fields and naive dates are read in it")
    start_date: dt.datetime | None = Field(None, description="required with a schedule; naive = in `timezone`")
    end_date: dt.datetime | None = None
    catchup: bool = Field(False, description="true: one run per missed interval; false (the default, as in "
                                             "Airflow): when behind, only the latest complete interval")
    paused: bool = Field(True, description="a DAG applied for the first time is paused unless this says false "
                                           "(as Airflow's dags_are_paused_at_creation); a change of this field "
                                           "pauses or unpauses")
    max_active_runs: int = Field(16, ge=1, le=MAX_ACTIVE_LIMIT)
    max_active_tasks: int = Field(16, ge=1, le=MAX_ACTIVE_LIMIT)
    params: dict[str, Any] = {}
    defaults: TaskDefaults = Field(default_factory=TaskDefaults)
    deadline: DeadlineSpec | None = Field(None, description="each run must be done within `within` of its `of`")
    callbacks: list[CallbackSpec] = Field(default_factory=list,
                                          description="on a run's success, failure, deadline_miss")
    triggers: list[SignalTrigger] = Field([], description="a new run (type signal, conf = value) per matching signal")

    tasks: list[TaskSpec] = Field(min_length=1)

    @field_validator("schedule")
    @classmethod
    def _valid_schedule(cls, value: str | None) -> str | None:
        from dagline.domain.timetable import (
            validate_schedule,  # local: timetable may come to use this module's types
        )

        validate_schedule(value)
        if value is not None and value.strip()[:1] in ("P", "p"):
            check_schedule_interval(value.strip())
        return value

    @field_validator("start_date", "end_date")
    @classmethod
    def _year_in_range(cls, value: dt.datetime | None) -> dt.datetime | None:
        if value is not None:
            check_year(value)
        return value

    @field_validator("timezone")
    @classmethod
    def _valid_timezone(cls, value: str) -> str:
        return validate_timezone(value)

    @field_validator("params", mode="before")
    @classmethod
    def _bounded_params(cls, value: Any) -> Any:
        problem = json_value_problem(value)  # before pydantic or JSON walks it: iterative, safe on any depth
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("params")
    @classmethod
    def _json_params(cls, value: dict[str, Any]) -> dict[str, Any]:
        # Stored as JSON: keep the same values a DAG rebuilt from the database would see.
        return to_jsonable_python(value)


class DagMetadata(BaseModel):
    """Kubernetes object metadata: dagline reads `name` (the dag_id) and `namespace` (whose DAG it is;
    `dags apply --namespace` or `default` when absent), and ignores the rest."""

    model_config = ConfigDict(extra="ignore")

    name: DagId
    namespace: Namespace | None = None


class DagDocument(SpecModel):
    """A whole DAG document: the file `dagline dags apply` reads, and the DAG custom resource."""

    api_version: Literal["dagline.io/v1alpha1"]
    kind: Literal["DAG"]
    metadata: DagMetadata
    spec: DagSpec

"""The executor protocol: what turns a queued task instance try into a running job and reports back.

The scheduler hands an executor `TaskLaunch`es (everything a job needs, already rendered) and reads
`TaskReport`s from `sync()`. Reports are keyed by (ti_id, try_number), so the scheduler applies each
with a compare-and-set and a late or replayed report is harmless. `launch` is idempotent: a job's
name is derived from dag, run, task and try (`TaskKey.job_name`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from typing import Protocol, runtime_checkable


@dataclasses.dataclass(frozen=True)
class TaskKey:
    """Identifies one try of one task instance."""

    dag_id: str
    run_id: str
    task_id: str
    try_number: int

    @property
    def job_name(self) -> str:
        """A deterministic, DNS-1123-safe job name for this try (at most 63 characters)."""
        raw = f"{self.dag_id}-{self.run_id}-{self.task_id}-{self.try_number}".lower()
        name = re.sub(r"[^a-z0-9-]+", "-", raw).strip("-")
        if len(name) > 63:
            import hashlib

            digest = hashlib.sha1(raw.encode()).hexdigest()[:8]
            name = f"{name[:54].rstrip('-')}-{digest}"
        return name


@dataclasses.dataclass(frozen=True)
class SparkJob:
    """A rendered Spark job: templates already applied, paths resolved for the executor."""

    main_application_file: str
    arguments: tuple[str, ...] = ()
    conf: tuple[tuple[str, str], ...] = ()
    image: str | None = None
    driver_cores: int | None = None
    driver_memory: str | None = None
    executor_instances: int | None = None
    executor_cores: int | None = None
    executor_memory: str | None = None
    connect: bool = False  # run as `python <app>` against a Spark Connect server, not through spark-submit
    # Kubernetes only: the size of the DAG's Spark Connect server ({cores, memory, executor: {...}}; ADR 0086)
    connect_server: dict | None = None
    # Kubernetes only (ignored locally): SparkPodSpec fields of both pods (tolerations, nodeSelector, affinity,
    # podSecurityContext, securityContext, volumeMounts), the application's volumes, the driver's service account
    pod: dict | None = None
    volumes: tuple[dict, ...] = ()
    driver_service_account: str | None = None


@dataclasses.dataclass(frozen=True)
class TaskVariable:
    """One variable of a task's `env`, not read yet: a literal `value`, or a `secret` (Secret name, key)
    that the executor reads where its secrets live (a Kubernetes Secret of the DAG's namespace, or a
    secret variable: `dagline.executors.secret_sources`)."""

    name: str
    value: str | None = None
    secret: tuple[str, str] | None = None


@dataclasses.dataclass(frozen=True)
class TaskLaunch:
    """Everything an executor needs to run one try."""

    ti_id: int
    key: TaskKey
    job: SparkJob
    working_dir: str | None = None  # where relative paths of the DAG file resolve (local executor)
    timeout_s: float | None = None  # executionTimeout: the executor stops the job after this long
    streaming: bool = False  # runs until stopped (`mode: streaming`)
    stop_grace_s: float = 30.0  # stopGracePeriod: between the stop request (SIGTERM) and the kill
    env: tuple[tuple[str, str], ...] = ()  # what dagline gives the try: DAGLINE_API_URL, DAGLINE_SIGNAL_TOKEN
    task_env: tuple[TaskVariable, ...] = ()  # the task's own `env`, secrets not read yet


@dataclasses.dataclass(frozen=True)
class TaskReport:
    """A state change of a launched try: 'running', 'success' or 'failed'."""

    ti_id: int
    try_number: int
    state: str
    at: dt.datetime
    external_id: str | None = None
    message: str | None = None
    started_at: dt.datetime | None = None


@runtime_checkable
class Executor(Protocol):
    """The small protocol every executor implements."""

    name: str
    parallelism: int
    host_bound: bool  # its jobs can be followed only from the host that started them (adoption stays there)

    def start(self) -> None:
        """Prepare to launch (threads, clients)."""

    def launch(self, launches: list[TaskLaunch]) -> None:
        """Start these tries; idempotent per `TaskKey`."""

    def sync(self) -> list[TaskReport]:
        """State reports since the last call."""

    def cancel(self, key: TaskKey) -> None:
        """Stop a try if it is still running."""

    def adopt(self, launches: list[TaskLaunch]) -> list[TaskLaunch]:
        """Take over tries launched by a dead replica; return those that cannot be adopted."""

    def free_slots(self) -> int:
        """How many more tries may be launched now (parallelism minus running jobs)."""

    def has_work(self) -> bool:
        """True while launched jobs have not all reported a final state."""

    def detach(self) -> None:
        """Stop following without stopping anything: running jobs keep running for another replica (or the
        next scheduler) to adopt. A graceful stop (SIGTERM) detaches."""

    def end(self) -> None:
        """Stop: wait for or stop running jobs as the executor's contract says."""

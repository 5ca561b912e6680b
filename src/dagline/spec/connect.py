"""Which Spark confs a Spark Connect task may set: the static ones are refused at apply.

A Connect task (`spark.connect: true`, ADR 0070) runs in a session of a Spark that is already running
(the replica's Spark Connect server), so every conf fixed when a Spark application starts -- its JVM,
its resources, its jars, its cluster manager, the static SQL confs -- cannot apply to it. Rather than
ignore them silently, `connect_problems` names each one at `dagline dags apply`. What is left (runtime
confs such as `spark.sql.shuffle.partitions`) is set on the task's own session when its job starts.
"""

from __future__ import annotations

from dagline.spec.models import DagSpec, TaskSpec

# Exact keys fixed at a Spark application's start.
STATIC_CONF_KEYS = frozenset({
    "spark.master", "spark.submit.deployMode", "spark.app.name", "spark.cores.max", "spark.default.parallelism",
    "spark.jars", "spark.jars.packages", "spark.jars.repositories", "spark.jars.excludes", "spark.jars.ivy",
    "spark.jars.ivySettings", "spark.files", "spark.archives", "spark.pyFiles", "spark.submit.pyFiles",
    "spark.serializer", "spark.local.dir", "spark.task.cpus", "spark.extraListeners", "spark.plugins",
    "spark.scheduler.mode", "spark.sql.warehouse.dir", "spark.sql.extensions", "spark.sql.catalogImplementation",
    "spark.sql.globalTempDatabase", "spark.sql.queryExecutionListeners", "spark.sql.streaming.streamingQueryListeners",
    "spark.sql.cache.serializer", "spark.sql.ui.retainedExecutions", "spark.sql.event.truncate.length",
})
# Key prefixes whose every key is fixed at start (the driver and executor JVMs and their resources, ...).
STATIC_CONF_PREFIXES = (
    "spark.driver.", "spark.executor.", "spark.memory.", "spark.kryo.", "spark.dynamicAllocation.",
    "spark.shuffle.service.", "spark.ui.", "spark.eventLog.", "spark.network.", "spark.rpc.", "spark.blockManager.",
    "spark.kubernetes.", "spark.yarn.", "spark.pyspark.", "spark.python.", "spark.connect.", "spark.sql.hive.",
    "spark.hadoop.", "spark.authenticate", "spark.ssl.", "spark.port.", "spark.resources.",
)


def is_static_conf(key: str) -> bool:
    """True for a conf a running Spark cannot take for one session (fixed when the application starts)."""
    return key in STATIC_CONF_KEYS or key.startswith(STATIC_CONF_PREFIXES)


def _task_problems(index: int, task: TaskSpec) -> list[tuple[str, str]]:
    where = f"spec.tasks[{index}].spark"
    why = ("is fixed when Spark starts, and a Spark Connect task (spark.connect: true) runs in the replica's "
           "running Spark Connect server: size that server (locally the DAGLINE_CONNECT_* settings, on Kubernetes "
           "the DAG's defaults.spark.connectServer), or set spark.connect: false for this task")
    problems = [(f'{where}.conf["{key}"]', f"{key} {why}") for key in task.spark.conf if is_static_conf(key)]
    for section in ("driver", "executor"):
        sizes = getattr(task.spark, section).model_dump(exclude_none=True)
        for name in sizes:
            problems.append((f"{where}.{section}.{name}", f"the {section}'s {name} {why}"))
    return problems


def connect_problems(spec: DagSpec) -> list[tuple[str, str]]:
    """(YAML path, message) for every static conf or size set on a task that runs under Spark Connect."""
    problems: list[tuple[str, str]] = []
    for index, task in enumerate(spec.tasks):
        connect = spec.defaults.spark.connect if task.spark.connect is None else task.spark.connect
        if connect:
            problems += _task_problems(index, task)
    return problems

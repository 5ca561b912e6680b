"""Every Prometheus metric dagline exports, defined once, and the HTTP server that exposes them.

The modules that do the work only observe (`metrics.RUNS_CREATED.labels(run_type=...).inc()`); this
module holds the definitions, their help texts and units, and nothing that reads the database, so any
layer may import it. Figures that live in the database (runs and task instances by state, pool slots,
backfill progress) are read at scrape time by a `DatabaseCollector` whose `read` function the process
wiring supplies (`dagline.store.read_models.metric_figures`): one grouped query per table per scrape, never per loop.

Conventions (https://prometheus.io/docs/practices/naming/): the `dagline_` prefix, base units
(seconds), `_total` on counters, and only bounded labels: a loop phase, a run type, a state, an
executor name, a pool name (pools are few and named by the operator). Never a DAG, run or task id.

Which figures are per replica and which are global:
- counters and histograms count what *this process* did: `sum` them across replicas;
- the database gauges (`dagline_dag_runs`, `dagline_task_instances`, `dagline_pool_slots_*`,
  `dagline_backfill_runs`, `dagline_backfills`) are the same in every replica: aggregate with `max`.

A process serves them with `serve(port)` (`dagline scheduler --metrics-port N`) or, in the operator,
on its metrics port next to the operator's own figures (`dagline.k8s.metrics`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily

log = logging.getLogger(__name__)

disable_created_metrics()  # no `_created` series beside every counter: Prometheus does not need them
REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)  # process_cpu_seconds_total, process_resident_memory_bytes, ...
PlatformCollector(registry=REGISTRY)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# The scheduler loop's phases, in loop order (DESIGN section 6), as the `phase` label says them.
PHASES = (
    "heartbeat",          # the replica's own heartbeat (when due)
    "signals",            # 0. react to signals: trigger runs, start/restart/stop rules (action rows)
    "create_runs",        # 1. scheduled runs for due DAGs
    "start_runs",         # 2. queued runs -> running, within maxActiveRuns
    "examine",            # 3. lock running runs, decide their TIs, finish runs
    "critical_section",   # 4. lock pools NOWAIT, queue TIs within every limit, render launches
    "launch",             #    hand the queued TIs to the executor (after the commit)
    "executor_sync",      # 5. store the executor's reports and run the mini-scheduler; when that made TIs
                          #    runnable, queue them in the same transaction (its own critical section)
    "stop_tries",         #    stop this replica's jobs whose tries were asked to stop
    "callbacks",          #    settle finished callback deliveries, claim due ones (the sending is in threads)
    "deadlines",          #    record missed deadlines (every deadline_check_interval_s)
    "finish_backfills",   #    complete backfills whose runs all ended
    "housekeeping",       # 6. timeouts, silent peers, adoption, reconciling own tries
)
RUN_TYPES = ("scheduled", "manual", "backfill", "signal")

# Latency buckets from half a millisecond (a fast phase) to two minutes (a stuck one).
_FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0)
# Delays a person waits for: from 10 ms to an hour.
_DELAY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)

# -- the scheduler loop (per replica) ------------------------------------------------------------------

LOOP_PHASE_SECONDS = Histogram(
    "dagline_scheduler_loop_phase_duration_seconds",
    "Time one phase of one scheduler loop iteration took, by phase (see PHASES); includes the phase's commit.",
    ["phase"], buckets=_FAST_BUCKETS, registry=REGISTRY)
LOOP_SECONDS = Histogram(
    "dagline_scheduler_loop_duration_seconds",
    "Time one whole scheduler loop iteration took (not counting the idle wait between iterations).",
    buckets=_FAST_BUCKETS, registry=REGISTRY)
LOOPS = Counter(
    "dagline_scheduler_loops_total", "Scheduler loop iterations this process ran.", registry=REGISTRY)
FAILED_LOOPS = Counter(
    "dagline_scheduler_failed_loops_total",
    "Iterations ended by a transient database error (the loop carried on after a backoff).", registry=REGISTRY)
CRITICAL_SECTION_BUSY = Counter(
    "dagline_scheduler_critical_section_busy_total",
    "Critical sections skipped because another replica held the pool rows (NOWAIT lock not available).",
    registry=REGISTRY)

# -- runs and task instances (per replica: what this process decided) --------------------------------

RUNS_CREATED = Counter(
    "dagline_dag_runs_created_total", "DAG runs created by this process, by run type.",
    ["run_type"], registry=REGISTRY)
RUNS_FINISHED = Counter(
    "dagline_dag_runs_finished_total", "DAG runs this process finished, by final state (success, failed).",
    ["state"], registry=REGISTRY)
TI_TRANSITIONS = Counter(
    "dagline_task_instance_transitions_total",
    "Task instance state changes this process made, by the state entered (success, failed, queued, ...).",
    ["state"], registry=REGISTRY)
RUN_SCHEDULE_DELAY = Histogram(
    "dagline_dag_run_schedule_delay_seconds",
    "Scheduled runs: created_at minus run_after (how late after its interval ended a run was created).",
    buckets=_DELAY_BUCKETS, registry=REGISTRY)
TI_QUEUE_DELAY = Histogram(
    "dagline_task_instance_queue_delay_seconds",
    "queued_at minus the time the task instance became ready (scheduled): how long a runnable task waited.",
    buckets=_DELAY_BUCKETS, registry=REGISTRY)

# -- executors (per replica) ---------------------------------------------------------------------------

EXECUTOR_LAUNCHES = Counter(
    "dagline_executor_launches_total", "Tries handed to the executor, by executor.", ["executor"], registry=REGISTRY)
EXECUTOR_LAUNCH_FAILURES = Counter(
    "dagline_executor_launch_failures_total",
    "Tries that could not be launched (a template that does not render, a job the executor refused), by executor.",
    ["executor"], registry=REGISTRY)
EXECUTOR_REPORTS = Counter(
    "dagline_executor_reports_total", "State reports stored from the executor, by executor and reported state.",
    ["executor", "state"], registry=REGISTRY)
EXECUTOR_IN_FLIGHT = Gauge(
    "dagline_executor_queue_depth",
    "Tries this replica's executor follows (launched or adopted, no final report stored yet), by executor.",
    ["executor"], registry=REGISTRY)
EXECUTOR_OPEN_SLOTS = Gauge(
    "dagline_executor_open_slots", "Free slots of this replica's executor (its parallelism minus running tries).",
    ["executor"], registry=REGISTRY)

# -- replicas: adoption, zombies, timeouts (per replica) ----------------------------------------------

ADOPTED = Counter(
    "dagline_task_instances_adopted_total",
    "Tries of ended replicas (or of this one's previous life) that this replica took over.", registry=REGISTRY)
ZOMBIES = Counter(
    "dagline_task_instances_zombies_total",
    "Running tries with no live job behind them, failed or retried by this replica.", registry=REGISTRY)
TIMEOUTS = Counter(
    "dagline_task_instances_timed_out_total", "Tries this replica ended for running past executionTimeout.",
    registry=REGISTRY)
REPLICAS_DECLARED_DEAD = Counter(
    "dagline_replicas_declared_dead_total", "Peer replicas this replica declared dead (stale heartbeat).",
    registry=REGISTRY)

# -- signals, deadlines, callbacks (observed by the features that own them) ---------------------------

SIGNAL_ACTION_LATENCY = Histogram(
    "dagline_signal_action_latency_seconds",
    "Signal sent_at to the action it caused being stored (trigger, start, restart, stop), by action.",
    ["action"], buckets=_DELAY_BUCKETS, registry=REGISTRY)
DEADLINE_MISSES = Counter(
    "dagline_deadline_misses_total", "Deadlines found missed, each counted once, by what missed it (run, task).",
    ["kind"], registry=REGISTRY)
CALLBACK_DELIVERIES = Counter(
    "dagline_callback_deliveries_total",
    "Callback delivery attempts from the outbox, by channel (webhook, log, kubernetes_event) "
    "and outcome (delivered, failed).",
    ["channel", "outcome"], registry=REGISTRY)
CALLBACK_DELIVERY_SECONDS = Histogram(
    "dagline_callback_delivery_duration_seconds", "Time one callback delivery attempt took, by channel.",
    ["channel"], buckets=_FAST_BUCKETS, registry=REGISTRY)

for _phase in PHASES:  # every phase's series exists from the start, at zero
    LOOP_PHASE_SECONDS.labels(phase=_phase)
for _type in RUN_TYPES:
    RUNS_CREATED.labels(run_type=_type)


# -- figures read from the database at scrape time ----------------------------------------------------

@dataclasses.dataclass(frozen=True)
class DatabaseFigures:
    """What the database holds now: counts by state, and per pool its slots and the slots held."""

    runs: Mapping[str, int]
    task_instances: Mapping[str, int]
    pools: Mapping[tuple[str | None, str], tuple[int, int]]  # (namespace or None, name) -> (slots, used)
    backfills: Mapping[str, int]          # backfill state -> count
    backfill_runs: Mapping[str, int]      # run state -> count, runs of running backfills


class DatabaseCollector:
    """Reads `DatabaseFigures` with `read()` on every scrape and reports them as gauges (the same in
    every replica). A failed read is reported as `dagline_database_up 0`, never as a failed scrape."""

    def __init__(self, read: Callable[[], DatabaseFigures], *, run_states, ti_states, backfill_states,
                 backfill_run_states=None):
        self.read = read
        self.run_states, self.ti_states, self.backfill_states = run_states, ti_states, backfill_states
        self.backfill_run_states = run_states if backfill_run_states is None else backfill_run_states

    def describe(self):
        return []  # figures come and go with the database; no registration-time read

    def collect(self):
        up = GaugeMetricFamily("dagline_database_up", "1 if the database answered this scrape, else 0.")
        try:
            figures = self.read()
        except Exception as exc:  # noqa: BLE001 - the page says the database is down instead of failing
            log.debug("metrics: database figures unavailable: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield _by_state("dagline_dag_runs", "DAG runs in the database not finished yet, by state (queued, running).",
                        self.run_states, figures.runs)
        yield _by_state("dagline_task_instances",
                        "Task instances in the database not finished yet, by state (scheduled = waiting for the "
                        "critical section, queued = handed to an executor, not yet running).", self.ti_states,
                        figures.task_instances)
        yield _by_state("dagline_backfills", "Backfills in the database, by state.", self.backfill_states,
                        figures.backfills)
        yield _by_state("dagline_backfill_runs", "Runs of running backfills, by run state (backfill progress).",
                        self.backfill_run_states, figures.backfill_runs)
        # a pool is named within its namespace, empty for the platform's pools (ADR 92); not `namespace`,
        # which Prometheus sets to the scraped pod's namespace (the dashboard filters on it)
        labels = ["pool", "pool_namespace"]
        total = GaugeMetricFamily("dagline_pool_slots", "Slots of each pool.", labels=labels)
        used = GaugeMetricFamily("dagline_pool_slots_used", "Slots held by queued and running tries, by pool.",
                                 labels=labels)
        free = GaugeMetricFamily("dagline_pool_slots_free", "Slots free, by pool (negative if over-committed after "
                                 "the pool shrank).", labels=labels)
        for (namespace, name), (slots, held) in sorted(figures.pools.items(), key=lambda item: (item[0][0] or "",
                                                                                            item[0][1])):
            total.add_metric([name, namespace or ""], slots)
            used.add_metric([name, namespace or ""], held)
            free.add_metric([name, namespace or ""], slots - held)
        yield total
        yield used
        yield free


def _by_state(name: str, help_text: str, states, counts: Mapping[str, int]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text, labels=["state"])
    for state in states:
        family.add_metric([state], counts.get(state, 0))
    return family


_database_collector: DatabaseCollector | None = None
_collector_lock = threading.Lock()


def watch_database(collector: DatabaseCollector) -> None:
    """Report this collector's figures from now on (replacing the one a previous call registered)."""
    global _database_collector
    with _collector_lock:
        if _database_collector is not None:
            REGISTRY.unregister(_database_collector)
        REGISTRY.register(collector)
        _database_collector = collector


def render() -> bytes:
    """Every metric of this process, in the Prometheus text format."""
    return generate_latest(REGISTRY)


def serve(port: int, addr: str = "0.0.0.0"):
    """Serve `/metrics` on `port` (0: any free port) in a daemon thread; returns the server
    (`server.server_port` is the port; `server.shutdown()` stops it)."""
    server, _thread = start_http_server(port, addr=addr, registry=REGISTRY)
    log.info("metrics on :%s/metrics", server.server_port)
    return server

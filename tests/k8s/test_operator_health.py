"""A replica's settings from the environment, and what its probes and metrics say when parts fail."""

from __future__ import annotations

import threading

import pytest

from dagline.db.engine import Database
from dagline.errors import InvalidInput
from dagline.executors.noop import NoopExecutor
from dagline.k8s.client import load_api_client
from dagline.k8s.runtime import Runtime
from dagline.k8s.settings import OperatorSettings
from dagline.scheduler.replica.guard import SchedulerLock
from tests.helpers import prometheus
from tests.helpers.k8s.operator_harness import FAST_LOOP, http_get, settings


def test_settings_come_from_the_chart_variables():
    env = {"DAGLINE_DB_URL": "postgresql://u@db/dagline", "DAGLINE_NAMESPACE": "data", "DAGLINE_HEALTH_PORT": "8081",
           "DAGLINE_METRICS_PORT": "9091", "DAGLINE_DAGRUN_HISTORY_LIMIT": "7", "DAGLINE_EXECUTOR": "noop"}
    found = OperatorSettings.from_env(env)
    assert (found.db_url, found.namespace, found.health_port, found.metrics_port) == (
        "postgresql://u@db/dagline", "data", 8081, 9091)
    assert (found.dagrun_history_limit, found.executor) == (7, "noop")
    defaults = OperatorSettings.from_env({"DAGLINE_NAMESPACE": ""})
    assert defaults.namespace is None and defaults.executor == "spark-k8s" and defaults.dagrun_history_limit == 50
    assert OperatorSettings.from_env(env, executor="spark-k8s").executor == "spark-k8s"  # an option wins
    assert (defaults.api_port, defaults.try_api_url) == (8793, "http://127.0.0.1:8793")
    chart = OperatorSettings.from_env({"DAGLINE_API_URL": "http://dagline-api.data.svc:8793"})
    assert chart.try_api_url == "http://dagline-api.data.svc:8793"


@pytest.mark.parametrize(("variable", "value", "says"), [
    ("DAGLINE_HEALTH_PORT", "http", "must be an integer, got 'http'"),
    ("DAGLINE_METRICS_PORT", "70000", "must be a port number"),
    ("DAGLINE_DAGRUN_HISTORY_LIMIT", "-1", "must be 0 or more"),
    ("DAGLINE_EXECUTOR", "celery", "unknown executor 'celery'"),
    ("DAGLINE_NAMESPACE", "Data_Team", "is not a namespace name"),
    ("DAGLINE_STATUS_INTERVAL", "0", "must be positive"),
    ("DAGLINE_API_PORT", "-2", "or -1 for no API"),
    ("DAGLINE_API_URL", "dagline-api:8793", "is not an http(s) URL"),
    ("DAGLINE_WATCH_TIMEOUT", "0", "must be positive"),
    ("DAGLINE_WATCH_INACTIVITY_TIMEOUT", "soon", "must be a number, got 'soon'"),
    ("DAGLINE_WATCH_CONNECT_TIMEOUT", "-1", "must be positive"),
    ("DAGLINE_LIST_INTERVAL", "nan", "must be positive"),
])
def test_a_bad_setting_is_refused_naming_the_variable(variable, value, says):
    with pytest.raises(InvalidInput) as caught:
        OperatorSettings.from_env({variable: value})
    assert caught.value.field == variable and says in str(caught.value)


def test_a_second_replica_on_sqlite_is_not_live_and_says_why(kube, sqlite_db):
    other = SchedulerLock(sqlite_db)
    other.acquire()  # the first replica's scheduler
    stopped = threading.Event()
    runtime = Runtime(settings(), sqlite_db, executor=NoopExecutor(parallelism=1), api_client=load_api_client(),
                      scheduler_settings=FAST_LOOP)
    runtime.on_fatal = stopped.set
    runtime.start()
    try:
        assert stopped.wait(10), "the scheduler loop did not give up"
        code, text = http_get(runtime.servers.health_port, "/healthz")
        assert code == 503 and "the scheduler loop stopped" in text and "already running on the SQLite" in text
        assert runtime.failed
    finally:
        runtime.stop()
        other.release()


def test_readiness_and_metrics_say_when_the_database_is_unreachable(kube):
    unreachable = Database("postgresql+psycopg2://postgres@127.0.0.1:1/nothing")
    runtime = Runtime(settings(), unreachable, api_client=load_api_client())
    runtime.start()
    try:
        code, text = http_get(runtime.servers.health_port, "/readyz")
        assert code == 503 and text.startswith("not ready: the database does not answer: cannot reach the database")
        code, page = http_get(runtime.servers.metrics_port, "/metrics")
        assert code == 200 and prometheus.value(page, "dagline_database_up") == 0
        assert prometheus.value(page, "dagline_dag_runs", state="success") is None
        assert http_get(runtime.servers.health_port, "/healthz")[0] == 200  # an outage is not a reason to restart
        assert http_get(runtime.servers.health_port, "/nowhere")[0] == 404
    finally:
        runtime.stop()
        unreachable.dispose()

"""The `spark-k8s` executor against the Kubernetes API emulator, through the real `kubernetes` client.

The tests play the spark-operator's part by writing `status.applicationState` (as the operator does),
except where the `spark_operator` stand-in runs the applications. Time is a `FixedClock` the tests
move; nothing sleeps to wait for the executor.
"""

from __future__ import annotations

import datetime as dt
import json
import socket
import subprocess
import sys
import threading

import kmock
import pytest

from dagline.clock import FixedClock
from dagline.errors import InvalidInput
from dagline.executors.base import SparkJob, TaskKey, TaskLaunch
from dagline.k8s import sparkapp
from dagline.k8s.client import load_api_client
from dagline.k8s.executor import SparkK8sExecutor, SparkK8sSettings
from dagline.scheduler.loop import Scheduler
from dagline.store.runs import trigger_run
from tests.helpers.harness import apply, assert_invariants, events, runs, tis, write_dag
from tests.helpers.k8s.cluster import Cluster
from tests.helpers.k8s.emulator import SPARK_APPLICATIONS
from tests.helpers.k8s.spark_operator import Behaviour
from tests.helpers.polling import run_until_done

NS = "default"
APPS = "sparkapplications"
START = dt.datetime(2026, 3, 2, 2, 0, tzinfo=dt.timezone.utc)
SCHEDULED = "scheduled__2026-03-01T00:00:00+00:00"


def launch_of(task="clean_orders", try_number=1, *, run_id=SCHEDULED, dag="sales-daily", ti_id=7, **job):
    fields = {"main_application_file": "local:///opt/jobs/clean.py", "arguments": ("--ds", "2026-03-01")}
    fields.update(job)
    return TaskLaunch(ti_id=ti_id, key=TaskKey(dag, run_id, task, try_number), job=SparkJob(**fields))


def name_of(launch: TaskLaunch) -> str:
    return sparkapp.application_name(launch.key)


@pytest.fixture
def clock():
    return FixedClock(START)


@pytest.fixture
def make_executor(kube, clock):
    """`make_executor(**settings)`: an executor on the emulator (credentials from the fixture's KUBECONFIG)."""
    made = []

    def make(*, parallelism=4, api_client=None, list_interval_s=0.0, sweep_interval_s=60.0, **settings):
        executor = SparkK8sExecutor(SparkK8sSettings(namespace=NS, **settings), parallelism=parallelism, clock=clock,
                                    api_client=api_client or load_api_client(), list_interval_s=list_interval_s,
                                    retry_interval_s=0.0, sweep_interval_s=sweep_interval_s)
        executor.start()
        made.append(executor)
        return executor

    yield make
    for executor in made:
        executor.end()


def set_state(kube, name, state, error=None, pod=None):
    status = {"applicationState": {"state": state, **({"errorMessage": error} if error else {})}}
    if pod:
        status["driverInfo"] = {"podName": pod}
    kube.patch_status(APPS, NS, name, status)


def states(reports):
    return [(r.ti_id, r.try_number, r.state) for r in reports]


# -- launching -----------------------------------------------------------------------------------


def test_a_launch_creates_one_application_with_the_tries_manifest_and_labels(kube, make_executor):
    executor = make_executor(image="registry.example/etl:7", service_account="spark-runner")
    launch = launch_of(conf=(("spark.sql.shuffle.partitions", "4"),), driver_memory="1g", executor_instances=2)
    executor.launch([launch])
    executor.launch([launch])  # a replay changes nothing

    [app] = kube.list(APPS, NS)
    assert app["metadata"]["name"] == name_of(launch)
    spec = app["spec"]
    assert spec["type"] == "Python" and spec["mode"] == "cluster" and spec["restartPolicy"] == {"type": "Never"}
    assert spec["image"] == "registry.example/etl:7" and spec["sparkVersion"] == "3.5.3"
    assert spec["mainApplicationFile"] == "local:///opt/jobs/clean.py"
    assert spec["arguments"] == ["--ds", "2026-03-01"]
    assert spec["sparkConf"] == {"spark.sql.shuffle.partitions": "4"}
    assert spec["driver"]["serviceAccount"] == "spark-runner" and spec["driver"]["memory"] == "1g"
    assert spec["executor"]["instances"] == 2
    assert app["metadata"]["labels"]["dagline.io/try"] == "1"
    assert spec["driver"]["labels"]["dagline.io/task"] == "clean_orders"
    selected = kube.list(APPS, NS, label_selector="dagline.io/dag=sales-daily,dagline.io/task=clean_orders,"
                                                  "dagline.io/try=1,dagline.io/managed-by=dagline")
    assert [a["metadata"]["name"] for a in selected] == [name_of(launch)]
    assert executor.free_slots() == 3 and executor.has_work()


def test_awkward_run_and_task_ids_give_valid_names_and_labels(kube, make_executor):
    executor = make_executor()
    launch = launch_of("Top.Products_" + "x" * 70, 3, run_id="manual__2026-03-01T10:15:00.123456+00:00")
    executor.launch([launch])
    assert executor.sync() == []  # created: the emulator checks names and labels as the API server does

    [app] = kube.list(APPS, NS, label_selector="dagline.io/run=manual__2026-03-01T10_15_00.123456_00_00")
    assert app["metadata"]["annotations"]["dagline.io/task-id"] == launch.key.task_id
    set_state(kube, app["metadata"]["name"], "COMPLETED")
    assert states(executor.sync()) == [(7, 3, "success")]


def test_a_task_with_a_relative_application_file_fails_with_the_field_named(kube, make_executor):
    executor = make_executor()
    executor.launch([launch_of(main_application_file="jobs/clean.py")])
    [report] = executor.sync()
    assert report.state == "failed" and "spark.mainApplicationFile 'jobs/clean.py'" in report.message
    assert kube.list(APPS, NS) == [] and not executor.has_work()


# -- following states ----------------------------------------------------------------------------


def test_states_are_reported_once_each_and_a_success_is_deleted_after_it_was_reported(kube, make_executor, clock):
    executor = make_executor(keep_finished_s=0)  # no keep window: deleted at the sync after the report
    launch = launch_of()
    executor.launch([launch])
    name = name_of(launch)
    assert executor.sync() == []
    set_state(kube, name, "SUBMITTED")
    assert executor.sync() == []

    clock.advance(dt.timedelta(seconds=30))
    set_state(kube, name, "RUNNING")
    [running] = executor.sync()
    assert (running.state, running.started_at, running.external_id) == ("running", START + dt.timedelta(seconds=30),
                                                                         f"default/{name}")
    assert executor.sync() == []
    set_state(kube, name, "SUCCEEDING")
    assert executor.sync() == []

    clock.advance(dt.timedelta(minutes=5))
    set_state(kube, name, "COMPLETED")
    [done] = executor.sync()
    assert (done.state, done.at, done.started_at) == ("success", START + dt.timedelta(minutes=5, seconds=30),
                                                      START + dt.timedelta(seconds=30))
    assert kube.get(APPS, NS, name, missing_ok=True) is not None  # not before the scheduler has recorded it
    assert executor.sync() == []
    assert kube.get(APPS, NS, name, missing_ok=True) is None
    assert not executor.has_work() and executor.free_slots() == 4


@pytest.mark.parametrize("state", ["FAILED", "SUBMISSION_FAILED"])
def test_a_failure_reports_the_operators_message_and_is_kept_for_its_logs(kube, make_executor, state):
    executor = make_executor()
    launch = launch_of()
    executor.launch([launch])
    set_state(kube, name_of(launch), state, error="driver container failed with ExitCode: 1", pod="x-driver")
    [report] = executor.sync()
    assert report.state == "failed"
    assert report.message == f"SparkApplication {state}: driver container failed with ExitCode: 1 (driver pod x-driver)"
    executor.sync()
    app = kube.get(APPS, NS, name_of(launch))
    assert app["metadata"]["labels"]["dagline.io/outcome"] == "failed"
    assert kube.list(APPS, NS, label_selector="dagline.io/outcome=failed") == [app]


@pytest.mark.parametrize(("retention", "kept"), [
    ("delete", set()), ("keep", {"success", "failed"}), ("delete-succeeded", {"failed"}),
])
def test_retention_of_finished_applications_without_a_keep_window(kube, make_executor, retention, kept):
    executor = make_executor(retention=retention, keep_finished_s=0)  # DAGLINE_SPARK_KEEP_FINISHED=0
    good, bad = launch_of("good", ti_id=1), launch_of("bad", ti_id=2)
    executor.launch([good, bad])
    set_state(kube, name_of(good), "COMPLETED")
    set_state(kube, name_of(bad), "FAILED")
    assert sorted(states(executor.sync())) == [(1, 1, "success"), (2, 1, "failed")]
    executor.sync()
    left = {a["metadata"]["labels"]["dagline.io/outcome"] for a in kube.list(APPS, NS)}
    assert left == kept


@pytest.mark.parametrize(("retention", "left_after_a_day"), [
    ("delete-succeeded", {"failed"}), ("delete", set()), ("keep", {"success", "failed"}),
])
def test_finished_applications_and_their_driver_logs_are_kept_a_day_then_swept_by_any_replica(
        kube, make_executor, clock, retention, left_after_a_day):
    executor = make_executor(retention=retention, sweep_interval_s=0)  # the default keep window: PT24H
    good, bad = launch_of("good", ti_id=1), launch_of("bad", ti_id=2)
    executor.launch([good, bad])
    set_state(kube, name_of(good), "COMPLETED")
    set_state(kube, name_of(bad), "FAILED")
    finished_at = clock.now()
    assert sorted(states(executor.sync())) == [(1, 1, "success"), (2, 1, "failed")]
    executor.sync()
    apps = {a["metadata"]["labels"]["dagline.io/outcome"]: a for a in kube.list(APPS, NS)}
    assert set(apps) == {"success", "failed"}  # both kept, with their driver pods, for now
    due = (finished_at + dt.timedelta(hours=24)).isoformat()
    for outcome, app in apps.items():
        deleted_later = outcome not in left_after_a_day
        assert (app["metadata"].get("annotations", {}).get("dagline.io/delete-after") == due) is deleted_later

    clock.advance(dt.timedelta(hours=23, minutes=59))
    executor.sync()
    assert len(kube.list(APPS, NS)) == 2  # not yet
    executor.end()
    # a day after the end, any replica's sweep deletes them: the time is in the cluster, not in a replica
    clock.advance(dt.timedelta(minutes=2))
    other = make_executor(retention="keep", sweep_interval_s=0)
    other.sync()
    assert {a["metadata"]["labels"]["dagline.io/outcome"] for a in kube.list(APPS, NS)} == left_after_a_day


def test_keep_finished_is_read_from_the_environment_and_checked():
    assert SparkK8sSettings.from_env({}).keep_finished_s == 86400
    assert SparkK8sSettings.from_env({"DAGLINE_SPARK_KEEP_FINISHED": "PT6H"}).keep_finished_s == 6 * 3600
    assert SparkK8sSettings.from_env({"DAGLINE_SPARK_KEEP_FINISHED": "0"}).keep_finished_s == 0
    for bad in ("-1", "soon"):
        with pytest.raises(InvalidInput) as caught:
            SparkK8sSettings.from_env({"DAGLINE_SPARK_KEEP_FINISHED": bad})
        assert caught.value.field == "DAGLINE_SPARK_KEEP_FINISHED"


def test_an_application_stuck_before_its_driver_runs_fails_at_the_pending_timeout_and_is_deleted(
        kube, make_executor, clock):
    executor = make_executor(pending_timeout_s=600)
    launch = launch_of()
    executor.launch([launch])
    set_state(kube, name_of(launch), "SUBMITTED")  # e.g. an image that cannot be pulled
    clock.advance(dt.timedelta(minutes=10))
    assert executor.sync() == []  # exactly at the limit: still waiting

    clock.advance(dt.timedelta(seconds=1))
    [report] = executor.sync()
    assert report.state == "failed"
    assert report.message.startswith("no driver running 10m after launch")
    assert "SUBMITTED" in report.message and "spark:3.5.3" in report.message
    assert kube.get(APPS, NS, name_of(launch), missing_ok=True) is None  # it cannot start beside the retry
    assert not executor.has_work()


def test_an_application_no_spark_operator_picks_up_fails_at_the_pickup_timeout_saying_why(kube, make_executor, clock):
    executor = make_executor(pending_timeout_s=900, pickup_timeout_s=60)
    launch = launch_of()
    executor.launch([launch])
    assert executor.sync() == []
    clock.advance(dt.timedelta(seconds=60))
    assert executor.sync() == []  # exactly at the limit: still waiting

    clock.advance(dt.timedelta(seconds=1))
    [report] = executor.sync()  # a minute, not the fifteen of the pending timeout
    assert report.state == "failed" and report.message.startswith("SparkOperatorNotWatching: no spark-operator")
    assert "does it watch namespace default" in report.message and "DAGLINE_SPARK_PICKUP_TIMEOUT" in report.message
    assert kube.get(APPS, NS, name_of(launch), missing_ok=True) is None  # it cannot start later beside the retry
    assert executor.pickups.latest.picked is False  # what the preflight reads


def test_a_create_the_api_answers_404_for_the_kind_fails_the_try_at_once_naming_the_missing_crd(kube, make_executor):
    kube.call(lambda em: em[kmock.action.CREATE, SPARK_APPLICATIONS.ref] << 404 << {
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
        "message": "the server could not find the requested resource"})
    executor = make_executor()
    executor.launch([launch_of()])
    [report] = executor.sync()
    assert report.state == "failed" and report.message.startswith("SparkApplicationCRDMissing:")
    assert "sparkapplications.sparkoperator.k8s.io" in report.message


def test_a_running_application_has_no_pending_timeout(kube, make_executor, clock):
    executor = make_executor(pending_timeout_s=60)
    launch = launch_of()
    executor.launch([launch])
    set_state(kube, name_of(launch), "RUNNING")
    assert states(executor.sync()) == [(7, 1, "running")]
    clock.advance(dt.timedelta(hours=3))
    set_state(kube, name_of(launch), "UNKNOWN")  # the driver's node is unreachable for a while
    assert executor.sync() == []
    assert kube.get(APPS, NS, name_of(launch)) is not None


def test_an_application_deleted_by_someone_fails_its_try(kube, make_executor):
    executor = make_executor()
    launch = launch_of()
    executor.launch([launch])
    set_state(kube, name_of(launch), "RUNNING")
    executor.sync()
    kube.delete(APPS, NS, name_of(launch))
    [report] = executor.sync()
    assert report.state == "failed" and "disappeared" in report.message and "RUNNING" in report.message


def test_cancel_deletes_the_application(kube, make_executor):
    executor = make_executor()
    launch = launch_of()
    executor.launch([launch])
    executor.cancel(launch.key)
    assert kube.get(APPS, NS, name_of(launch), missing_ok=True) is None
    [report] = executor.sync()
    assert report.state == "failed" and report.message.startswith("cancelled")
    assert not executor.has_work()


def test_parallelism_bounds_free_slots(make_executor):
    executor = make_executor(parallelism=2)
    executor.launch([launch_of("a", ti_id=1), launch_of("b", ti_id=2)])
    assert executor.free_slots() == 0


def test_one_list_call_per_interval_however_often_sync_is_called(kube, make_executor):
    executor = make_executor(list_interval_s=3600)
    launches = [launch_of(f"t{i}", ti_id=i) for i in range(5)]
    executor.launch(launches)
    for _ in range(10):
        executor.sync()

    def count(em):
        return len(list(em[kmock.action.LIST, SPARK_APPLICATIONS.ref])), len(list(em[kmock.action.FETCH]))

    assert kube.call(count) == (1, 0)


# -- adoption ------------------------------------------------------------------------------------


def test_a_second_launch_of_the_same_try_adopts_the_application(kube, make_executor):
    first = make_executor()
    launch = launch_of()
    first.launch([launch])
    set_state(kube, name_of(launch), "RUNNING")
    del first  # a replica that created it and died

    second = make_executor()
    second.launch([launch])  # 409 AlreadyExists: the same try, so it is followed, not duplicated
    assert len(kube.list(APPS, NS)) == 1
    assert states(second.sync()) == [(7, 1, "running")]
    set_state(kube, name_of(launch), "COMPLETED")
    assert states(second.sync()) == [(7, 1, "success")]


def test_a_name_held_by_another_object_fails_the_try_and_leaves_that_object_alone(kube, make_executor):
    launch = launch_of()
    stranger = {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
                "metadata": {"name": name_of(launch)}, "spec": {"image": "someone-elses"}}
    kube.create(APPS, NS, stranger)
    executor = make_executor()
    executor.launch([launch])
    [report] = executor.sync()
    assert report.state == "failed" and "belongs to another try" in report.message
    assert kube.get(APPS, NS, name_of(launch))["spec"] == {"image": "someone-elses"}


def test_adopt_follows_existing_applications_by_name_and_returns_the_others(kube, make_executor, clock):
    first = make_executor()
    running, finished, never = launch_of("a", ti_id=1), launch_of("b", ti_id=2), launch_of("c", ti_id=3)
    first.launch([running, finished])
    set_state(kube, name_of(running), "RUNNING")
    set_state(kube, name_of(finished), "COMPLETED")
    first.end()  # stops following, deletes nothing
    assert len(kube.list(APPS, NS)) == 2

    clock.advance(dt.timedelta(minutes=1))
    second = make_executor()
    assert second.adopt([running, finished, never]) == [never]
    assert sorted(states(second.sync())) == [(1, 1, "running"), (2, 1, "success")]
    set_state(kube, name_of(running), "FAILED", error="OOMKilled")
    [report] = second.sync()
    assert (report.ti_id, report.state, report.message) == (1, "failed", "SparkApplication FAILED: OOMKilled")
    # the success was relabelled once reported, to be deleted a day later; the failure is kept
    success = kube.get(APPS, NS, name_of(finished))
    assert success["metadata"]["labels"]["dagline.io/outcome"] == "success"
    assert success["metadata"]["annotations"]["dagline.io/delete-after"] == (
        START + dt.timedelta(minutes=1, hours=24)).isoformat()


def test_adopt_finds_an_outcome_reported_by_a_replica_that_died_before_recording_it(kube, make_executor):
    first = make_executor(retention="keep")
    launch = launch_of()
    first.launch([launch])
    set_state(kube, name_of(launch), "COMPLETED")
    assert states(first.sync()) == [(7, 1, "success")]
    first.sync()  # relabelled dagline.io/outcome=success: no longer listed as followed
    # ... and the scheduler died before recording the success
    second = make_executor(retention="keep")
    assert second.adopt([launch]) == []
    assert states(second.sync()) == [(7, 1, "success")]


def test_end_leaves_running_applications_alone(kube, make_executor):
    executor = make_executor(retention="delete")
    launch = launch_of()
    executor.launch([launch])
    set_state(kube, name_of(launch), "RUNNING")
    executor.sync()
    executor.end()
    assert kube.get(APPS, NS, name_of(launch))["status"]["applicationState"]["state"] == "RUNNING"
    assert not executor.has_work()


# -- API errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("code", "reason", "message"), [
    (403, "Forbidden", 'sparkapplications.sparkoperator.k8s.io is forbidden: User "system:serviceaccount:dl:dagline" '
                       'cannot create resource "sparkapplications"'),
    (422, "Invalid", 'SparkApplication.sparkoperator.k8s.io "x" is invalid: spec.driver.cores: Invalid value: 0'),
])
def test_a_refused_create_fails_the_try_with_the_apis_message(kube, make_executor, code, reason, message):
    def refuse(em):
        em[kmock.action.CREATE, SPARK_APPLICATIONS.ref] << code << {
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code,
            "message": message}

    kube.call(refuse)
    executor = make_executor()
    executor.launch([launch_of()])
    [report] = executor.sync()
    assert report.state == "failed" and report.message.endswith(f"{code}: {message}")
    assert not executor.has_work()


@pytest.mark.parametrize("code", [500, 503, 429])
def test_server_errors_keep_state_and_recover(kube, make_executor, clock, code):
    outage = threading.Event()
    outage.set()
    kube.call(lambda em: em[lambda request: outage.is_set()] << code)
    executor = make_executor(pending_timeout_s=600)
    launch = launch_of()
    executor.launch([launch])  # does not raise
    clock.advance(dt.timedelta(minutes=5))
    assert executor.sync() == [] and executor.has_work()

    outage.clear()
    assert executor.sync() == []  # the create is retried now
    set_state(kube, name_of(launch), "RUNNING")
    outage.set()
    assert executor.sync() == []  # the list fails: nothing is reported, nothing forgotten
    clock.advance(dt.timedelta(minutes=10))
    assert executor.sync() == []  # and no pending timeout while the API cannot say how the try is doing
    outage.clear()
    assert states(executor.sync()) == [(7, 1, "running")]
    assert len(kube.list(APPS, NS)) == 1


class Outage:
    """A TCP relay in front of the emulator that can stop listening (connection refused) and start again."""

    def __init__(self, target_url: str):
        host, port = target_url.rsplit("//", 1)[1].split(":")
        self.target = (host, int(port))
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.listener: socket.socket | None = None
        self.connections: list[socket.socket] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        """Refuse new connections and cut open ones (the client's pooled keep-alive connections too)."""
        if self.listener is not None:
            try:
                self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (close alone does not)
            except OSError:
                pass
            self.listener.close()
            self.listener = None
        with self.lock:
            for conn in self.connections:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                conn.close()
            self.connections.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.connections += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def test_connection_refused_keeps_state_and_recovers(kube, make_executor, tmp_path, monkeypatch):
    relay = Outage(kube.url)
    relay.up()
    kubeconfig = json.loads(kube.kubeconfig_path.read_text())
    kubeconfig["clusters"][0]["cluster"]["server"] = relay.url
    (tmp_path / "relayed").write_text(json.dumps(kubeconfig))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "relayed"))
    executor = make_executor(api_client=load_api_client())
    launch = launch_of()
    executor.launch([launch])
    assert executor.sync() == []

    relay.down()
    set_state(kube, name_of(launch), "RUNNING")
    assert executor.sync() == [] and executor.has_work()  # connection refused: logged, state kept
    executor.launch([launch_of("other", ti_id=8)])  # not created yet, not lost either
    assert executor.sync() == []

    relay.up()
    assert states(executor.sync()) == [(7, 1, "running")]
    assert {a["metadata"]["name"] for a in kube.list(APPS, NS)} == {name_of(launch), name_of(launch_of("other"))}
    relay.down()


# -- with the scheduler and the spark-operator stand-in ------------------------------------------

FLAKY_DAG = """\
    apiVersion: dagline.io/v1alpha1
    kind: DAG
    metadata: {name: flaky}
    spec:
      paused: false
      catchup: true
      schedule: null
      defaults: {retries: 1, retryDelay: PT5M}
      tasks:
        - id: load
          spark:
            mainApplicationFile: local:///opt/jobs/load.py
            arguments: ["--try", "{{ try_number }}"]
"""


def iterate_until(scheduler, condition, what, timeout=10.0):
    """Run scheduler loops until `condition()` holds (the stand-in moves applications meanwhile)."""
    def step():
        scheduler.iterate()
        return condition()
    Cluster.wait_for(step, timeout, what=what)


def test_a_failed_try_is_retried_as_a_new_application_and_succeeds(db, kube, spark_operator, make_executor, clock,
                                                                     tmp_path):
    spark_operator.on({"dagline.io/try": "1"}, Behaviour.fail("Traceback: ValueError: flaky input"))
    apply(db, write_dag(tmp_path, FLAKY_DAG))
    trigger_run(db, "flaky", now=clock.now())

    run = run_until_done(db, make_executor(), clock, "flaky")

    assert run["state"] == "success"
    ti = tis(db, run["id"])["load"]
    assert (ti.state, ti.try_number) == ("success", 2)
    key2 = TaskKey("flaky", run["run_id"], "load", 2)
    assert ti.external_id == f"default/{sparkapp.application_name(key2)}"
    [retry] = [e for e in events(db, entity="task_instance") if e.to_state == "up_for_retry"]
    assert "SparkApplication FAILED: Traceback: ValueError: flaky input" in retry.detail
    assert [s.spec["arguments"] for s in spark_operator.submissions] == [["--try", "1"], ["--try", "2"]]

    # try 1 failed: kept, for its driver's logs; try 2 succeeded: kept a day, then deleted (default retention)
    kept = {a["metadata"]["labels"]["dagline.io/try"]: a for a in kube.list(APPS, NS, label_selector="dagline.io/dag=flaky")}
    assert kept["1"]["metadata"]["labels"]["dagline.io/outcome"] == "failed"
    assert "dagline.io/delete-after" not in kept["1"]["metadata"].get("annotations", {})
    assert kept["2"]["metadata"]["labels"]["dagline.io/outcome"] == "success"
    assert sparkapp.application_state(kept["2"]) == "COMPLETED"
    assert "dagline.io/delete-after" in kept["2"]["metadata"]["annotations"]
    assert_invariants(db)


def test_tasks_logs_reads_the_driver_pods_log_through_the_api(db, kube, spark_operator, make_executor, clock, tmp_path):
    from click.testing import CliRunner

    from dagline.cli import main

    spark_operator.on({"dagline.io/try": "1"}, Behaviour.fail("Traceback: ValueError: flaky input"))
    apply(db, write_dag(tmp_path, FLAKY_DAG))
    trigger_run(db, "flaky", now=clock.now())
    executor = make_executor(sweep_interval_s=0)
    run = run_until_done(db, executor, clock, "flaky")
    url = db.engine.url.render_as_string(hide_password=False)
    cli = CliRunner()

    first = cli.invoke(main, ["--db", url, "tasks", "logs", run["run_id"], "load", "--try", "1"])
    name = sparkapp.application_name(TaskKey("flaky", run["run_id"], "load", 1))
    assert first.exit_code == 0, first.output
    assert f"driver of default/{name}" in first.output and "arguments: --try 1" in first.output
    assert "exits with an error: Traceback: ValueError: flaky input" in first.output
    # try 2 succeeded: its application, driver pod and log stay a day (DAGLINE_SPARK_KEEP_FINISHED)
    second = cli.invoke(main, ["--db", url, "tasks", "logs", run["run_id"], "load"])
    assert second.exit_code == 0 and "arguments: --try 2" in second.output, second.output
    # a day later the sweep has deleted it, and with it the driver pod: the reader says so
    clock.advance(dt.timedelta(hours=24, seconds=1))
    executor.sync()
    second = cli.invoke(main, ["--db", url, "tasks", "logs", run["run_id"], "load"])
    assert second.exit_code == 1 and "no longer exists" in second.output
    assert "DAGLINE_SPARK_KEEP_FINISHED" in second.output and "DAGLINE_SPARK_RETENTION" in second.output
    # a driver pod whose container has not started: the API's own message
    kube.create("pods", NS, {"metadata": {"name": f"{name}-driver-2"}, "spec": {"containers": [{"name": "d"}]}})
    kube.patch_status(APPS, NS, name, {"driverInfo": {"podName": f"{name}-driver-2"}})
    waiting = cli.invoke(main, ["--db", url, "tasks", "logs", run["run_id"], "load", "--try", "1"])
    assert waiting.exit_code == 1 and "ContainerCreating" in waiting.output
    # the application is there but its driver pod was deleted (by hand, an eviction, a node gone)
    kube.delete("pods", NS, f"{name}-driver-2")
    gone = cli.invoke(main, ["--db", url, "tasks", "logs", run["run_id"], "load", "--try", "1"])
    assert gone.exit_code == 1 and f"the driver pod {NS}/{name}-driver-2 of SparkApplication {name} is gone" in gone.output


def test_the_web_ui_shows_a_spark_k8s_tries_driver_log_as_tasks_logs_prints_it(
        db, kube, spark_operator, make_executor, clock, tmp_path):
    import html
    import re

    from click.testing import CliRunner
    from fastapi.testclient import TestClient

    from dagline.api import ApiSettings, create_app
    from dagline.cli import main
    from dagline.store.tokens import create_token
    from tests.helpers.web_session import sign_in

    spark_operator.on({"dagline.io/try": "1"}, Behaviour.fail("Traceback: ValueError: flaky input"))
    apply(db, write_dag(tmp_path, FLAKY_DAG))
    trigger_run(db, "flaky", now=clock.now())
    executor = make_executor(sweep_interval_s=0)
    run = run_until_done(db, executor, clock, "flaky")
    url = db.engine.url.render_as_string(hide_password=False)
    printed = CliRunner().invoke(main, ["--db", url, "tasks", "logs", run["run_id"], "load", "--try", "1"])
    assert printed.exit_code == 0, printed.output
    name = sparkapp.application_name(TaskKey("flaky", run["run_id"], "load", 1))
    assert f"driver of default/{name}" in printed.stdout  # the driver pod's log, not a file

    # the log folder is empty: what the page shows can only come from the driver pod
    web = TestClient(create_app(db, ApiSettings(log_folder=str(tmp_path / "no-logs"))), follow_redirects=False)
    with db.begin() as conn:
        token = create_token(conn, "reader", ("read",), now=clock.now())
    sign_in(web, token)  # a signed-in reader, as on a cluster without anonymous reading
    first = web.get(f"/runs/{run['id']}/logs/load/1")  # a page's first view: the log's end
    assert first.status_code == 200 and first.headers["x-log-exists"] == "1"
    assert first.text == printed.stdout
    assert first.headers["x-log-offset"] == str(len(printed.stdout.encode()))
    assert first.headers["x-try-running"] == "0"
    part = web.get(f"/runs/{run['id']}/logs/load/1?offset=20")  # a following page: past what it has
    assert part.text == printed.stdout.encode()[20:].decode()
    assert web.get(f"/runs/{run['id']}/logs/load/1?offset={first.headers['x-log-offset']}").text == ""
    page = web.get(f"/runs/{run['id']}?task=load&try=1")
    shown = re.search(r'<pre class="log" id="log-text"[^>]*>(.*?)</pre>', page.text, re.DOTALL)
    assert page.status_code == 200 and shown is not None
    assert html.unescape(shown.group(1)) == printed.stdout

    # try 2 succeeded: its driver log is still there the next morning (kept a day by default)
    clock.advance(dt.timedelta(hours=12))
    executor.sync()
    page = web.get(f"/runs/{run['id']}?task=load&try=2")
    shown = re.search(r'<pre class="log" id="log-text"[^>]*>(.*?)</pre>', page.text, re.DOTALL)
    assert shown is not None and "arguments: --try 2" in html.unescape(shown.group(1))
    assert "No log here" not in page.text

    # a day after its end the sweep deleted its application, and with it the driver pod:
    # the page says so in the reader's words, as `tasks logs` does
    clock.advance(dt.timedelta(hours=12, seconds=1))
    executor.sync()
    gone = CliRunner().invoke(main, ["--db", url, "tasks", "logs", run["run_id"], "load"])
    assert gone.exit_code == 1 and "no longer exists" in gone.output
    missing = web.get(f"/runs/{run['id']}/logs/load/2")
    assert missing.status_code == 200 and missing.headers["x-log-exists"] == "0" and missing.text == ""
    page = web.get(f"/runs/{run['id']}?task=load&try=2").text
    assert "No log here for try 2" in page and "no longer exists" in page and "DAGLINE_SPARK_KEEP_FINISHED" in page


FOLLOWED_DAG = """\
    apiVersion: dagline.io/v1alpha1
    kind: DAG
    metadata: {name: followed}
    spec:
      paused: false
      schedule: null
      tasks:
        - id: drive
          spark:
            mainApplicationFile: local:///opt/jobs/drive.py
    """


def test_tasks_logs_follow_reads_the_driver_log_as_it_grows_until_the_try_ends(
        db, kube, spark_operator, make_executor, clock, tmp_path):
    spark_operator.on({"dagline.io/try": "1"}, Behaviour.hang("RUNNING"))
    apply(db, write_dag(tmp_path, FOLLOWED_DAG))
    run = trigger_run(db, "followed", now=clock.now())
    scheduler = Scheduler(db, make_executor(), clock=clock)
    scheduler.start()
    follow = None
    try:
        iterate_until(scheduler, lambda: tis(db, run.id)["drive"].state == "running", "drive running")
        name = sparkapp.application_name(TaskKey("followed", run.run_id, "drive", 1))
        log = tmp_path / "driver.log"
        log.write_text("first line\n")
        kube.emulator.pod_logs[(NS, f"{name}-driver")] = log  # read at each request, as a growing log is
        url = db.engine.url.render_as_string(hide_password=False)
        follow = subprocess.Popen(
            [sys.executable, "-m", "dagline.cli", "--db", url, "tasks", "logs", run.run_id, "drive", "--follow",
             "--poll-interval", "0.05"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert follow.stdout.readline() == "first line\n"  # printed while the try runs
        with log.open("a") as fh:
            fh.write("second line\n")
        set_state(kube, name, "FAILED", error="driver container failed")  # failed applications are kept
        iterate_until(scheduler, lambda: tis(db, run.id)["drive"].state == "failed", "drive failed")
        out, err = follow.communicate(timeout=60)
    finally:
        scheduler.stop()
        if follow is not None and follow.poll() is None:
            follow.kill()
            follow.communicate()
    assert follow.returncode == 0, err
    assert out == "second line\n"  # the rest, each line once
    assert "try 1 of drive ended: failed" in err


def test_a_try_whose_driver_never_starts_fails_at_the_pending_timeout_and_the_retry_runs(
        pg_db, kube, spark_operator, make_executor, clock, tmp_path):
    spark_operator.on({"dagline.io/try": "1"}, Behaviour.hang("SUBMITTED"))  # e.g. an image pull error
    apply(pg_db, write_dag(tmp_path, FLAKY_DAG))
    trigger_run(pg_db, "flaky", now=clock.now())
    executor = make_executor(pending_timeout_s=600)
    scheduler = Scheduler(pg_db, executor, clock=clock)
    scheduler.start()
    try:
        first = sparkapp.application_name(TaskKey("flaky", runs(pg_db, "flaky")[0]["run_id"], "load", 1))
        iterate_until(scheduler, lambda: sparkapp.application_state(kube.get(APPS, NS, first)) == "SUBMITTED",
                      "try 1 submitted")
        scheduler.iterate()
        clock.advance(dt.timedelta(minutes=10, seconds=1))
        scheduler.iterate()
        [run] = runs(pg_db, "flaky")
        ti = tis(pg_db, run["id"])["load"]
        assert ti.state == "up_for_retry"
        assert kube.get(APPS, NS, first, missing_ok=True) is None  # deleted: it cannot start beside the retry
    finally:
        scheduler.stop()
    [retry] = [e for e in events(pg_db, entity="task_instance") if e.to_state == "up_for_retry"]
    assert "no driver running 10m after launch" in retry.detail and "SUBMITTED" in retry.detail

    run = run_until_done(pg_db, make_executor(pending_timeout_s=600), clock, "flaky")
    assert run["state"] == "success" and tis(pg_db, run["id"])["load"].try_number == 2
    assert_invariants(pg_db)


def test_a_restarted_scheduler_adopts_the_running_application_instead_of_launching_it_again(
        sqlite_db, kube, spark_operator, make_executor, clock, tmp_path):
    spark_operator.on({"dagline.io/try": "1"}, Behaviour.hang("RUNNING"))
    apply(sqlite_db, write_dag(tmp_path, FLAKY_DAG))
    trigger_run(sqlite_db, "flaky", now=clock.now())
    scheduler = Scheduler(sqlite_db, make_executor(), clock=clock)
    scheduler.start()
    run_id = runs(sqlite_db, "flaky")[0]["run_id"]
    name = sparkapp.application_name(TaskKey("flaky", run_id, "load", 1))
    run_pk = runs(sqlite_db, "flaky")[0]["id"]
    iterate_until(scheduler, lambda: tis(sqlite_db, run_pk)["load"].state == "running", "try 1 running")
    scheduler.stop()  # the replica goes; its application keeps running
    assert sparkapp.application_state(kube.get(APPS, NS, name)) == "RUNNING"

    # the next replica (SQLite: it knows the last one is gone) adopts it by name; it then completes
    kube.patch_status(APPS, NS, name, {"applicationState": {"state": "COMPLETED"}})
    run = run_until_done(sqlite_db, make_executor(), clock, "flaky")
    ti = tis(sqlite_db, run["id"])["load"]
    assert (run["state"], ti.state, ti.try_number) == ("success", "success", 1)
    assert len(spark_operator.submissions) == 1  # launched once
    assert_invariants(sqlite_db)


WORDS_JOB = """\
import argparse, json
from pyspark.sql import SparkSession

parser = argparse.ArgumentParser()
parser.add_argument("--ds")
parser.add_argument("--out")
args = parser.parse_args()
spark = SparkSession.builder.getOrCreate()
rows = spark.createDataFrame([("a", 1), ("b", 2), ("a", 3)], ["word", "n"]).groupBy("word").sum("n").collect()
partitions = spark.conf.get("spark.sql.shuffle.partitions")
with open(args.out, "w") as f:
    json.dump({"ds": args.ds, "partitions": partitions, "sums": {r["word"]: r["sum(n)"] for r in rows}}, f)
spark.stop()
"""


@pytest.mark.spark
def test_a_real_pyspark_job_runs_as_a_spark_application(pg_db, kube, spark_operator, make_executor, clock, tmp_path):
    spark_operator.mode = "pyspark"
    job = tmp_path / "words.py"
    job.write_text(WORDS_JOB)
    out = tmp_path / "words-2026-03-01.json"
    apply(pg_db, write_dag(tmp_path, f"""\
        apiVersion: dagline.io/v1alpha1
        kind: DAG
        metadata: {{name: words}}
        spec:
          paused: false
          catchup: true
          schedule: null
          tasks:
            - id: count
              spark:
                mainApplicationFile: local://{job}
                arguments: ["--ds", "{{{{ ds }}}}", "--out", "{tmp_path}/words-{{{{ ds }}}}.json"]
                conf: {{spark.sql.shuffle.partitions: "3"}}
                driver: {{memory: 512m}}
    """))
    trigger_run(pg_db, "words", now=clock.now(), logical_date=dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc))

    run = run_until_done(pg_db, make_executor(), clock, "words", timeout=120)

    assert run["state"] == "success", tis(pg_db, run["id"])
    assert json.loads(out.read_text()) == {"ds": "2026-03-01", "partitions": "3", "sums": {"a": 4, "b": 2}}
    [app] = kube.list(APPS, NS)  # succeeded and recorded: kept a day with its driver log, then deleted
    assert app["metadata"]["labels"]["dagline.io/outcome"] == "success"
    assert "dagline.io/delete-after" in app["metadata"]["annotations"]
    assert_invariants(pg_db)


# -- signals: the try's token in a per-try Secret, and stops ----------------------------------------

SIGNAL_ENV = (("DAGLINE_API_URL", "http://dagline-api.default.svc:8793"), ("DAGLINE_SIGNAL_TOKEN", "dgl_5_secret"))


def secret_values(secret: dict) -> dict:
    import base64

    if secret.get("data"):
        return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    return dict(secret.get("stringData") or {})


def test_a_tries_token_reaches_driver_and_executors_through_its_own_secret(kube, make_executor):
    executor = make_executor()
    launch = launch_of(ti_id=9)
    launch = TaskLaunch(ti_id=9, key=launch.key, job=launch.job, env=SIGNAL_ENV, streaming=True, stop_grace_s=45)
    executor.launch([launch])

    [app] = kube.list(APPS, NS)
    secret_name = f"{name_of(launch)}-env"
    conf = app["spec"]["sparkConf"]
    for role in ("driver", "executor"):
        assert conf[f"spark.kubernetes.{role}.secretKeyRef.DAGLINE_SIGNAL_TOKEN"] == f"{secret_name}:DAGLINE_SIGNAL_TOKEN"
        assert conf[f"spark.kubernetes.{role}.secretKeyRef.DAGLINE_API_URL"] == f"{secret_name}:DAGLINE_API_URL"
    assert "dgl_5_secret" not in json.dumps(app)  # the token is only in the Secret
    assert app["spec"]["driver"]["terminationGracePeriodSeconds"] == 45  # a streaming try's stopGracePeriod
    secret = kube.get("secrets", NS, secret_name)
    assert secret_values(secret) == dict(SIGNAL_ENV)
    assert secret["metadata"]["labels"]["dagline.io/try"] == "1"
    [owner] = secret["metadata"]["ownerReferences"]  # deleted with the application by Kubernetes
    assert (owner["kind"], owner["name"], owner["uid"]) == ("SparkApplication", name_of(launch), app["metadata"]["uid"])

    # launched again (a queued try re-launched by an adopter, with a new token): the application and its
    # Secret are kept as they are (Secrets are only ever created; every token of a try is valid until it ends)
    again = TaskLaunch(ti_id=9, key=launch.key, job=launch.job, env=(SIGNAL_ENV[0], ("DAGLINE_SIGNAL_TOKEN", "dgl_6_x")))
    make_executor().launch([again])
    assert secret_values(kube.get("secrets", NS, secret_name))["DAGLINE_SIGNAL_TOKEN"] == "dgl_5_secret"
    assert len(kube.list(APPS, NS)) == 1

    executor.cancel(launch.key)  # a stop: the application is deleted, and Kubernetes deletes its Secret
    assert kube.get(APPS, NS, name_of(launch), missing_ok=True) is None
    assert kube.get("secrets", NS, secret_name, missing_ok=True) is None


def _driver_and_executor_env(app: dict, secret: dict) -> tuple[dict, dict]:
    """The environment Spark gives the driver and the executors of this application: every
    `spark.kubernetes.<role>.secretKeyRef.<VAR>` read from the Secret it names (the only way dagline
    passes variables), plus `driverEnv` / `executorEnv` literals if there were any."""
    values = secret_values(secret)
    conf = app["spec"]["sparkConf"]
    out = []
    for role, literal in (("driver", "spark.kubernetes.driverEnv."), ("executor", "spark.executorEnv.")):
        env = {}
        for key, ref in conf.items():
            if key.startswith(f"spark.kubernetes.{role}.secretKeyRef."):
                secret_name, _, secret_key = ref.partition(":")
                assert secret_name == secret["metadata"]["name"]  # only the try's own Secret is ever named
                env[key.rsplit(".", 1)[1]] = values[secret_key]
            elif key.startswith(literal):
                env[key[len(literal):]] = conf[key]
        assert "env" not in app["spec"][role] and "envFrom" not in app["spec"][role]
        out.append(env)
    return out[0], out[1]


def test_a_tasks_env_reaches_driver_and_executors_with_secrets_of_the_dags_namespace_only(kube, make_executor):
    """The list of variables a SparkApplication's pods get: dagline's two and the task's `env`, whose
    secretKeyRef is read from the DAG object's namespace (team-a), not from the Spark namespace nor
    another team's, by the operator's own reader; nothing of the operator's settings."""
    import base64

    from dagline.executors.base import TaskVariable
    from dagline.k8s.callback_events import secret_reader

    for namespace, password in (("team-a", "a-pass"), ("team-b", "b-pass"), (NS, "spark-namespace-pass")):
        if namespace != NS:
            kube.create_namespace(namespace)
        kube.create("secrets", namespace, {"metadata": {"name": "warehouse"},
                                           "data": {"password": base64.b64encode(password.encode()).decode()}})
    executor = make_executor()
    executor.read_secret = secret_reader(load_api_client())  # as the operator's Runtime sets it
    base = launch_of(ti_id=11, dag="team-a/sales-daily")  # team-a's DAG: its key says so, nothing is looked up
    task_env = (TaskVariable("STAGE", "prod"), TaskVariable("DB_PASSWORD", secret=("warehouse", "password")))
    launch = TaskLaunch(ti_id=11, key=base.key, job=base.job, env=SIGNAL_ENV, task_env=task_env)
    executor.launch([launch])

    [app] = kube.list(APPS, NS)
    secret = kube.get("secrets", NS, f"{name_of(launch)}-env")
    driver, executors = _driver_and_executor_env(app, secret)
    expected = {"DAGLINE_API_URL": "http://dagline-api.default.svc:8793", "DAGLINE_SIGNAL_TOKEN": "dgl_5_secret",
                "STAGE": "prod", "DB_PASSWORD": "a-pass"}
    assert driver == expected and executors == expected
    assert "a-pass" not in json.dumps(app) and "DAGLINE_DB_URL" not in json.dumps(app)

    # a key the DAG's Secret lacks fails the try, naming the variable and where it looked
    missing = TaskLaunch(ti_id=12, key=launch_of(task="other", dag="team-a/sales-daily").key, job=base.job,
                         env=SIGNAL_ENV,
                         task_env=(TaskVariable("DB_PASSWORD", secret=("warehouse", "pasword")),))
    executor.launch([missing])
    [report] = [r for r in executor.sync() if r.ti_id == 12]
    assert report.state == "failed"
    assert "env DB_PASSWORD" in report.message and "team-a/warehouse" in report.message
    assert kube.get(APPS, NS, name_of(missing), missing_ok=True) is None
def test_an_adopted_application_whose_secret_was_never_created_gets_it(kube, make_executor):
    """The replica that created the application died before creating its Secret: the adopter creates it."""
    launch = TaskLaunch(ti_id=9, key=launch_of(ti_id=9).key, job=launch_of(ti_id=9).job, env=SIGNAL_ENV)
    make_executor().launch([launch])
    secret_name = f"{name_of(launch)}-env"
    kube.delete("secrets", NS, secret_name)
    make_executor().launch([launch])  # 409 on the application: adopted, and its Secret created, owned by it
    secret = kube.get("secrets", NS, secret_name)
    assert secret["metadata"]["ownerReferences"][0]["uid"] == kube.get(APPS, NS, name_of(launch))["metadata"]["uid"]


STREAMING_DAG = """
    apiVersion: dagline.io/v1alpha1
    kind: DAG
    metadata: {name: serving}
    spec:
      schedule: null
      paused: false
      tasks:
        - id: serve
          mode: streaming
          stopGracePeriod: PT20S
          spark: {mainApplicationFile: local:///opt/jobs/serve.py}
"""


def test_tasks_stop_deletes_the_streaming_tries_application_and_the_try_ends_success(
        pg_db, kube, spark_operator, make_executor, clock, tmp_path):
    from dagline.store.runs import stop_task

    spark_operator.on({"dagline.io/task": "serve"}, Behaviour.hang("RUNNING"))
    apply(pg_db, write_dag(tmp_path, STREAMING_DAG))
    run = trigger_run(pg_db, "serving", now=clock.now())
    scheduler = Scheduler(pg_db, make_executor(), clock=clock, api_url="http://dagline-api.default.svc:8793")
    scheduler.start()
    try:
        iterate_until(scheduler, lambda: tis(pg_db, run.id)["serve"].state == "running", "the streaming try runs")
        name = sparkapp.application_name(TaskKey("serving", run.run_id, "serve", 1))
        app = kube.get(APPS, NS, name)
        assert app["spec"]["driver"]["terminationGracePeriodSeconds"] == 20
        token = secret_values(kube.get("secrets", NS, f"{name}-env"))["DAGLINE_SIGNAL_TOKEN"]
        assert token.startswith("dgl_")

        stop_task(pg_db, run.run_id, "serve", now=clock.now())
        # the driver pod is deleted with the task's stopGracePeriod (no spark-operator webhook needed); the
        # application stays until the pod has stopped, so the try goes on while its driver finishes
        pod = f"{name}-driver"
        iterate_until(scheduler, lambda: (NS, pod, 20) in kube.call(lambda em: em.pod_deletions),
                      "the driver pod is deleted with a 20 s grace period")
        scheduler.iterate()
        assert tis(pg_db, run.id)["serve"].state == "running"
        assert kube.get(APPS, NS, name)["metadata"].get("deletionTimestamp") is None
        kube.call(lambda em: em.end_pod(NS, pod))  # the kubelet: the driver exited within its grace period
        iterate_until(scheduler, lambda: tis(pg_db, run.id)["serve"].state == "success", "the stopped try ends")
        assert kube.get(APPS, NS, name, missing_ok=True) is None
        assert kube.get("secrets", NS, f"{name}-env", missing_ok=True) is None
        iterate_until(scheduler, lambda: runs(pg_db, "serving")[0]["state"] == "success", "the run ends")
    finally:
        scheduler.stop()
    assert len(spark_operator.submissions) == 1
    assert_invariants(pg_db)


def _running_streaming_try(kube, make_executor, clock, grace_s=45):
    executor = make_executor()
    launch = launch_of(ti_id=11)
    launch = TaskLaunch(ti_id=11, key=launch.key, job=launch.job, streaming=True, stop_grace_s=grace_s)
    executor.launch([launch])
    name = name_of(launch)
    pod = f"{name}-driver"
    kube.create("pods", NS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": NS},
                             "spec": {"containers": [{"name": "spark-kubernetes-driver", "image": "spark"}]}})
    set_state(kube, name, "RUNNING", pod=pod)
    assert states(executor.sync()) == [(11, 1, "running")]
    return executor, launch, name, pod


def test_a_streaming_stop_gives_the_driver_its_grace_period_without_the_spark_operators_webhook(
        kube, make_executor, clock):
    executor, launch, name, pod = _running_streaming_try(kube, make_executor, clock, grace_s=45)

    executor.cancel(launch.key)
    assert kube.call(lambda em: em.pod_deletions) == [(NS, pod, 45)]
    clock.advance(dt.timedelta(seconds=30))  # past the 30 s a pod gets by default: still stopping
    assert executor.sync() == []
    assert kube.get(APPS, NS, name)["metadata"].get("deletionTimestamp") is None  # kept while its driver stops
    assert kube.get("pods", NS, pod)["metadata"]["deletionGracePeriodSeconds"] == 45

    kube.call(lambda em: em.end_pod(NS, pod))  # the driver stopped its queries and exited
    [report] = executor.sync()
    assert (report.state, report.message) == (
        "failed", f"cancelled: driver pod {pod} stopped (SIGTERM, then up to 45s); SparkApplication deleted")
    assert kube.get(APPS, NS, name, missing_ok=True) is None


def test_a_driver_that_outlives_its_grace_period_ends_the_stop_and_its_application_is_deleted(
        kube, make_executor, clock):
    executor, launch, name, pod = _running_streaming_try(kube, make_executor, clock, grace_s=45)

    executor.cancel(launch.key)
    executor.cancel(launch.key)  # asked again (a second stop): the stop under way goes on, no second delete
    assert kube.call(lambda em: em.pod_deletions) == [(NS, pod, 45)]
    clock.advance(dt.timedelta(seconds=45 + 14))
    assert executor.sync() == [] and executor.free_slots() == 3  # the slot stays taken while it may still run
    clock.advance(dt.timedelta(seconds=2))  # the grace period and the kubelet's slack have passed
    [report] = executor.sync()
    assert report.state == "failed" and report.message.startswith("cancelled:")
    assert kube.get(APPS, NS, name, missing_ok=True) is None


def test_a_batch_try_is_cancelled_by_deleting_its_application_at_once(kube, make_executor, clock):
    executor = make_executor()
    launch = launch_of(ti_id=12)
    executor.launch([launch])
    set_state(kube, name_of(launch), "RUNNING")
    executor.sync()
    executor.cancel(launch.key)
    assert kube.get(APPS, NS, name_of(launch), missing_ok=True) is None
    assert kube.call(lambda em: em.pod_deletions) == []
    assert [r.message for r in executor.sync()] == ["cancelled: SparkApplication deleted"]

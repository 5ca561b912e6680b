"""Spark Connect tasks on Kubernetes (ADR 0086): the `spark-k8s` executor against the emulator, with the
spark-operator's own SparkConnect CRD installed (its schema prunes and validates what dagline creates) and
a stand-in for the SparkConnect controller and the kubelet (`tests.helpers.k8s.spark_connect`), which runs
each try's Pod command -- dagline's launcher and the job -- as a local process.

Time is a `FixedClock` the tests move; nothing sleeps to wait for the executor.
"""

from __future__ import annotations

import datetime as dt
import gzip
import pathlib
import textwrap

import pytest
import yaml

from dagline.clock import FixedClock
from dagline.executors.base import SparkJob, TaskKey, TaskLaunch
from dagline.k8s import sparkapp, sparkconnect
from dagline.k8s.client import load_api_client
from dagline.k8s.executor import SparkK8sExecutor, SparkK8sSettings
from dagline.store.runs import trigger_run
from tests.helpers.harness import apply, assert_invariants, events, tis, write_dag
from tests.helpers.k8s.spark_connect import SparkConnectOperator
from tests.helpers.polling import run_until_done, wait_for

NS = "default"
START = dt.datetime(2026, 3, 2, 2, 0, tzinfo=dt.timezone.utc)
CRD = pathlib.Path(__file__).parents[1] / "unit" / "data" / "sparkoperator.k8s.io_sparkconnects.yaml.gz"
SERVERS = "sparkconnects"


@pytest.fixture
def clock():
    return FixedClock(START)


@pytest.fixture
def connect_kube(kube):
    """The emulator with the spark-operator's SparkConnect CRD (as the spark-operator chart installs it)."""
    crd = yaml.safe_load(gzip.decompress(CRD.read_bytes()))
    kube.call(lambda em: em.install_crds([crd]))
    return kube


@pytest.fixture
def connect_operator(connect_kube, tmp_path):
    operator = SparkConnectOperator(connect_kube, "instant", logs=tmp_path / "connect-logs").start()
    try:
        yield operator
    finally:
        operator.stop()
    assert not operator.errors, operator.errors


@pytest.fixture
def make_executor(connect_kube, clock):
    made = []

    def make(**settings):
        settings = {"namespace": NS, "connect_client_image": "registry.example/jobs:7", **settings}
        executor = SparkK8sExecutor(SparkK8sSettings(**settings), parallelism=4, clock=clock,
                                    api_client=load_api_client(), list_interval_s=0.0, retry_interval_s=0.0,
                                    idle_check_interval_s=0.0)
        executor.start()
        made.append(executor)
        return executor

    yield make
    for executor in made:
        executor.end()


def job_file(tmp_path, body: str, name="job.py") -> str:
    path = tmp_path / "jobs" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(textwrap.dedent(body))
    return f"local://{path}"


def launch_of(main: str, *, task="load", try_number=1, ti_id=7, **job) -> TaskLaunch:
    return TaskLaunch(ti_id=ti_id, key=TaskKey("sales", "manual__1", task, try_number),
                      job=SparkJob(main, connect=True, **job),
                      env=(("DAGLINE_API_URL", "http://dagline-api:8793"), ("DAGLINE_SIGNAL_TOKEN", "try-token")))


def sync_until(executor, what, *, timeout=60.0):
    """Sync until a report arrives; the reports of that sync."""
    return wait_for(executor.sync, what, timeout=timeout)


def test_a_try_waits_for_its_dags_server_then_runs_as_a_pod_with_its_secret(connect_kube, connect_operator,
                                                                             make_executor, tmp_path):
    connect_operator.hold()
    executor = make_executor()
    main = job_file(tmp_path, """\
        import os, sys
        print("remote", os.environ["SPARK_REMOTE"])
        print("token", os.environ["DAGLINE_SIGNAL_TOKEN"], "args", sys.argv[1:])
    """)
    launch = launch_of(main, arguments=("--ds", "2026-03-01"),
                       connect_server={"cores": 2, "memory": "2g", "executor": {"instances": 2}})
    executor.launch([launch])

    [server] = wait_for(lambda: connect_kube.list(SERVERS, NS), "the DAG's SparkConnect")
    name = server["metadata"]["name"]
    assert server["spec"]["server"]["cores"] == 2 and server["spec"]["executor"]["instances"] == 2
    assert server["metadata"]["labels"] == {"dagline.io/dag": "sales", "dagline.io/namespace": "default",
                                            "dagline.io/managed-by": "dagline"}
    assert executor.sync() == [] and connect_kube.list("pods", NS, label_selector="dagline.io/task") == []

    connect_operator.hold(False)  # the server is Ready: the try's Pod is created, its Secret after it
    reports = sync_until(executor, "the try to start")
    while all(r.state == "running" for r in reports):
        reports = sync_until(executor, "the try to end")
    assert [r.state for r in reports][-1] == "success"
    pod_name = sparkapp.application_name(launch.key)
    assert reports[-1].external_id == f"{NS}/{pod_name}"
    log = (tmp_path / "connect-logs" / f"{NS}.{pod_name}.log").read_text()
    assert f"remote sc://{name}-server.{NS}.svc:15002" in log
    assert "token try-token args ['--ds', '2026-03-01']" in log
    [secret] = connect_kube.list("secrets", NS, label_selector="dagline.io/task=load")
    assert secret["metadata"]["ownerReferences"][0]["kind"] == "Pod"  # it goes with the Pod
    [one] = connect_kube.list(SERVERS, NS)  # the server stays for the DAG's next tries
    assert sparkconnect.last_used(one) == START


def test_a_failed_pod_fails_the_try_with_the_jobs_last_line(connect_kube, connect_operator, make_executor, tmp_path):
    executor = make_executor()
    main = job_file(tmp_path, """\
        raise ValueError("no orders for 2026-03-01")
    """)
    launch = launch_of(main)
    executor.launch([launch])
    final = None
    while final is None:
        final = next((r for r in sync_until(executor, "the try to end") if r.state != "running"), None)
    assert final.state == "failed"
    assert final.message.startswith(f"Spark Connect driver pod {sparkapp.application_name(launch.key)} failed: "
                                    f"exit code 1 (Error): ")
    assert final.message.endswith("ValueError: no orders for 2026-03-01")
    executor.sync()  # kept for its log (delete-succeeded), relabelled once its report was recorded
    [pod] = connect_kube.list("pods", NS, label_selector="dagline.io/task=load")
    assert pod["metadata"]["labels"]["dagline.io/outcome"] == "failed"


def test_a_server_never_ready_fails_the_try_at_the_pending_timeout(connect_kube, connect_operator, make_executor,
                                                                   clock, tmp_path):
    connect_operator.hold()
    executor = make_executor(pending_timeout_s=600)
    executor.launch([launch_of(job_file(tmp_path, "print('never')\n"))])
    wait_for(lambda: connect_kube.list(SERVERS, NS), "the DAG's SparkConnect")
    wait_for(lambda: executor.sync() == [] and next(iter(executor.servers.known.values())).state.startswith("NotReady"),
             "the server seen NotReady")
    clock.instant += dt.timedelta(seconds=601)
    [report] = executor.sync()
    assert report.state == "failed"
    assert "Spark Connect server default/sales-" in report.message and "was not Ready 10m after launch" in report.message
    assert "NotReady" in report.message


def test_cancel_deletes_the_pod_and_its_job_is_stopped(connect_kube, connect_operator, make_executor, tmp_path):
    executor = make_executor()
    marker = tmp_path / "stopped"
    main = job_file(tmp_path, f"""\
        import signal, sys, time
        def stop(*_):
            open({str(marker)!r}, "w").write("SIGTERM")
            sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
        print("running", flush=True)
        time.sleep(60)
    """)
    launch = launch_of(main)
    executor.launch([launch])
    assert [r.state for r in sync_until(executor, "the try to run")] == ["running"]
    log = tmp_path / "connect-logs" / f"{NS}.{sparkapp.application_name(launch.key)}.log"
    wait_for(lambda: log.exists() and "running" in log.read_text(), "the job to handle SIGTERM")
    executor.cancel(launch.key)
    [report] = executor.sync()
    assert (report.state, report.message) == ("failed", "cancelled: Pod deleted")
    wait_for(marker.exists, "the job to get SIGTERM")
    assert connect_kube.list("pods", NS, label_selector="dagline.io/task=load") == []


def test_an_idle_server_is_deleted_and_the_next_try_makes_it_again(connect_kube, connect_operator, make_executor,
                                                                   clock, tmp_path):
    executor = make_executor(connect_idle_timeout_s=1800)
    main = job_file(tmp_path, "print('done')\n")
    executor.launch([launch_of(main)])
    while "success" not in [r.state for r in sync_until(executor, "try 1 to end")]:
        pass
    executor.sync()
    assert len(connect_kube.list(SERVERS, NS)) == 1

    clock.instant += dt.timedelta(minutes=29)
    executor.sync()
    assert len(connect_kube.list(SERVERS, NS)) == 1  # used 29 minutes ago: kept
    clock.instant += dt.timedelta(minutes=2)
    executor.sync()
    assert connect_kube.list(SERVERS, NS) == []      # idle 31 minutes: deleted

    executor.launch([launch_of(main, try_number=2, ti_id=8)])
    while "success" not in [r.state for r in sync_until(executor, "try 2 to end")]:
        pass
    [server] = connect_kube.list(SERVERS, NS)
    assert sparkconnect.last_used(server) == clock.now()


def test_a_server_marked_in_use_while_it_is_found_idle_is_kept(connect_kube, connect_operator, make_executor,
                                                               clock, tmp_path, monkeypatch):
    executor = make_executor(connect_idle_timeout_s=60)
    executor.launch([launch_of(job_file(tmp_path, "print('done')\n"))])
    while "success" not in [r.state for r in sync_until(executor, "the try to end")]:
        pass
    [server] = connect_kube.list(SERVERS, NS)
    clock.instant += dt.timedelta(minutes=5)
    pods, real_list = executor._pods(), executor._pods().list

    def list_then_another_replica_marks_it(selector):
        found = real_list(selector)  # no try on it: idle, as far as this replica can tell
        connect_kube.patch(SERVERS, NS, server["metadata"]["name"], {"metadata": {"annotations": {
            sparkconnect.ANNOTATION_LAST_USED: clock.now().isoformat()}}})
        return found

    monkeypatch.setattr(pods, "list", list_then_another_replica_marks_it)
    executor.sync()
    assert [s["metadata"]["name"] for s in connect_kube.list(SERVERS, NS)] == [server["metadata"]["name"]]


CONNECT_DAG = """\
    apiVersion: dagline.io/v1alpha1
    kind: DAG
    metadata: {{name: warm}}
    spec:
      paused: false
      schedule: null
      defaults:
        retries: 1
        retryDelay: PT5M
        spark:
          connect: true
          connectServer: {{cores: 1, memory: 2g, executor: {{instances: 2, memory: 1g}}}}
      tasks:
        - id: load
          spark:
            mainApplicationFile: {main}
            arguments: ["--try", "{{{{ try_number }}}}"]
"""


def test_a_connect_dag_runs_on_its_server_and_a_failed_try_is_retried(db, connect_kube, connect_operator,
                                                                        make_executor, clock, tmp_path):
    main = job_file(tmp_path, """\
        import os, sys
        print("token set:", bool(os.environ.get("DAGLINE_SIGNAL_TOKEN")), "remote:", os.environ["SPARK_REMOTE"])
        if sys.argv[1:] == ["--try", "1"]:
            raise ValueError("flaky input")
    """, name="load.py")
    apply(db, write_dag(tmp_path, CONNECT_DAG.format(main=main)))
    trigger_run(db, "warm", now=clock.now())
    run = run_until_done(db, make_executor(), clock, "warm", api_url="http://dagline-api.default.svc:8793")

    assert run["state"] == "success"
    ti = tis(db, run["id"])["load"]
    assert (ti.state, ti.try_number) == ("success", 2)
    [retry] = [e for e in events(db, entity="task_instance") if e.to_state == "up_for_retry"]
    assert "exit code 1 (Error): builtins.ValueError: flaky input" in retry.detail
    [server] = connect_kube.list(SERVERS, NS)  # one server for the DAG, sized from its spec, used by both tries
    assert server["spec"]["server"] == {"cores": 1, "memory": "2g", "template": server["spec"]["server"]["template"]}
    assert server["spec"]["executor"]["instances"] == 2 and server["spec"]["executor"]["memory"] == "1g"
    assert connect_kube.list("sparkapplications", NS) == []  # no SparkApplication for a Connect task
    pods = connect_kube.list("pods", NS, label_selector="dagline.io/dag=warm,dagline.io/task=load")
    assert [p["metadata"]["labels"]["dagline.io/try"] for p in pods] == ["1"]  # try 1 kept (failed), 2 deleted
    key2 = TaskKey("warm", run["run_id"], "load", 2)
    log = (tmp_path / "connect-logs" / f"{NS}.{sparkapp.application_name(key2)}.log").read_text()
    assert f"token set: True remote: sc://{server['metadata']['name']}-server.{NS}.svc:15002" in log
    # `dagline tasks logs` reads a Connect try's log from its Pod, as a SparkApplication's from its driver pod
    from click.testing import CliRunner

    from dagline.cli import main as cli

    url = db.engine.url.render_as_string(hide_password=False)
    shown = CliRunner().invoke(cli, ["--db", url, "tasks", "logs", run["run_id"], "load", "--try", "1"])
    assert shown.exit_code == 0, shown.output
    assert "builtins.ValueError: flaky input" in shown.output
    assert_invariants(db)


def test_a_real_pyspark_job_runs_on_a_spark_connect_server(connect_kube, make_executor, clock, tmp_path):
    operator = SparkConnectOperator(connect_kube, "pyspark", logs=tmp_path / "connect-logs").start()
    try:
        out = tmp_path / "out.txt"
        main = job_file(tmp_path, f"""\
            from pyspark.sql import SparkSession
            spark = SparkSession.builder.getOrCreate()
            n = spark.range(1000).selectExpr("id % 3 AS k").groupBy("k").count().count()
            partitions = spark.conf.get("spark.sql.shuffle.partitions")
            open({str(out)!r}, "w").write(f"{{n}} {{partitions}}")
        """)
        executor = make_executor(pending_timeout_s=300)
        launch = launch_of(main, conf=(("spark.sql.shuffle.partitions", "3"),))
        executor.launch([launch])
        final = None
        while final is None:
            final = next((r for r in sync_until(executor, "the job to end", timeout=420) if r.state != "running"),
                         None)
        assert final.state == "success", final.message
        assert out.read_text() == "3 3"  # the job ran on the server, with the task's session conf
    finally:
        operator.stop()
    assert not operator.errors, operator.errors


def test_without_the_sparkconnect_crd_a_connect_try_fails_saying_what_is_missing(kube, clock, tmp_path):
    executor = SparkK8sExecutor(SparkK8sSettings(namespace=NS, connect_client_image="jobs:1"), parallelism=2,
                                clock=clock, api_client=load_api_client(), list_interval_s=0.0, retry_interval_s=0.0)
    executor.start()
    try:
        executor.launch([launch_of(job_file(tmp_path, "print('x')\n"))])
        [report] = executor.sync()
    finally:
        executor.end()
    assert report.state == "failed"
    assert "refused the SparkConnect sales-" in report.message and "sparkconnects.sparkoperator.k8s.io" in report.message


def test_a_restarted_replica_adopts_a_running_connect_try_instead_of_launching_it_again(
        connect_kube, connect_operator, make_executor, tmp_path):
    go = tmp_path / "go"
    main = job_file(tmp_path, f"""\
        import os, time
        while not os.path.exists({str(go)!r}):
            time.sleep(0.05)
        print("finished")
    """)
    launch = launch_of(main)
    first = make_executor()
    first.launch([launch])
    assert [r.state for r in sync_until(first, "the try to run")] == ["running"]
    first.end()  # the replica stops; the Pod runs on

    second = make_executor()
    assert second.adopt([launch]) == []  # its Pod exists and names this try: followed, not launched again
    assert second.adopt([launch_of(main, try_number=2, ti_id=8)]) != []  # no Pod: back to the scheduler
    go.write_text("")
    reports = []
    while "success" not in [r.state for r in reports]:
        reports += sync_until(second, "the adopted try to end")
    assert len(connect_kube.list("pods", NS, label_selector="dagline.io/task=load")) <= 1
    assert len(connect_operator.jobs) == 1  # one Pod ran, once

"""Spark Connect in the spec: `spark.connect` per task and as the DAG's default, static confs refused for
Connect tasks (naming the key), unchanged versions for DAGs that do not use it, and the server's settings."""

from __future__ import annotations

import pytest

from dagline.errors import InvalidInput
from dagline.executors.base import SparkJob, TaskKey, TaskLaunch
from dagline.executors.connect_server import ConnectSettings, read_connect_settings
from dagline.executors.local import connect_job_command
from dagline.spec import Dag, parse_dag_yaml, spec_version
from dagline.spec.connect import is_static_conf

DAG = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {{name: warm}}
spec:
{defaults}
  tasks:
    - {{id: a, spark: {{mainApplicationFile: a.py{a}}}}}
    - {{id: b, upstream: [a], spark: {{mainApplicationFile: b.py{b}}}}}
"""


def parse(defaults: str = "", a: str = "", b: str = "") -> Dag:
    (document,) = parse_dag_yaml(DAG.format(defaults=defaults, a=a, b=b))
    return Dag.from_document(document)


def test_spark_submit_is_the_default_and_connect_is_chosen_per_dag_and_per_task():
    assert [t.connect for t in parse().tasks.values()] == [False, False]
    dag = parse(defaults="  defaults: {spark: {connect: true}}", b=", connect: false")
    assert (dag.tasks["a"].connect, dag.tasks["b"].connect) == (True, False)
    assert parse(a=", connect: true").tasks["a"].connect is True


def test_a_dag_that_does_not_use_connect_keeps_its_version():
    plain = parse()
    assert "connect" not in plain.spec_json["tasks"][0]["spark"] and "spark" not in plain.spec_json["defaults"]
    assert plain.version == spec_version(plain.spec)
    assert parse(a=", connect: true").version != plain.version
    assert parse(defaults="  defaults: {spark: {connect: true}}").version != plain.version


def test_the_dags_connect_server_size_is_a_new_version_and_reaches_its_connect_tries_only():
    with_connect = parse(defaults="  defaults: {spark: {connect: true}}")
    assert "connectServer" not in with_connect.spec_json["defaults"]["spark"]  # unset: the version it always had
    sized = parse(defaults="  defaults: {spark: {connect: true, connectServer: {cores: 2, memory: 4g, "
                           "executor: {instances: 3}}}}", b=", connect: false")
    assert sized.version != with_connect.version and sized.version == spec_version(sized.spec)
    assert Dag.from_spec_json("warm", sized.spec_json).version == sized.version
    from dagline.scheduler.launches import spark_job

    job_a = spark_job(sized.tasks["a"], {})
    assert job_a.connect_server == {"cores": 2, "memory": "4g", "executor": {"instances": 3}}
    assert spark_job(sized.tasks["b"], {}).connect_server is None  # a spark-submit task has no server


def test_a_bad_connect_server_size_is_refused_naming_the_field():
    with pytest.raises(InvalidInput, match=r"connectServer\.memory|connectServer.*memory"):
        parse(defaults="  defaults: {spark: {connect: true, connectServer: {memory: lots}}}")
    with pytest.raises(InvalidInput, match="driver"):
        parse(defaults="  defaults: {spark: {connectServer: {driver: {cores: 1}}}}")


@pytest.mark.parametrize("setting, field", [
    (", conf: {spark.executor.memory: 4g}", 'spec.tasks[0].spark.conf["spark.executor.memory"]'),
    (", conf: {spark.jars: x.jar}", 'spec.tasks[0].spark.conf["spark.jars"]'),
    (", conf: {spark.sql.warehouse.dir: /w}", 'spec.tasks[0].spark.conf["spark.sql.warehouse.dir"]'),
    (", driver: {cores: 2}", "spec.tasks[0].spark.driver.cores"),
    (", executor: {instances: 3}", "spec.tasks[0].spark.executor.instances"),
])
def test_a_static_conf_of_a_connect_task_is_refused_naming_the_key(setting, field):
    with pytest.raises(InvalidInput) as caught:
        parse(defaults="  defaults: {spark: {connect: true}}", a=setting)
    assert field in str(caught.value) and "Spark Connect" in str(caught.value)
    assert caught.value.exit_code == 2


def test_runtime_confs_are_allowed_and_static_ones_stay_allowed_for_spark_submit_tasks():
    parse(a=", connect: true, conf: {spark.sql.shuffle.partitions: '4', spark.sql.session.timeZone: UTC}")
    parse(a=", conf: {spark.executor.memory: 4g}, driver: {memory: 1g}")  # spark-submit: fine
    assert not is_static_conf("spark.sql.shuffle.partitions") and is_static_conf("spark.driver.extraJavaOptions")


def test_a_connect_try_runs_its_job_with_python_and_its_session_confs():
    job = SparkJob("jobs/a.py", arguments=("--ds", "2026-01-01"), conf=(("spark.sql.shuffle.partitions", "4"),),
                   connect=True)
    cmd = connect_job_command(TaskLaunch(1, TaskKey("d", "r", "a", 1), job))
    assert "spark-submit" not in " ".join(cmd)
    assert cmd[1:] == ["-m", "dagline.executors.connect_job", "--conf", "spark.sql.shuffle.partitions=4", "--",
                       "jobs/a.py", "--ds", "2026-01-01"]


def test_connect_server_settings_come_from_the_environment_and_bad_ones_name_their_variable():
    assert read_connect_settings({}) == ConnectSettings()
    chosen = read_connect_settings({"DAGLINE_CONNECT_PORT": "15002", "DAGLINE_CONNECT_DRIVER_MEMORY": "2g",
                                    "DAGLINE_CONNECT_CORES": "4", "DAGLINE_CONNECT_START_TIMEOUT": "60"})
    assert chosen == ConnectSettings(port=15002, driver_memory="2g", cores=4, start_timeout_s=60.0)
    for name, value in (("DAGLINE_CONNECT_PORT", "70000"), ("DAGLINE_CONNECT_DRIVER_MEMORY", "lots"),
                        ("DAGLINE_CONNECT_CORES", "two"), ("DAGLINE_CONNECT_START_TIMEOUT", "0")):
        with pytest.raises(InvalidInput) as caught:
            read_connect_settings({name: value})
        assert caught.value.field == name

"""SparkApplications of tries without an API: names, label values, the manifest, state mapping, and the
`spark-k8s` executor's settings read from `DAGLINE_SPARK_*`."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from dagline.errors import InvalidInput
from dagline.executors.base import SparkJob, TaskKey, TaskLaunch
from dagline.k8s import sparkapp
from dagline.k8s.executor import SparkK8sSettings
from dagline.k8s.sparkapp import Phase

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LAUNCHED = dt.datetime(2026, 3, 2, 2, 0, tzinfo=dt.timezone.utc)
SCHEDULED = "scheduled__2026-03-01T00:00:00+00:00"

AWKWARD_KEYS = [
    TaskKey("sales-daily", SCHEDULED, "clean_orders", 1),
    TaskKey("7-day-report", "manual__2026-03-01T10:15:00.123456+00:00", "Top.Products", 2),
    TaskKey("d" * 63, "backfill__" + "x" * 200, "_" + "T" * 120 + "_", 12),
    TaskKey("a", "r", "___", 1),
    TaskKey("a", "r", "-", 1),
    TaskKey("a-team/sales-daily", SCHEDULED, "clean_orders", 1),  # a DAG of namespace a-team (its key)
    TaskKey("n" * 63 + "/" + "d" * 63, SCHEDULED, "t", 1),
]


def launch_for(key=AWKWARD_KEYS[0], **job) -> TaskLaunch:
    fields = {"main_application_file": "local:///opt/jobs/clean.py", "arguments": ("--ds", "2026-03-01"),
              "conf": (("spark.sql.shuffle.partitions", "4"),)}
    fields.update(job)
    return TaskLaunch(ti_id=41, key=key, job=SparkJob(**fields))


def manifest(launch: TaskLaunch, **options) -> dict:
    args = {"namespace": "jobs", "default_image": "spark:3.5.3", "service_account": "spark",
            "spark_version": "3.5.3", "launched_at": LAUNCHED}
    args.update(options)
    return sparkapp.build_manifest(launch, **args)


# -- names ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", AWKWARD_KEYS)
def test_application_names_are_short_dns_1035_labels(key):
    name = sparkapp.application_name(key)
    assert DNS_1035.match(name), name
    assert len(name) <= 56  # the operator's `<name>-ui-svc` Service must stay within 63
    assert name == sparkapp.application_name(TaskKey(key.dag_id, key.run_id, key.task_id, key.try_number))


def test_application_names_read_as_dag_task_and_try():
    assert re.fullmatch(r"sales-daily-clean-orders-[0-9a-f]{12}-1", sparkapp.application_name(AWKWARD_KEYS[0]))
    assert sparkapp.application_name(AWKWARD_KEYS[1]).startswith("dl-7-day-report-top-products-")


def test_every_part_of_a_try_changes_its_name_even_where_the_readable_part_is_the_same():
    base = TaskKey("etl", "manual__a:b", "load_x", 1)
    variants = [base, TaskKey("etl", "manual__a_b", "load_x", 1), TaskKey("etl", "manual__a:b", "load-x", 1),
                TaskKey("etl", "manual__a:b", "load_x", 2), TaskKey("etl", "other", "load_x", 1)]
    assert len({sparkapp.application_name(k) for k in variants}) == len(variants)


def test_tries_of_one_task_instance_differ_only_in_the_try_suffix():
    first = sparkapp.application_name(TaskKey("etl", SCHEDULED, "load", 1))
    second = sparkapp.application_name(TaskKey("etl", SCHEDULED, "load", 2))
    assert first[:-2] == second[:-2] and first.endswith("-1") and second.endswith("-2")


# -- labels --------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [SCHEDULED, "clean_orders", "_leading.and.trailing_", "x" * 64, "::", "é-ü",
                                  "manual__2026-03-01T10:15:00.123456+00:00" * 3])
def test_label_values_are_always_valid(text):
    value = sparkapp.label_value(text)
    assert LABEL_VALUE.match(value) and value, value
    assert len(value) <= 63


def test_label_values_keep_valid_text_and_show_what_they_replaced():
    assert sparkapp.label_value("clean_orders") == "clean_orders"
    assert sparkapp.label_value(SCHEDULED) == "scheduled__2026-03-01T00_00_00_00_00"


def test_long_label_values_end_in_a_digest_of_the_whole_text():
    a, b = "backfill__" + "x" * 80 + "a", "backfill__" + "x" * 80 + "b"
    assert sparkapp.label_value(a) != sparkapp.label_value(b)
    assert sparkapp.label_value(a).startswith("backfill__xxx")


def test_try_labels_are_valid_for_awkward_ids_and_annotations_keep_the_originals():
    key = AWKWARD_KEYS[2]
    doc = manifest(launch_for(key))
    for name, value in doc["metadata"]["labels"].items():
        assert LABEL_VALUE.match(value) and len(value) <= 63, (name, value)
    assert doc["metadata"]["annotations"]["dagline.io/run-id"] == key.run_id
    assert doc["metadata"]["annotations"]["dagline.io/task-id"] == key.task_id
    assert sparkapp.same_try(doc, key)
    assert not sparkapp.same_try(doc, TaskKey(key.dag_id, key.run_id, key.task_id, key.try_number + 1))


def test_a_dag_of_another_namespace_is_labelled_by_namespace_and_name_and_annotated_with_its_key():
    key = TaskKey("a-team/sales-daily", SCHEDULED, "clean_orders", 1)
    doc = manifest(launch_for(key))
    labels, annotations = doc["metadata"]["labels"], doc["metadata"]["annotations"]
    assert (labels["dagline.io/namespace"], labels["dagline.io/dag"]) == ("a-team", "sales-daily")
    assert annotations["dagline.io/dag-id"] == "a-team/sales-daily"
    assert "/" not in doc["metadata"]["name"] and re.fullmatch(r"a-team-sales-daily-clean-orders-[0-9a-f]{12}-1",
                                                                doc["metadata"]["name"])
    # the same name in another namespace is another application
    assert doc["metadata"]["name"] != sparkapp.application_name(TaskKey("b-team/sales-daily", SCHEDULED,
                                                                        "clean_orders", 1))
    assert sparkapp.same_try(doc, key) and not sparkapp.same_try(doc, TaskKey("sales-daily", SCHEDULED,
                                                                              "clean_orders", 1))


# -- the manifest --------------------------------------------------------------------------------


def test_manifest_of_a_try():
    launch = launch_for(driver_cores=1, driver_memory="1g", executor_instances=2, executor_cores=2,
                        executor_memory="2g", image="registry.example/etl:7")
    doc = manifest(launch)
    labels = {"dagline.io/namespace": "default", "dagline.io/dag": "sales-daily",
              "dagline.io/run": "scheduled__2026-03-01T00_00_00_00_00",
              "dagline.io/task": "clean_orders", "dagline.io/try": "1"}
    assert doc == {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {
            "name": sparkapp.application_name(launch.key),
            "namespace": "jobs",
            "labels": {**labels, "dagline.io/managed-by": "dagline", "dagline.io/outcome": "pending"},
            "annotations": {"dagline.io/dag-id": "sales-daily", "dagline.io/run-id": SCHEDULED,
                            "dagline.io/task-id": "clean_orders", "dagline.io/try-number": "1",
                            "dagline.io/ti-id": "41", "dagline.io/launched-at": "2026-03-02T02:00:00+00:00"},
        },
        "spec": {
            "type": "Python",
            "mode": "cluster",
            "sparkVersion": "3.5.3",
            "image": "registry.example/etl:7",
            "mainApplicationFile": "local:///opt/jobs/clean.py",
            "arguments": ["--ds", "2026-03-01"],
            "sparkConf": {"spark.sql.shuffle.partitions": "4"},
            "restartPolicy": {"type": "Never"},
            "driver": {"serviceAccount": "spark", "labels": labels, "cores": 1, "memory": "1g"},
            "executor": {"labels": labels, "instances": 2, "cores": 2, "memory": "2g"},
        },
    }
    assert sparkapp.launched_at(doc) == LAUNCHED


def test_manifest_uses_the_default_image_and_leaves_unset_sizes_to_the_operator():
    spec = manifest(launch_for())["spec"]
    assert spec["image"] == "spark:3.5.3"
    assert set(spec["driver"]) == {"serviceAccount", "labels"}
    assert set(spec["executor"]) == {"labels"}


@pytest.mark.parametrize("path", ["jobs/clean.py", "clean.py", "./clean.py"])
def test_a_relative_application_file_cannot_run_on_kubernetes(path):
    with pytest.raises(sparkapp.ManifestError, match=r"spark\.mainApplicationFile .*relative"):
        manifest(launch_for(main_application_file=path))


@pytest.mark.parametrize("path", ["local:///opt/jobs/a.py", "s3a://bucket/jobs/a.py", "/opt/jobs/a.py"])
def test_paths_and_uris_the_driver_can_read_are_accepted(path):
    assert manifest(launch_for(main_application_file=path))["spec"]["mainApplicationFile"] == path


# -- states --------------------------------------------------------------------------------------


def app(state=None, error=None, pod=None) -> dict:
    status: dict = {}
    if state is not None:
        status["applicationState"] = {"state": state, **({"errorMessage": error} if error else {})}
    if pod:
        status["driverInfo"] = {"podName": pod}
    return {"metadata": {"name": "x"}, "status": status} if status else {"metadata": {"name": "x"}}


@pytest.mark.parametrize(("state", "phase"), [
    (None, Phase.WAITING), ("", Phase.WAITING), ("SUBMITTED", Phase.WAITING), ("PENDING_RERUN", Phase.WAITING),
    ("INVALIDATING", Phase.WAITING), ("UNKNOWN", Phase.WAITING), ("SOMETHING_NEW", Phase.WAITING),
    ("RUNNING", Phase.RUNNING), ("SUCCEEDING", Phase.RUNNING), ("FAILING", Phase.RUNNING),
    ("COMPLETED", Phase.SUCCESS), ("FAILED", Phase.FAILED), ("SUBMISSION_FAILED", Phase.FAILED),
])
def test_every_operator_state_has_a_meaning(state, phase):
    assert sparkapp.observe(app(state)).phase == phase


# api/v1beta2 ApplicationStateType of kubeflow/spark-operator (main at 38082f33, chart 2.x): every value.
OPERATOR_STATES = ("", "SUBMITTED", "RUNNING", "COMPLETED", "FAILED", "SUBMISSION_FAILED", "PENDING_RERUN",
                   "INVALIDATING", "SUCCEEDING", "FAILING", "SUSPENDING", "SUSPENDED", "RESUMING", "UNKNOWN")


def test_no_state_of_the_spark_operator_falls_through_to_the_default():
    assert set(OPERATOR_STATES) == set(sparkapp.STATE_PHASES)


@pytest.mark.parametrize("state", ["SUSPENDING", "SUSPENDED", "RESUMING"])
def test_a_suspended_application_keeps_its_try_launched(state):
    """Suspended by a queue (Kueue preempting it): neither a failure nor a success; it will be resumed."""
    observed = sparkapp.observe(app(state))
    assert observed.phase == Phase.WAITING and observed.message is None


def test_a_failure_carries_the_operators_message_and_the_driver_pod():
    seen = sparkapp.observe(app("FAILED", "driver container failed with ExitCode: 1, Reason: Error",
                                "etl-load-driver"))
    assert seen.message == ("SparkApplication FAILED: driver container failed with ExitCode: 1, Reason: Error "
                            "(driver pod etl-load-driver)")
    assert sparkapp.observe(app("SUBMISSION_FAILED")).message == "SparkApplication SUBMISSION_FAILED (no error message)"


def test_a_huge_error_message_is_shortened():
    message = sparkapp.observe(app("SUBMISSION_FAILED", "spark-submit said:\n" + "log line\n" * 5000)).message
    assert len(message) <= sparkapp.MESSAGE_MAX and message.endswith("...")
    assert "\n" not in message


# -- settings ------------------------------------------------------------------------------------


def test_settings_defaults(tmp_path):
    settings = SparkK8sSettings.from_env({}, namespace_file=str(tmp_path / "absent"))
    assert settings == SparkK8sSettings(namespace="default", image="spark:3.5.3", service_account="spark",
                                        pending_timeout_s=600.0, retention="delete-succeeded", spark_version="3.5.3")


def test_settings_take_the_pods_namespace_and_every_variable(tmp_path):
    ns_file = tmp_path / "namespace"
    ns_file.write_text("data-team\n")
    assert SparkK8sSettings.from_env({}, namespace_file=str(ns_file)).namespace == "data-team"
    env = {"DAGLINE_SPARK_NAMESPACE": "jobs", "DAGLINE_SPARK_IMAGE": "registry.example/etl:7",
           "DAGLINE_SPARK_SERVICE_ACCOUNT": "spark-runner", "DAGLINE_SPARK_PENDING_TIMEOUT": "PT2M",
           "DAGLINE_SPARK_RETENTION": "keep", "DAGLINE_SPARK_SPARK_VERSION": "3.5.1",
           "DAGLINE_SPARK_KEEP_FINISHED": "PT2H"}
    assert SparkK8sSettings.from_env(env, namespace_file=str(ns_file)) == SparkK8sSettings(
        namespace="jobs", image="registry.example/etl:7", service_account="spark-runner", pending_timeout_s=120.0,
        retention="keep", keep_finished_s=7200.0, spark_version="3.5.1")


def test_the_default_image_follows_the_spark_version(tmp_path):
    settings = SparkK8sSettings.from_env({"DAGLINE_SPARK_SPARK_VERSION": "3.4.4"}, namespace_file=str(tmp_path))
    assert settings.image == "spark:3.4.4"


@pytest.mark.parametrize(("timeout", "seconds"), [("90", 90.0), ("2.5", 2.5), ("PT10M", 600.0), ("P1D", 86400.0)])
def test_pending_timeout_in_seconds_or_iso_8601(timeout, seconds, tmp_path):
    env = {"DAGLINE_SPARK_PENDING_TIMEOUT": timeout}
    assert SparkK8sSettings.from_env(env, namespace_file=str(tmp_path)).pending_timeout_s == seconds


@pytest.mark.parametrize(("variable", "value"), [
    ("DAGLINE_SPARK_NAMESPACE", "Data_Team"),
    ("DAGLINE_SPARK_IMAGE", "spark 3.5"),
    ("DAGLINE_SPARK_SERVICE_ACCOUNT", "Spark!"),
    ("DAGLINE_SPARK_PENDING_TIMEOUT", "ten minutes"),
    ("DAGLINE_SPARK_PENDING_TIMEOUT", "0"),
    ("DAGLINE_SPARK_PENDING_TIMEOUT", "-5"),
    ("DAGLINE_SPARK_RETENTION", "forever"),
    ("DAGLINE_SPARK_SPARK_VERSION", "latest"),
    ("DAGLINE_SPARK_PREFLIGHT_INTERVAL", "hourly"),
    ("DAGLINE_SPARK_KEEP_FINISHED", "-1"),
    ("DAGLINE_SPARK_CONNECT_SPARK_VERSION", "newest"),
    ("DAGLINE_SPARK_CONNECT_IMAGE", "spark 4"),
    ("DAGLINE_SPARK_CONNECT_CLIENT_IMAGE", "jobs py"),
    ("DAGLINE_SPARK_CONNECT_IDLE_TIMEOUT", "0"),
])
def test_an_invalid_setting_names_its_variable(variable, value, tmp_path):
    with pytest.raises(InvalidInput) as info:
        SparkK8sSettings.from_env({variable: value}, namespace_file=str(tmp_path))
    assert info.value.field == variable
    assert variable in str(info.value) and repr(value) in str(info.value)


# -- placement -------------------------------------------------------------------------------------


def test_the_task_pod_fields_reach_the_driver_and_the_executors_and_volumes_the_application():
    pod = {"tolerations": [{"key": "dedicated", "value": "spark", "effect": "NoSchedule"}],
           "nodeSelector": {"pool": "spark"},
           "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
           "podSecurityContext": {"runAsNonRoot": True}, "securityContext": {"allowPrivilegeEscalation": False},
           "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}
    volumes = ({"name": "scratch", "emptyDir": {}},)
    app = manifest(launch_for(pod=pod, volumes=volumes))
    for role in ("driver", "executor"):
        assert {k: app["spec"][role][k] for k in pod} == pod
    assert app["spec"]["volumes"] == [{"name": "scratch", "emptyDir": {}}]
    assert app["spec"]["driver"]["serviceAccount"] == "spark"  # the platform's, unless the task names one
    app["spec"]["driver"]["tolerations"].append({"key": "x"})  # the manifest shares nothing with the job
    assert pod["tolerations"] == [{"key": "dedicated", "value": "spark", "effect": "NoSchedule"}]
    assert app["spec"]["executor"]["tolerations"] == pod["tolerations"]


def test_a_task_without_pod_fields_gets_none_of_them():
    spec = manifest(launch_for())["spec"]
    assert "volumes" not in spec
    assert not {"tolerations", "nodeSelector", "affinity", "volumeMounts"} & (spec["driver"].keys() | spec["executor"].keys())


def test_the_task_driver_service_account_replaces_the_platform_one_on_the_driver_only():
    spec = manifest(launch_for(driver_service_account="team-spark"))["spec"]
    assert spec["driver"]["serviceAccount"] == "team-spark"
    assert "serviceAccount" not in spec["executor"]


def test_the_platform_pod_security_applies_unless_the_task_sets_the_same_field():
    default = {"podSecurityContext": {"runAsNonRoot": True}, "securityContext": {"allowPrivilegeEscalation": False}}
    spec = manifest(launch_for(pod={"securityContext": {"readOnlyRootFilesystem": True}}), pod_security=default)["spec"]
    for role in ("driver", "executor"):
        assert spec[role]["podSecurityContext"] == {"runAsNonRoot": True}
        assert spec[role]["securityContext"] == {"readOnlyRootFilesystem": True}


@pytest.mark.parametrize("text", ["{", "[]", '{"podSecurityContext": 1}', '{"affinity": {}}'])
def test_a_bad_pod_security_setting_names_the_variable(text):
    with pytest.raises(InvalidInput) as exc:
        SparkK8sSettings.from_env({"DAGLINE_SPARK_NAMESPACE": "jobs", "DAGLINE_SPARK_POD_SECURITY": text})
    assert exc.value.field == "DAGLINE_SPARK_POD_SECURITY"


def test_the_pod_security_setting_is_read():
    settings = SparkK8sSettings.from_env({"DAGLINE_SPARK_NAMESPACE": "jobs",
                                          "DAGLINE_SPARK_POD_SECURITY": '{"podSecurityContext": {"fsGroup": 185}}'})
    assert settings.pod_security == {"podSecurityContext": {"fsGroup": 185}}
    assert SparkK8sSettings.from_env({"DAGLINE_SPARK_NAMESPACE": "jobs"}).pod_security is None

"""Secrets a DAG may read (issue 26, item 2): the rules of `dagline.domain.secrets`, the local sources
(`LocalSecrets`: the secret variables of the environment and the secrets file), and a task's `env` in
the spec (refused names, defaults merged by name, versions of DAGs without `env` unchanged)."""

from __future__ import annotations

import pytest

from dagline.domain.secrets import job_environment, parse_dotenv, secret_variable
from dagline.errors import InvalidInput
from dagline.executors.base import TaskVariable
from dagline.executors.secret_sources import LocalSecrets, SecretNotFound
from dagline.spec import Dag, normalized_spec, parse_dag_yaml

SCHEDULER_ENV = {
    "PATH": "/usr/bin", "HOME": "/home/dagline", "PYTHONPATH": "/opt/src",
    "DAGLINE_DB_URL": "postgresql://dagline:hunter2@db/dagline", "DAGLINE_API_TOKENS": "admin:dgl_admin",
    "dagline_lower": "x", "PGPASSWORD": "hunter2", "KUBECONFIG": "/root/.kube/config",
    "SECRET_WAREHOUSE__PASSWORD": "w-pass", "SECRET_OTHER__TOKEN": "o-token",
}


def test_a_local_jobs_environment_keeps_nothing_of_the_schedulers_settings_or_other_secrets():
    env = job_environment(SCHEDULER_ENV, try_env=[("DAGLINE_API_URL", "http://127.0.0.1:8793"),
                                                  ("DAGLINE_SIGNAL_TOKEN", "dgl_1_try"), ("DAGLINE_DB_URL", "no")],
                          task_env=[("DB_PASSWORD", "w-pass"), ("PGPASSWORD", "job-own")])
    assert env == {"PATH": "/usr/bin", "HOME": "/home/dagline", "PYTHONPATH": "/opt/src",
                   "DAGLINE_API_URL": "http://127.0.0.1:8793", "DAGLINE_SIGNAL_TOKEN": "dgl_1_try",
                   "DB_PASSWORD": "w-pass", "PGPASSWORD": "job-own"}


def test_secret_key_refs_map_to_prefixed_variables():
    assert secret_variable("hooks", "token") == "SECRET_HOOKS__TOKEN"
    assert secret_variable("team-a.db", "pass-word", "APP_") == "APP_TEAM_A_DB__PASS_WORD"


def test_secret_variables_come_from_the_environment_first_then_the_file(tmp_path):
    file = tmp_path / "secrets.env"
    file.write_text("# the team's secrets\nexport SECRET_HOOKS__TOKEN='from-file'\nSECRET_ONLY_FILE=\"f\"\n"
                    "DAGLINE_DB_URL=sqlite:///stolen.db\n\n")
    secrets = LocalSecrets.from_env({**SCHEDULER_ENV, "SECRET_HOOKS__TOKEN": "from-env",
                                     "DAGLINE_SECRETS_FILE": str(file)})
    assert secrets.secret_key("hooks", "token") == "from-env"
    assert secrets.variable("SECRET_ONLY_FILE") == "f"
    for name in ("DAGLINE_DB_URL", "DAGLINE_API_TOKENS", "PGPASSWORD", "PATH"):
        with pytest.raises(SecretNotFound, match=f"variable {name} is not a secret variable"):
            secrets.variable(name)
    with pytest.raises(SecretNotFound, match=r"secretKeyRef hooks/url \(read as SECRET_HOOKS__URL.*not set in"):
        secrets.secret_key("hooks", "url")
    assert secrets.resolve_env([TaskVariable("A", "1"), TaskVariable("B", secret=("warehouse", "password"))]) == (
        ("A", "1"), ("B", "w-pass"))


def test_a_broken_secrets_file_is_named(tmp_path):
    file = tmp_path / "secrets.env"
    file.write_text("SECRET_A=1\nthis is not a line\n")
    secrets = LocalSecrets.from_env({"DAGLINE_SECRETS_FILE": str(file)})
    with pytest.raises(SecretNotFound, match="secrets.env.*line 2 is not KEY=value"):
        secrets.variable("SECRET_A")
    with pytest.raises(SecretNotFound, match="cannot be read"):
        LocalSecrets.from_env({"DAGLINE_SECRETS_FILE": str(tmp_path / "none.env")}).variable("SECRET_A")
    assert parse_dotenv("A=b=c\n") == {"A": "b=c"}


@pytest.mark.parametrize("prefix", ["DAGLINE_", "DAGLINE_SECRET_", "D", "dag", "PG", "KUBE", "1X", "A-B"])
def test_a_prefix_that_could_reach_the_schedulers_settings_is_refused_naming_the_setting(prefix):
    with pytest.raises(InvalidInput) as caught:
        LocalSecrets.from_env({"DAGLINE_SECRET_PREFIX": prefix})
    assert caught.value.field == "DAGLINE_SECRET_PREFIX"


def test_another_prefix_can_be_declared():
    secrets = LocalSecrets.from_env({"DAGLINE_SECRET_PREFIX": "SALES_", "SALES_HOOK": "h", "SECRET_X": "x"})
    assert secrets.variable("SALES_HOOK") == "h"
    with pytest.raises(SecretNotFound, match="start with SALES_"):
        secrets.variable("SECRET_X")


def _dag(tasks: str, defaults: str = "{}") -> str:
    return f"""
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {{name: envs}}
spec:
  defaults: {defaults}
  tasks: {tasks}
"""


def test_task_env_adds_to_the_defaults_and_wins_for_the_same_name():
    (doc,) = parse_dag_yaml(_dag(
        "[{id: a, env: [{name: STAGE, value: test}, {name: DB, valueFrom: {secretKeyRef: {name: wh, key: pw}}}],"
        " spark: {mainApplicationFile: a.py}}, {id: b, spark: {mainApplicationFile: b.py}}]",
        "{env: [{name: STAGE, value: prod}, {name: REGION, value: eu}]}"))
    dag = Dag.from_document(doc)
    assert [(v.name, v.value) for v in dag.tasks["a"].env] == [("STAGE", "test"), ("REGION", "eu"), ("DB", None)]
    assert dag.tasks["a"].env[2].value_from.secret_key_ref.name == "wh"
    assert [(v.name, v.value) for v in dag.tasks["b"].env] == [("STAGE", "prod"), ("REGION", "eu")]
    stored = normalized_spec(doc.spec)
    assert Dag.from_spec_json("envs", stored).tasks["a"].env == dag.tasks["a"].env


def test_a_dag_without_env_keeps_its_version():
    (doc,) = parse_dag_yaml(_dag("[{id: a, spark: {mainApplicationFile: a.py}}]"))
    stored = normalized_spec(doc.spec)
    assert "env" not in stored["defaults"] and "env" not in stored["tasks"][0]


@pytest.mark.parametrize("env, field, message", [
    ("[{name: DAGLINE_SIGNAL_TOKEN, value: x}]", "spec.tasks[0].env[0].name", "DAGLINE_* variables are dagline's own"),
    ("[{name: dagline_db_url, value: x}]", "spec.tasks[0].env[0].name", "DAGLINE_*"),
    ("[{name: 1ABC, value: x}]", "spec.tasks[0].env[0].name", "not a valid name"),
    ("[{name: A, value: x, valueFrom: {secretKeyRef: {name: s, key: k}}}]", "spec.tasks[0].env[0]", "exactly one"),
    ("[{name: A}]", "spec.tasks[0].env[0]", "exactly one of value or valueFrom"),
    ("[{name: A, value: x}, {name: A, value: y}]", "spec.tasks[0].env", "A is given twice"),
    ("[{name: A, valueFrom: {env: SECRET_A}}]", "spec.tasks[0].env[0].valueFrom", "env"),
])
def test_bad_task_env_is_refused_naming_the_field(env, field, message):
    with pytest.raises(InvalidInput) as caught:
        parse_dag_yaml(_dag(f"[{{id: a, env: {env}, spark: {{mainApplicationFile: a.py}}}}]"))
    assert field in str(caught.value) and message in str(caught.value)


@pytest.mark.parametrize("name", ["DAGLINE_DB_URL", "DAGLINE_API_TOKENS", "dagline_db_url", "PGPASSWORD", "KUBECONFIG"])
def test_a_callback_reading_a_scheduler_setting_is_refused_naming_the_field(name):
    text = _dag("[{id: a, spark: {mainApplicationFile: a.py}}]").replace(
        "  defaults: {}", "  callbacks: [{events: [failure], webhook: {url: 'https://h.example.com/x', headers: "
                          f"[{{name: X-Db, valueFrom: {{env: {name}}}}}]}}}}]")
    with pytest.raises(InvalidInput) as caught:
        parse_dag_yaml(text)
    assert "spec.callbacks[0].webhook.headers[0].valueFrom.env" in str(caught.value)
    assert "scheduler's own settings" in str(caught.value)

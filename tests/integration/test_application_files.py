"""A task's `mainApplicationFile` stays inside its home (issue 27, ADR 64): a file beside the DAG file or
in a configured jobs folder, symlinks resolved; on Kubernetes only URIs the driver reads from the image
or from storage. Refused at apply with exit 2 (an `Invalid` DAG object), naming the field, nothing stored."""

from __future__ import annotations

import datetime as dt
import os

import pytest

from dagline.k8s.dags import apply_dag_object
from dagline.times import UTC
from tests.helpers.cli import cli, snapshot
from tests.helpers.dags import dag, task, write

FIELD = "spec.tasks[0].spark.mainApplicationFile"


@pytest.mark.parametrize("app", ["/etc/passwd", "../../../etc/passwd", "file:///etc/passwd", "local:///etc/passwd",
                                 "jobs/../../outside.py", "ftp://example.com/job.py", "http://example.com/job.py"])
def test_main_application_file_of_etc_passwd_is_accepted(db, tmp_path, app):
    """The finding: `/etc/passwd` or `../../../etc/passwd` was accepted and passed to spark-submit."""
    folder = tmp_path / "dags"
    folder.mkdir()
    before = snapshot(db)
    result = cli(db, "dags", "apply", write(folder, dag("leaky", task("a", app=app))), expect=2)
    assert FIELD in result.output and "task a" in result.output
    assert snapshot(db) == before


def test_a_symlink_out_of_the_dag_folder_is_refused_and_a_jobs_folder_is_allowed(db, tmp_path, monkeypatch):
    folder, jobs = tmp_path / "dags", tmp_path / "shared-jobs"
    folder.mkdir()
    jobs.mkdir()
    (jobs / "clean.py").write_text("print('clean')\n")
    os.symlink("/etc", folder / "etc")
    refused = cli(db, "dags", "apply", write(folder, dag("leaky", task("a", app="etc/passwd"))), expect=2)
    assert FIELD in refused.output and "resolves to /etc/passwd" in refused.output
    outside = cli(db, "dags", "apply", write(folder, dag("shared", task("a", app=str(jobs / "clean.py")))), expect=2)
    assert "DAGLINE_JOBS_FOLDER" in outside.output

    monkeypatch.setenv("DAGLINE_JOBS_FOLDER", str(jobs))
    assert "created" in cli(db, "dags", "apply", write(folder, dag("shared", task("a", app=str(jobs / "clean.py"))))).output
    os.symlink(jobs / "clean.py", folder / "linked.py")  # a link to a jobs folder's file, from the DAG's folder
    beside = dag("beside", task("a", app="jobs/a.py"), task("b", app="linked.py"), task("c", app="s3a://bucket/c.py"))
    assert "created" in cli(db, "dags", "apply", write(folder, beside)).output


@pytest.mark.parametrize(("app", "accepted"), [
    ("local:///opt/jobs/clean.py", True), ("s3a://bucket/clean.py", True), ("gs://bucket/clean.py", True),
    ("abfss://c@account.dfs.core.windows.net/clean.py", True), ("hdfs://nn:8020/jobs/clean.py", True),
    ("https://example.com/clean.py", True), ("/etc/passwd", False), ("../../../etc/passwd", False),
    ("clean.py", False), ("file:///etc/passwd", False), ("http://example.com/clean.py", False),
])
def test_on_kubernetes_only_uris_are_accepted(db, app, accepted):
    body = {**dag("k8s-app", task("a", app=app)), "metadata": {"name": "k8s-app", "namespace": "team-a",
                                                               "generation": 1}}
    before = snapshot(db)
    outcome = apply_dag_object(db, body, now=dt.datetime(2026, 3, 1, tzinfo=UTC), who="test")
    [condition] = [c for c in outcome.status["conditions"] if c["type"] == "Ready"]
    if accepted:
        assert condition["status"] == "True", condition
    else:
        assert condition["reason"] == "Invalid" and FIELD in condition["message"], condition
        assert snapshot(db) == before

"""Every try gets `DAGLINE_API_URL` and a token of its own when it is launched; the token sends signals
as that try, and stops working when the try ends (SQLite and PostgreSQL, the real scheduler loop)."""

from __future__ import annotations

import datetime as dt

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from dagline.api import create_app
from dagline.clock import FixedClock
from dagline.db.models import api_token_t, signal_t
from dagline.executors.noop import NoopExecutor
from dagline.scheduler.loop import Scheduler
from dagline.store.runs import trigger_run
from dagline.store.tokens import delete_ended_try_tokens
from tests.helpers.harness import apply, write_dag

NOW = dt.datetime(2026, 5, 1, tzinfo=dt.timezone.utc)
DAG = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: train}
spec:
  schedule: null
  paused: false
  tasks:
    - id: fit
      spark: {mainApplicationFile: fit.py}
    - id: publish
      upstream: [fit]
      spark: {mainApplicationFile: publish.py}
"""


class SignallingNoop(NoopExecutor):
    """The noop executor, whose every "job" sends one signal with the environment it was given."""

    def __init__(self, api: TestClient, **kwargs):
        super().__init__(**kwargs)
        self.api, self.envs, self.answers = api, [], []

    def launch(self, launches):
        for launch in launches:
            env = dict(launch.env)
            self.envs.append(env)
            self.answers.append(self.api.post(
                "/api/v1/signals", json={"key": "job.said", "value": launch.key.task_id},
                headers={"Authorization": f"Bearer {env['DAGLINE_SIGNAL_TOKEN']}"}).status_code)
        super().launch(launches)


def test_each_try_sends_as_itself_until_it_ends(db, tmp_path):
    apply(db, write_dag(tmp_path, DAG))
    run = trigger_run(db, "train", now=NOW)
    clock = FixedClock(NOW)
    api = TestClient(create_app(db, clock=clock))
    executor = SignallingNoop(api, parallelism=4, clock=clock)
    Scheduler(db, executor, clock=clock, api_url="http://dagline-api:8793").run(until_idle=True)

    assert [e["DAGLINE_API_URL"] for e in executor.envs] == ["http://dagline-api:8793"] * 2
    tokens = [e["DAGLINE_SIGNAL_TOKEN"] for e in executor.envs]
    assert len(set(tokens)) == 2 and all(t.startswith("dgl_") for t in tokens)
    assert executor.answers == [201, 201]
    with db.begin() as conn:
        sent = conn.execute(select(signal_t.c.value, signal_t.c.source, signal_t.c.source_dag_run_id)
                            .where(signal_t.c.key == "job.said").order_by(signal_t.c.seq)).all()
        stored_hashes = set(conn.execute(select(api_token_t.c.secret_hash)).scalars())
    assert [(s.value, s.source) for s in sent] == [
        ('"fit"', f"try:train/{run.run_id}/fit/1"), ('"publish"', f"try:train/{run.run_id}/publish/1")]
    assert {s.source_dag_run_id for s in sent} == {run.id}
    assert not any(t.split("_", 2)[2] in h for t in tokens for h in stored_hashes)  # only hashes are stored

    late = api.post("/api/v1/signals", json={"key": "job.said", "value": "late"},
                    headers={"Authorization": f"Bearer {tokens[0]}"})
    assert late.status_code == 401 and "expired" in late.json()["error"]  # and deleted by housekeeping
    with db.begin() as conn:
        assert conn.execute(select(func.count()).select_from(signal_t).where(signal_t.c.key == "job.said")
                            ).scalar_one() == 2
        delete_ended_try_tokens(conn)  # what housekeeping does every few seconds
        assert conn.execute(select(func.count()).select_from(api_token_t)).scalar_one() == 0


RETRIED = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: retried}
spec:
  schedule: null
  paused: false
  tasks:
    - id: fit
      retries: 1
      retryDelay: PT0S
      spark:
        mainApplicationFile: fit.py
        conf: {dagline.noop.outcome: "{{ 'failed' if try_number == 1 else 'success' }}"}
"""


class RetryingNoop(NoopExecutor):
    """The noop executor; when it launches a task's second try, the first try's token (kept from its
    launch) and the second's each try to send a signal."""

    def __init__(self, api: TestClient, **kwargs):
        super().__init__(**kwargs)
        self.api, self.tokens, self.answers = api, {}, {}

    def launch(self, launches):
        for launch in launches:
            self.tokens[launch.key.try_number] = dict(launch.env)["DAGLINE_SIGNAL_TOKEN"]
            if launch.key.try_number == 2:
                for try_number in (1, 2):
                    answer = self.api.post("/api/v1/signals", json={"key": "job.said", "value": try_number},
                                           headers={"Authorization": f"Bearer {self.tokens[try_number]}"})
                    self.answers[try_number] = (answer.status_code, answer.json())
        super().launch(launches)


def test_a_tries_token_is_refused_while_the_same_task_instance_runs_its_next_try(db, tmp_path):
    apply(db, write_dag(tmp_path, RETRIED))
    run = trigger_run(db, "retried", now=NOW)
    clock = FixedClock(NOW)
    api = TestClient(create_app(db, clock=clock))
    executor = RetryingNoop(api, parallelism=4, clock=clock)
    Scheduler(db, executor, clock=clock, api_url="http://dagline-api:8793").run(until_idle=True)

    assert sorted(executor.tokens) == [1, 2] and executor.tokens[1] != executor.tokens[2]
    status, body = executor.answers[1]
    assert status == 401 and "expired" in body["error"]  # try 1 has ended, though its task instance runs
    assert executor.answers[2][0] == 201
    with db.begin() as conn:
        sent = conn.execute(select(signal_t.c.value, signal_t.c.source).where(signal_t.c.key == "job.said")).all()
    assert [(s.value, s.source) for s in sent] == [("2", f"try:retried/{run.run_id}/fit/2")]

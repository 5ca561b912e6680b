"""Helpers for the operator tests: manifests, a replica (real kopf + `Runtime`) on the emulator, reading state back.

`replica(kube, run_kopf, db, executor=..., clock=...)` runs one operator replica: real kopf (standalone,
in its own thread, watching `default`) with `dagline.k8s.handlers`, plus the runtime's status sync,
probe servers and (with an executor) the scheduler loop in threads, all against `db`. Time is a
`FixedClock`; tests wait for observable conditions with `kube.wait_for`, never a fixed sleep.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import urllib.error
import urllib.request

import kopf
from sqlalchemy import select

from dagline.clock import FixedClock
from dagline.db.models import backfill_t, dag_run_t, dag_t
from dagline.k8s import handlers
from dagline.k8s.client import load_api_client
from dagline.k8s.runtime import Runtime
from dagline.k8s.settings import OperatorSettings
from dagline.scheduler.settings import SchedulerSettings
from tests.helpers import dags

NS = "default"
API = "dagline.io/v1alpha1"
START = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)


def task(task_id: str, *upstream: str, **extra) -> dict:
    """A task whose job is in the image (`local:///jobs/<id>.py`), given the run's date."""
    return dags.task(task_id, *upstream, app=f"local:///jobs/{task_id}.py", spark={"arguments": ["--ds", "{{ ds }}"]},
                     **extra)


def dag_manifest(name: str = "daily", *, schedule: str | None = "@daily", tasks=None, annotations=None,
                 **spec) -> dict:
    return dags.dag(name, *(tasks or [task("extract"), task("load", "extract")]), schedule=schedule,
                    metadata={"annotations": annotations} if annotations else None,
                    **{"startDate": "2026-03-01T00:00:00", **spec})


def dagrun_manifest(name: str, dag: str = "daily", **spec) -> dict:
    return {"apiVersion": API, "kind": "DagRun", "metadata": {"name": name}, "spec": {"dag": dag, **spec}}


def backfill_manifest(name: str, dag: str = "daily", start: str = "2026-03-01", end: str = "2026-03-03",
                      **spec) -> dict:
    return {"apiVersion": API, "kind": "Backfill", "metadata": {"name": name},
            "spec": {"dag": dag, "start": start, "end": end, **spec}}


def pool_manifest(name: str, slots: int, **spec) -> dict:
    return {"apiVersion": API, "kind": "Pool", "metadata": {"name": name}, "spec": {"slots": slots, **spec}}


def settings(**overrides) -> OperatorSettings:
    values = dict(namespace=NS, health_port=0, metrics_port=0, status_interval_s=0.1, liveness_timeout_s=30.0,
                  dagrun_history_limit=50, executor="noop", api_port=0)
    values.update(overrides)
    return OperatorSettings(**values)


FAST_LOOP = SchedulerSettings(poll_interval_s=0.05, heartbeat_interval_s=1.0, housekeeping_interval_s=1.0,
                              replica_timeout_s=30.0)


@contextlib.contextmanager
def replica(run_kopf, db, *, executor=None, clock=None, namespace: str | None = NS, **overrides):
    """One operator replica serving `namespace` (None: every namespace); yields its `Runtime`."""
    runtime = Runtime(settings(namespace=namespace, **overrides), db, executor=executor,
                      clock=clock or FixedClock(START), api_client=load_api_client(), scheduler_settings=FAST_LOOP)
    with run_kopf(handlers, namespace, memo=kopf.Memo(runtime=runtime)):
        yield runtime
    assert not runtime.failed, runtime.health.scheduler_error


def condition(obj: dict | None, type_: str) -> dict | None:
    for found in ((obj or {}).get("status") or {}).get("conditions") or ():
        if found.get("type") == type_:
            return found
    return None


def is_ready(obj: dict | None) -> bool:
    return (condition(obj, "Ready") or {}).get("status") == "True"


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def dag_row(db, dag_id: str):
    with db.begin() as conn:
        return conn.execute(select(dag_t).where(dag_t.c.dag_id == dag_id)).first()


def run_rows(db, dag_id: str) -> list:
    with db.begin() as conn:
        return conn.execute(select(dag_run_t).where(dag_run_t.c.dag_id == dag_id).order_by(dag_run_t.c.logical_date,
                                                                                           dag_run_t.c.id)).all()


def backfill_rows(db) -> list:
    with db.begin() as conn:
        return conn.execute(select(backfill_t).order_by(backfill_t.c.id)).all()


def managed_dagruns(kube, dag: str | None = None) -> list[dict]:
    selector = "dagline.io/managed-by=dagline" + (f",dagline.io/dag={dag}" if dag else "")
    return kube.list("dagruns", NS, label_selector=selector)

"""Operator status mirroring: how soon the runs of freshly applied DAG objects show as DagRun objects in
Kubernetes, how many status writes that takes, and what a pass of the status sync costs once all is quiet.

    python bench/k8s_mirror.py [--dags 20] [--days 10] [--status-interval 0.5] [--passes 10] [--keep-request-log]

One operator replica (real kopf, the scheduler loop with the noop executor and the status sync, in this
process: `tests.helpers.k8s.operator_harness.replica`) against the Kubernetes emulator of the tests
(`tests.helpers.k8s.cluster.Cluster`, over HTTP) and a fresh PostgreSQL database ($DAGLINE_TEST_POSTGRES_URL).
Time is a `FixedClock` `--days` days and an hour after every DAG's startDate, so each @daily DAG has
`--days` scheduled runs due at once; the DagRun history limit keeps them all.

runs_done_s / mirror_s: the first DAG object created -> every run succeeded in the database / and every
run shown by its DagRun object with status.state "success" (polled every 50 ms; the objects are read in
the emulator's memory, not over HTTP). status_patches_per_run: the sync's status patches (DAG objects'
too) over the whole scenario, per run; api_requests: the requests the emulator served meanwhile
(kopf's, the replica's, the DAG creations). steady_sync_ms: `--passes` explicit `runtime.sync.sync()`
passes once settled (the background sync keeps running); steady_sync_writes: status patches and DagRun
creations in that window (expected 0), steady_sync_written: which fields they wrote.

The emulator (kmock 0.8) matches every request against its whole log of past requests, so a request
costs O(requests served so far): left alone, after a thousand requests each create or patch takes
~0.1-0.3 s and the figures measure kmock. The benchmark therefore empties that log at every poll
(no reaction here counts requests); `--keep-request-log` keeps it, to see the difference.
Prints one JSON line. Not a test: figures depend on the machine.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # `common`, and the repository for `tests.k8s`

import argparse  # noqa: E402
import collections  # noqa: E402
import datetime as dt  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from common import fresh_database, percentiles  # noqa: E402
from sqlalchemy import select  # noqa: E402

from dagline.clock import FixedClock  # noqa: E402
from dagline.db.models import dag_run_t  # noqa: E402
from dagline.executors.noop import NoopExecutor  # noqa: E402
from tests.helpers.k8s.cluster import Cluster  # noqa: E402
from tests.helpers.k8s.kopf_runner import run_kopf  # noqa: E402
from tests.helpers.k8s.operator_harness import NS, START, dag_manifest, replica  # noqa: E402

POLL_S = 0.05


def wait(condition, what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench/k8s_mirror.py: timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(POLL_S)


def point_kubernetes_client_at(cluster: Cluster) -> None:
    """What the tests' `kube` fixture does: kopf's login and the client's import-time default read the kubeconfig."""
    import kubernetes.config.kube_config

    os.environ["KUBECONFIG"] = str(cluster.kubeconfig_path)
    kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION = str(cluster.kubeconfig_path)
    kubernetes.config.KUBE_CONFIG_DEFAULT_LOCATION = str(cluster.kubeconfig_path)


class RequestLog:
    """The emulator's log of served requests: counted, and emptied at every `count()` unless `keep`."""

    def __init__(self, kube: Cluster, keep: bool):
        self.kube, self.keep, self.served = kube, keep, 0
        self._logged = kube.call(lambda em: len(em._requests))

    def count(self) -> int:
        """The requests served since this object was made."""
        def take(em) -> int:
            logged = len(em._requests)
            if not self.keep:
                em._requests.clear()  # between two requests: the emulator's loop runs this
            return logged

        logged = self.kube.call(take)
        self.served += logged - self._logged
        self._logged = logged if self.keep else 0
        return self.served


def succeeded_runs(db, dag_ids: list[str]) -> set[tuple[str, str]] | None:
    """Every run of these DAGs as (dag_id, run_id) if all have succeeded, else None."""
    with db.begin() as conn:
        rows = conn.execute(select(dag_run_t.c.dag_id, dag_run_t.c.run_id, dag_run_t.c.state)
                            .where(dag_run_t.c.dag_id.in_(dag_ids))).all()
    return {(r.dag_id, r.run_id) for r in rows} if rows and all(r.state == "success" for r in rows) else None


def mirrors(kube: Cluster) -> dict[tuple[str, str], str | None]:
    """(dag, runId) -> status.state of the DagRun objects dagline manages, read in the emulator's memory."""
    def read(em) -> dict[tuple[str, str], str | None]:
        return {(raw["spec"]["dag"], raw["spec"]["runId"]): (raw.get("status") or {}).get("state")
                for res, namespace, _name, raw in em._all_live()
                if res is not None and res.plural == "dagruns" and namespace == NS
                and (raw["metadata"].get("labels") or {}).get("dagline.io/managed-by") == "dagline"}
    return kube.call(read)


def record_writes(objects) -> collections.Counter:
    """Count, from now on, what the sync's API client writes: `dagruns.status.state`, `dagruns created`..."""
    written = collections.Counter()
    patch_status, create = objects.patch_status, objects.create

    def counted_patch(plural, namespace, name, status):
        written.update(f"{plural}.status.{key}" for key in status)
        return patch_status(plural, namespace, name, status)

    def counted_create(plural, body):
        written[f"{plural} created"] += 1
        return create(plural, body)

    objects.patch_status, objects.create = counted_patch, counted_create
    return written


def run(db, kube: Cluster, dags: int, days: int, status_interval_s: float, passes: int, timeout_s: float,
        keep_request_log: bool) -> dict:
    clock = FixedClock(START + dt.timedelta(days=days, hours=1))
    dag_ids = [f"daily-{i:03d}" for i in range(dags)]
    expected = dags * days
    executor = NoopExecutor(parallelism=64, clock=clock)
    with replica(functools.partial(run_kopf, kube), db, executor=executor, clock=clock,
                 status_interval_s=status_interval_s, dagrun_history_limit=max(50, 2 * days)) as runtime:
        requests = RequestLog(kube, keep_request_log)
        began = time.monotonic()
        for dag_id in dag_ids:
            kube.create("dags", NS, dag_manifest(dag_id))
        runs: set[tuple[str, str]] = set()
        runs_done_s = None

        def mirrored() -> bool:
            nonlocal runs, runs_done_s
            requests.count()
            runs = succeeded_runs(db, dag_ids) or set()
            if len(runs) < expected:
                return False
            runs_done_s = runs_done_s or time.monotonic() - began
            shown = mirrors(kube)
            return all(shown.get(run) == "success" for run in runs)

        wait(mirrored, f"{expected} runs to succeed and show as success in their DagRun objects", timeout_s)
        mirror_s = time.monotonic() - began
        patches = runtime.sync.stats.status_patches
        served = requests.count()

        # Settled: a background pass has run since (its watch cache has caught up with the last writes).
        beat = runtime.health.sync_beat
        wait(lambda: runtime.health.sync_beat != beat, "a background status sync pass", timeout_s)
        written = record_writes(runtime.sync.objects)
        writes_before = runtime.sync.stats.status_patches + runtime.sync.stats.dagruns_created
        timings = []
        for _ in range(passes):
            start = time.perf_counter()
            runtime.sync.sync()
            timings.append((time.perf_counter() - start) * 1000)
        steady_writes = runtime.sync.stats.status_patches + runtime.sync.stats.dagruns_created - writes_before
        objects = len(mirrors(kube))
    if kube.server_errors:
        raise SystemExit(f"bench/k8s_mirror.py: the Kubernetes emulator failed inside: {kube.server_errors!r}")
    steady = percentiles(timings)
    return {"dags": dags, "runs": len(runs), "dagrun_objects": objects, "status_interval_s": status_interval_s,
            "keep_request_log": keep_request_log, "runs_done_s": round(runs_done_s, 3), "mirror_s": round(mirror_s, 3),
            "runs_mirrored_per_s": round(len(runs) / mirror_s, 1),
            "status_patches_per_run": round(patches / len(runs), 2), "api_requests": served,
            "steady_sync_ms": {"p50": steady["p50"], "max": steady["max"], "passes": passes},
            "steady_sync_writes": steady_writes, "steady_sync_written": dict(written)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dags", type=int, default=20)
    parser.add_argument("--days", type=int, default=10, help="scheduled runs due per DAG")
    parser.add_argument("--status-interval", type=float, default=0.5, help="seconds between two status syncs")
    parser.add_argument("--passes", type=int, default=10, help="steady sync passes to time")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for each condition")
    parser.add_argument("--keep-request-log", action="store_true",
                        help="leave the emulator's request log alone (every request then costs O(requests so far))")
    args = parser.parse_args()
    db, drop = fresh_database("postgres")
    try:
        with tempfile.TemporaryDirectory(prefix="dagline-bench-kube-") as folder:
            kube = Cluster(pathlib.Path(folder)).start()
            try:
                point_kubernetes_client_at(kube)
                result = run(db, kube, args.dags, args.days, args.status_interval, args.passes, args.timeout,
                             args.keep_request_log)
            finally:
                kube.stop()
    finally:
        drop()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

"""Watches that go quiet (issue 28, item 5): kopf opens a new stream and catches up; `/healthz` fails,
naming the kind and the object, when no new stream can be opened (docs/adr/0082).

The emulator freezes watch streams as a load balancer that drops long connections silently does:
nothing more reaches them, and they never end by themselves.
"""

from __future__ import annotations

import kopf

from dagline.k8s import handlers
from dagline.k8s.settings import OperatorSettings
from tests.helpers import prometheus
from tests.helpers.k8s.operator_harness import NS, dag_manifest, dag_row, http_get, is_ready, replica


def _freeze_the_dags_watch(kube, *, new_ones: bool = False) -> None:
    """Freeze the open DAG watch (waiting until one is open: kopf may be between two streams)."""
    kube.wait_for(lambda: kube.call(lambda em: em.freeze_watches("dags", new_ones=new_ones)), timeout=10,
                  what="an open DAG watch frozen")


def test_kopf_gets_the_watch_timeouts_from_the_settings():
    settings = OperatorSettings.from_env({"DAGLINE_WATCH_TIMEOUT": "600", "DAGLINE_WATCH_INACTIVITY_TIMEOUT": "90",
                                          "DAGLINE_WATCH_CONNECT_TIMEOUT": "10"})
    kopf_settings = kopf.OperatorSettings()
    handlers.watch_settings(kopf_settings, settings)
    watching = kopf_settings.watching
    assert (watching.server_timeout, watching.client_timeout, watching.connect_timeout,
            watching.inactivity_timeout) == (600, 630, 10, 90)
    defaults = OperatorSettings.from_env({})
    assert (defaults.watch_timeout_s, defaults.watch_inactivity_timeout_s, defaults.watch_connect_timeout_s,
            defaults.list_interval_s) == (300, 70, 30, 60)
    assert defaults.watch_bound_s == 70 + 60  # the inactivity timeout, plus the liveness timeout as slack


def test_a_watch_gone_quiet_is_renewed_and_brings_the_dag_created_meanwhile(kube, run_kopf, pg_db):
    with replica(run_kopf, pg_db, watch_inactivity_timeout_s=1.0, list_interval_s=0.2) as runtime:
        _freeze_the_dags_watch(kube)
        kube.create("dags", NS, dag_manifest("late"))
        ready = kube.wait_for(lambda: kube.get("dags", NS, "late"), until=is_ready, timeout=30,
                              what="the DAG created after the freeze applied")
        assert ready["status"]["version"] == 1 and dag_row(pg_db, "late").is_active
        assert http_get(runtime.servers.health_port, "/healthz") == (200, "ok\n")


def test_healthz_fails_naming_the_object_when_the_watch_cannot_be_renewed(kube, run_kopf, pg_db):
    with replica(run_kopf, pg_db, watch_inactivity_timeout_s=1.0, liveness_timeout_s=6.0,
                 list_interval_s=0.2) as runtime:
        port = runtime.servers.health_port
        kube.wait_for(lambda: http_get(port, "/healthz"), until=lambda answer: answer[0] == 200, timeout=10,
                      what="live at first")
        _freeze_the_dags_watch(kube, new_ones=True)  # every new DAG watch is dead too
        kube.create("dags", NS, dag_manifest("late"))
        code, text = kube.wait_for(lambda: http_get(port, "/healthz"), timeout=30, what="/healthz failing for the watch",
                                   until=lambda answer: answer[0] == 503 and "the watch of dags" in answer[1])
        assert "the watch of dags has not brought default/late for" in text and "cannot be renewed" in text
        assert dag_row(pg_db, "late") is None  # the operator never learned of it
        page = http_get(runtime.servers.metrics_port, "/metrics")[1]
        assert prometheus.value(page, "dagline_watch_owed_objects") >= 1
        # The network heals: the next stream brings the DAG, and the replica is live again.
        kube.call(lambda em: em.thaw_watches())
        kube.wait_for(lambda: kube.get("dags", NS, "late"), until=is_ready, timeout=30, what="the DAG applied")
        kube.wait_for(lambda: http_get(port, "/healthz"), until=lambda answer: answer[0] == 200, timeout=10,
                      what="live again")


def test_a_deletion_the_dead_watch_did_not_bring_is_found_by_the_listing(kube, run_kopf, pg_db):
    with replica(run_kopf, pg_db, watch_inactivity_timeout_s=1.0, list_interval_s=0.2) as runtime:
        kube.create("dags", NS, dag_manifest("daily"))
        kube.wait_for(lambda: kube.get("dags", NS, "daily"), until=is_ready, timeout=30, what="DAG Ready")
        _freeze_the_dags_watch(kube, new_ones=True)
        kube.delete("dags", NS, "daily")
        kube.wait_for(lambda: dag_row(pg_db, "daily"), until=lambda row: not row.is_active, timeout=30,
                      what="the DAG deactivated without its DELETED event")
        assert runtime.listing.stats.missed_deletions == 1 and runtime.cache.get("dags", NS, "daily") is None
        kube.call(lambda em: em.thaw_watches())  # the event comes late: handled again, nothing changes
        kube.create("dags", NS, dag_manifest("other"))
        kube.wait_for(lambda: kube.get("dags", NS, "other"), until=is_ready, timeout=30, what="the watch back")
        assert dag_row(pg_db, "daily").is_active is False

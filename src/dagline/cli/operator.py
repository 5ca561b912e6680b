"""`dagline operator`: one replica of the Kubernetes operator (kopf controller + scheduler loop + probes).

Loaded lazily by the root group (`base.DaglineGroup.lazy_commands`): only this command imports kopf.
"""

from __future__ import annotations

import gc
import logging
import os

import click

from dagline.cli.base import Context, Integer, log_folder_option, main, make_spanning_clock, now_option
from dagline.errors import InvalidInput
from dagline.executors import registry
from dagline.k8s.settings import OperatorSettings


@main.command("operator", retry_conflicts=False)
@click.option("--executor", type=click.Choice(registry.names(first=OperatorSettings.executor)), default=None,
              help="How tasks run (default: $DAGLINE_EXECUTOR, else spark-k8s).")
@click.option("--parallelism", type=Integer(min=1), default=None,
              help="Tries the executor runs at once (default: $DAGLINE_PARALLELISM, else 32).")
@click.option("--namespace", default=None, metavar="NS",
              help="Serve the objects of this namespace (default: $DAGLINE_NAMESPACE; empty: every namespace).")
@click.option("--all-namespaces", "-A", is_flag=True, help="Serve every namespace.")
@click.option("--health-port", type=Integer(0, 65535), default=None,
              help="/healthz and /readyz (default: $DAGLINE_HEALTH_PORT, else 8080; 0: any free port).")
@click.option("--metrics-port", type=Integer(0, 65535), default=None,
              help="/metrics (default: $DAGLINE_METRICS_PORT, else 9090; 0: any free port).")
@click.option("--api-port", type=Integer(-1, 65535), default=None,
              help="The HTTP API (default: $DAGLINE_API_PORT, else 8793; 0: any free port; -1: none).")
@log_folder_option
@now_option
@click.pass_obj
def operator_cmd(obj: Context, executor, parallelism, namespace, all_namespaces, health_port, metrics_port,
                 api_port, log_folder, now):
    """Run one operator replica against the database (--db, else $DAGLINE_DB_URL): the kopf controller of
    DAG, DagRun, Backfill and Pool objects, the scheduler loop and the HTTP API. SIGTERM stops it gracefully."""
    logging.getLogger("dagline").setLevel(logging.INFO)  # say what it does, even without -v
    from dagline.k8s.operator import run
    from dagline.k8s.runtime import Runtime

    if not (obj.db_url or os.environ.get("DAGLINE_DB_URL")):
        raise InvalidInput("the operator's replicas share one database: pass --db URL or set DAGLINE_DB_URL "
                           "(postgresql://user@host/db; sqlite:///file.db for a single replica)", field="--db")

    def open_db(_settings):
        db = obj.db()  # reachable and on the current schema, or a clear error
        if db.is_sqlite:
            click.echo("warning: SQLite: run exactly one operator replica (use PostgreSQL for more)", err=True)
        return db

    runtime = Runtime.from_env(open_db=open_db, clock=make_spanning_clock(now), log_folder=log_folder,
                               all_namespaces=all_namespaces, executor=executor, parallelism=parallelism,
                               health_port=health_port, metrics_port=metrics_port, api_port=api_port,
                               namespace=namespace or None)
    gc.freeze()  # start-up objects (modules, kopf, SQLAlchemy) leave the collector's scans: collections stay cheap
    raise SystemExit(run(runtime))

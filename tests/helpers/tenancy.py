"""Two teams' DAGs in one database, each in its namespace, and one from a file (in `default`): the set-up
of the tenancy tests (API tokens and CLI `--namespace`)."""

from __future__ import annotations

from collections.abc import Callable

from dagline.domain import names
from dagline.spec import load_dag_paths
from dagline.store.dags import apply_dags
from dagline.store.runs import trigger_run
from tests.helpers.harness import write_dag

TEAM_DAGS = (("a-sales", "a-team"), ("b-sales", "team-b"), ("local", None))


def apply_team_dags(db, folder, document: Callable[[str], str], *, now) -> dict:
    """`a-sales` of a-team, `b-sales` of team-b, `local` applied from a file without a namespace (so
    `default`'s); `document(name)` is each one's YAML. Returns {name: a manual run at `now`}."""
    loaded = []
    for name, namespace in TEAM_DAGS:
        loaded += load_dag_paths([write_dag(folder, document(name), name=f"{name}.yaml")], namespace=namespace)
    apply_dags(db, loaded, now=now)
    return {name: trigger_run(db, names.qualify(namespace or names.DEFAULT_NAMESPACE, name), now=now, logical_date=now,
                              conf={}, who="test") for name, namespace in TEAM_DAGS}

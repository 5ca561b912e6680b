"""Two teams' DAGs in one database, as their DAG objects apply them, and one from a file: the set-up of
the tenancy tests (API tokens and CLI `--namespace`)."""

from __future__ import annotations

from collections.abc import Callable

from dagline.spec import LoadedDag, load_dag_paths
from dagline.store.dags import apply_dags
from dagline.store.runs import trigger_run
from tests.helpers.harness import write_dag

TEAM_DAGS = (("a-sales", "a-team"), ("b-sales", "team-b"), ("local", None))


def apply_team_dags(db, folder, document: Callable[[str], str], *, now) -> dict:
    """`a-sales` owned by a-team, `b-sales` by team-b (their objects' `k8s://` sources), `local` from a file;
    `document(name)` is each one's YAML. Returns {dag_id: a manual run at `now`}."""
    loaded = []
    for name, namespace in TEAM_DAGS:
        [item] = load_dag_paths([write_dag(folder, document(name), name=f"{name}.yaml")])
        loaded.append(LoadedDag(item.dag, f"k8s://{namespace}/{name}") if namespace else item)
    apply_dags(db, loaded, now=now)
    return {name: trigger_run(db, name, now=now, logical_date=now, conf={}, who="test") for name, _ in TEAM_DAGS}

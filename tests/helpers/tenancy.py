"""Teams' DAGs in one database, as their DAG objects apply them, and one from a file: the set-up of the
tenancy tests (API tokens, the web UI and CLI `--namespace`). A DAG of a namespace is stored under its
key (`namespace/name`, ADR 92), a file's DAG in `default` (key: its name)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import yaml

from dagline.domain.names import DEFAULT_NAMESPACE, qualify
from dagline.spec import Dag, LoadedDag, load_dag_paths, parse_dag_document
from dagline.store.dags import apply_dags
from dagline.store.runs import trigger_run
from tests.helpers.harness import write_dag

TEAM_DAGS = (("a-sales", "a-team"), ("b-sales", "team-b"), ("local", DEFAULT_NAMESPACE))
TEAM_KEYS = {name: qualify(namespace, name) for name, namespace in TEAM_DAGS}  # name -> its DAG's key


def namespaced(folder, text: str, namespace: str) -> LoadedDag:
    """The DAG of a YAML document as `namespace`'s DAG object applies it; in `default`, as `dags apply`
    loads it from a file (written into `folder`)."""
    document = parse_dag_document(yaml.safe_load(text))
    if namespace == DEFAULT_NAMESPACE:
        [item] = load_dag_paths([write_dag(folder, text, name=f"{document.metadata.name}.yaml")])
        return item
    return LoadedDag(Dag.from_document(document, namespace=namespace), f"k8s://{namespace}/{document.metadata.name}")


def apply_in_namespaces(db, folder, documents: Iterable[tuple[str, str]], *, now) -> list[str]:
    """Apply (namespace, YAML) pairs (see `namespaced`); returns their DAGs' keys, in order."""
    loaded = [namespaced(folder, text, namespace) for namespace, text in documents]
    apply_dags(db, loaded, now=now)
    return [item.dag.dag_id for item in loaded]


def apply_team_dags(db, folder, document: Callable[[str], str], *, now) -> dict:
    """`a-sales` of a-team, `b-sales` of team-b (as their DAG objects apply them), `local` of `default`
    (a file's); `document(name)` is each one's YAML. Returns {name: a manual run at `now`}; `TEAM_KEYS`
    says each one's key (`a-team/a-sales`...)."""
    apply_in_namespaces(db, folder, [(namespace, document(name)) for name, namespace in TEAM_DAGS], now=now)
    return {name: trigger_run(db, TEAM_KEYS[name], now=now, logical_date=now, conf={}, who="test")
            for name, _ in TEAM_DAGS}

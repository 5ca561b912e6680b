"""A DAG in a URL is its key (`dagline.domain.names`): `/dags/etl/grid` for `default`'s `etl`,
`/dags/a-team/etl/grid` for a-team's. Routes take it with the `dagkey` convertor, at most one '/'
(names and namespaces hold none), so `/dags/a-team/grid/grid` is the grid of a-team's DAG `grid`
and `/dags/etl/grid` that of `default`'s `etl`. One reading stays ambiguous: `/dags/N/tasks/W` is both
the page W (`grid`, `graph`...) of namespace N's DAG `tasks` and the page of task W of `default`'s
DAG N; `pages.task_page` tells them apart by what the viewer may see (`PAGE_WORDS`)."""

from __future__ import annotations

from urllib.parse import quote

from starlette.convertors import Convertor, register_url_convertor


class DagKeyConvertor(Convertor):
    regex = "[^/]+(?:/[^/]+)?"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("dagkey", DagKeyConvertor())

PAGE_WORDS = ("grid", "graph", "timeline", "trigger", "backfill")  # the pages at `/dags/<key>/<word>`


def dag_url(dag_id: str, page: str = "grid") -> str:
    """The address of a DAG's page (its key keeps its '/')."""
    return f"/dags/{quote(dag_id, safe='/')}/{page}"

"""The web UI with the same DAG name in several namespaces (issue 38), on SQLite and PostgreSQL: `default`,
`a-team` and `team-b` each have a DAG `etl`, each with a run of the same run id string. A page's address
carries the DAG's key (`/dags/etl/grid` is default's, `/dags/a-team/etl/grid` a-team's); a token limited
to namespaces gets, for another namespace's DAG, run, log, task page or action, the very 404 a missing
one gets; a run id string resolves among the runs it may see; its live events, its pools and its DAG
list leave the other namespaces out."""

from __future__ import annotations

import asyncio
import datetime as dt
import re

import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy import func, insert, select

from dagline.api import ApiSettings, create_app
from dagline.clock import FixedClock
from dagline.db.models import dag_run_t, dag_t, event_t, pool_t, signal_t
from dagline.store.dags import set_paused
from dagline.store.pools import set_pool
from dagline.store.runs import trigger_run
from dagline.store.tokens import create_token, revoke_token
from dagline.web import live
from dagline.web.live import PLATFORM, LiveFeed
from tests.helpers.cli import snapshot
from tests.helpers.dags import dag, task
from tests.helpers.harness import schedule
from tests.helpers.tenancy import apply_in_namespaces
from tests.helpers.web_session import csrf_field

NOW = dt.datetime(2026, 5, 1, tzinfo=dt.timezone.utc)
A, B, D = "a-team", "team-b", "default"
ETLS = {D: "etl", A: "a-team/etl", B: "team-b/etl"}  # namespace -> the key of its DAG `etl`


def _yaml(name: str, *tasks) -> str:
    return yaml.safe_dump(dag(name, *(tasks or (task("load"),))))


@pytest.fixture
def world(db, tmp_path):
    """`etl` in default (tasks `load` and `graph`), a-team and team-b, each with one finished run of the
    same run id string; a-team's DAG `grid`; namespace `etl`'s DAG `tasks`. Tokens: `a` (a-team), `ab`
    (a-team and team-b), `d` (default), `all` (unlimited)."""
    apply_in_namespaces(db, tmp_path, [
        (D, _yaml("etl", task("load"), task("graph", "load"))), (A, _yaml("etl")), (B, _yaml("etl")),
        (A, _yaml("grid")), ("etl", _yaml("tasks", task("x")))], now=NOW)
    runs = {ns: trigger_run(db, key, now=NOW, logical_date=NOW, conf={}, who="test") for ns, key in ETLS.items()}
    schedule(db, NOW.isoformat())
    assert len({r.run_id for r in runs.values()}) == 1  # one run id string, three DAGs
    scopes = ("read", "operate")
    with db.begin() as conn:
        tokens = {"a": create_token(conn, "a", scopes, now=NOW, namespaces=[A]),
                  "ab": create_token(conn, "ab", scopes, now=NOW, namespaces=[A, B]),
                  "d": create_token(conn, "d", scopes, now=NOW, namespaces=[D]),
                  "all": create_token(conn, "all", scopes, now=NOW)}
    apps: list = []
    yield {"runs": runs, "run_id": runs[A].run_id, "tokens": tokens, "logs": tmp_path / "logs", "apps": apps}
    for app in apps:  # their live feeds' threads end before the database goes
        app.state.dagline_live.close()


def _client(db, world, who: str) -> tuple[TestClient, str]:
    app = create_app(db, ApiSettings(log_folder=str(world["logs"])), clock=FixedClock(NOW))
    world["apps"].append(app)
    client = TestClient(app, follow_redirects=False)
    client.headers["Authorization"] = f"Bearer {world['tokens'][who]}"
    client.get("/login")
    return client, csrf_field(client.get("/").text)


def _title(page) -> str:
    return re.search(r"<title>(.*?) · dagline</title>", page.text).group(1)


def _paused(db) -> dict:
    with db.begin() as conn:
        return dict(conn.execute(select(dag_t.c.dag_id, dag_t.c.is_paused)).all())


def _state(db) -> tuple:
    """Row counts, pause flags and run states: what a refused action leaves as it was."""
    with db.begin() as conn:
        runs = conn.execute(select(dag_run_t.c.id, dag_run_t.c.state).order_by(dag_run_t.c.id)).all()
    return snapshot(db), _paused(db), [tuple(r) for r in runs]


def test_a_dags_key_is_its_address_and_every_page_word_resolves_to_the_right_dag(db, world):
    client, csrf = _client(db, world, "all")
    for path, title in (("/dags/etl/grid", "etl: grid"), ("/dags/a-team/etl/grid", "a-team/etl: grid"),
                        ("/dags/team-b/etl/timeline", "team-b/etl: timeline"),
                        ("/dags/a-team/grid/grid", "a-team/grid: grid"),  # a-team's DAG named `grid`
                        ("/dags/a-team/grid/graph", "a-team/grid: graph"),
                        ("/dags/etl/tasks/load", "etl.load: durations"),
                        ("/dags/a-team/etl/tasks/load", "a-team/etl.load: durations"),
                        ("/dags/etl/tasks/tasks/x", "etl/tasks.x: durations"),
                        # namespace etl's DAG `tasks` or default etl's task? The task where etl has it...
                        ("/dags/etl/tasks/graph", "etl.graph: durations"),
                        # ...else the page of the DAG `etl/tasks`
                        ("/dags/etl/tasks/grid", "etl/tasks: grid"),
                        ("/dags/etl/tasks/timeline", "etl/tasks: timeline")):
        page = client.get(path)
        assert page.status_code == 200 and _title(page) == title, path
    assert client.get("/dags/a-team/etl").headers["location"] == "/dags/a-team/etl/grid"
    assert client.get("/dags/etl").headers["location"] == "/dags/etl/grid"
    assert client.get("/dags/a-team/etl/trigger").status_code == 200
    grid = client.get("/dags/a-team/etl/grid").text
    assert 'href="/dags/a-team/etl/tasks/load"' in grid and 'action="/dags/a-team/etl/pause"' in grid
    run = client.get(f"/runs/{world['runs'][A].id}").text
    assert 'href="/dags/a-team/etl/grid">a-team/etl</a>' in run
    # an action on a-team's `grid` pauses that DAG only, and its confirmation posts to its key
    asked = client.post("/dags/a-team/grid/pause", data={"csrf": csrf})
    assert asked.status_code == 200 and 'action="/dags/a-team/grid/pause"' in asked.text
    assert client.post("/dags/a-team/grid/pause", data={"csrf": csrf, "confirmed": "yes"}).status_code == 303
    assert [key for key, paused in _paused(db).items() if paused] == ["a-team/grid"]


def test_the_dag_list_shows_each_etl_with_its_namespace_and_filters_by_namespace(db, world):
    everything, _ = _client(db, world, "all")
    rows = re.findall(r'<tr data-dag="([^"]+)">\s*<td><a href="([^"]+)">([^<]+)</a></td>\s*<td><a href="[^"]+">([^<]+)</a>',
                      everything.get("/").text)
    assert ("a-team/etl", "/dags/a-team/etl/grid", "etl", A) in rows
    assert ("etl", "/dags/etl/grid", "etl", D) in rows and ("team-b/etl", "/dags/team-b/etl/grid", "etl", B) in rows
    assert set(re.findall(r'data-dag="([^"]+)"', everything.get("/?namespace=a-team").text)) == {"a-team/etl",
                                                                                                  "a-team/grid"}
    assert set(re.findall(r'data-dag="([^"]+)"', everything.get("/?namespace=default").text)) == {"etl"}
    limited, _ = _client(db, world, "d")  # a token limited to `default` sees default's DAGs (file DAGs)
    assert set(re.findall(r'data-dag="([^"]+)"', limited.get("/").text)) == {"etl"}
    assert set(re.findall(r'data-dag="([^"]+)"', limited.get("/?namespace=a-team").text)) == set()
    assert limited.get("/dags/etl/grid").status_code == 200
    a_only, _ = _client(db, world, "a")
    assert set(re.findall(r'data-dag="([^"]+)"', a_only.get("/").text)) == {"a-team/etl", "a-team/grid"}


def _same(hidden, missing, hidden_ref: str, missing_ref: str) -> None:
    """Both answers are the same 404, word for word (the reference each names aside)."""
    assert hidden.status_code == missing.status_code == 404, (hidden.status_code, missing.status_code)

    def masked(text: str, ref: str) -> str:  # where a page names the reference: its message, its address
        return text.replace(f"&#39;{ref}&#39;", "'REF'").replace(f"'{ref}'", "'REF'").replace(f"/dags/{ref}/", "/dags/REF/") \
            .replace(f"/runs/{ref}", "/runs/REF")

    assert masked(hidden.text, hidden_ref) == masked(missing.text, missing_ref)


def test_another_namespaces_dag_run_log_task_and_actions_answer_as_missing_ones(db, world):
    client, csrf = _client(db, world, "a")
    before = _state(db)
    for hidden in (ETLS[B], ETLS[D]):
        for page in ("grid", "graph", "timeline", "trigger", "backfill", "tasks/load"):
            _same(client.get(f"/dags/{hidden}/{page}"), client.get(f"/dags/a-team/nowhere/{page}"),
                  hidden, "a-team/nowhere")
        for action, extra in (("pause", {}), ("unpause", {}), ("trigger", {}),
                              ("backfill", {"start": "2026-04-01", "end": "2026-04-02"})):
            for confirmed in ("", "yes"):
                fields = {"csrf": csrf, "confirmed": confirmed, **extra}
                _same(client.post(f"/dags/{hidden}/{action}", data=fields),
                      client.post(f"/dags/a-team/nowhere/{action}", data=fields), hidden, "a-team/nowhere")
    missing_run = str(10**6)
    for namespace in (B, D):
        run = str(world["runs"][namespace].id)
        for suffix in ("", "/logs/load/1", "?task=load"):
            _same(client.get(f"/runs/{run}{suffix}"), client.get(f"/runs/{missing_run}{suffix}"), run, missing_run)
        for action in ("clear", "stop"):
            for confirmed in ("", "yes"):
                fields = {"csrf": csrf, "confirmed": confirmed}
                _same(client.post(f"/runs/{run}/{action}", data=fields),
                      client.post(f"/runs/{missing_run}/{action}", data=fields), run, missing_run)
    assert _state(db) == before  # nothing done
    assert client.get(f"/runs/{world['runs'][A].id}/logs/load/1").status_code == 200  # its own: there


def test_a_run_id_string_resolves_among_the_runs_the_viewer_may_see(db, world):
    run_id = world["run_id"]
    a_only, a_csrf = _client(db, world, "a")
    page = a_only.get(f"/runs/{run_id}")
    assert page.status_code == 200 and 'href="/dags/a-team/etl/grid">a-team/etl</a>' in page.text
    asked = a_only.post(f"/runs/{run_id}/stop", data={"csrf": a_csrf})
    assert asked.status_code == 409 and "is success: nothing to stop" in asked.text  # its own run, found
    cleared = a_only.post(f"/runs/{run_id}/clear", data={"csrf": a_csrf, "confirmed": "yes"})
    assert cleared.status_code == 303 and cleared.headers["location"] == f"/runs/{world['runs'][A].id}"
    a_only.get("/")  # shows the notice of the clear (once)
    with db.begin() as conn:
        states = dict(conn.execute(select(dag_run_t.c.dag_id, dag_run_t.c.state)).all())
    assert states == {"a-team/etl": "running", "etl": "success", "team-b/etl": "success"}  # a-team's run only
    # ambiguous among the viewer's own runs: 409 naming only its DAGs
    two, two_csrf = _client(db, world, "ab")
    for answer in (two.get(f"/runs/{run_id}"), two.post(f"/runs/{run_id}/stop", data={"csrf": two_csrf}),
                   two.post(f"/runs/{run_id}/stop", data={"csrf": two_csrf, "confirmed": "yes"})):
        assert answer.status_code == 409 and "exists in several DAGs (a-team/etl, team-b/etl)" in answer.text
    everything, all_csrf = _client(db, world, "all")
    answer = everything.post(f"/runs/{run_id}/stop", data={"csrf": all_csrf})
    assert answer.status_code == 409 and "(a-team/etl, etl, team-b/etl)" in answer.text
    # a run id string only another namespace's DAG has: the missing run's 404
    only_b = trigger_run(db, ETLS[B], now=NOW, logical_date=NOW + dt.timedelta(days=1), conf={}, who="test")
    for suffix, method in (("", "get"), ("/stop", "post"), ("/clear", "post")):
        kwargs = {"data": {"csrf": a_csrf}} if method == "post" else {}
        _same(getattr(a_only, method)(f"/runs/{only_b.run_id}{suffix}", **kwargs),
              getattr(a_only, method)(f"/runs/manual__nothing{suffix}", **kwargs), only_b.run_id, "manual__nothing")
    # a numeric reference that is another namespace's run's id is not that run for a limited viewer
    assert a_only.get(f"/runs/{world['runs'][B].id}").status_code == 404


def test_the_pools_page_shows_a_limited_token_its_namespaces_pools_and_the_platforms(db, world):
    with db.begin() as conn:
        conn.execute(insert(pool_t), [{"name": "shared", "slots": 4, "namespace": None},
                                      {"name": "a-team/spark", "slots": 2, "namespace": A},
                                      {"name": "team-b/spark", "slots": 3, "namespace": B},
                                      {"name": "default/spark", "slots": 5, "namespace": D}])

    def shown(who: str) -> set[str]:
        client, _ = _client(db, world, who)
        return set(re.findall(r'<tr data-pool="([^"]+)">', client.get("/pools").text))

    assert shown("a") == {"default", "shared", "a-team/spark"}
    assert shown("d") == {"default", "shared", "default/spark"}
    assert shown("ab") == {"default", "shared", "a-team/spark", "team-b/spark"}
    assert shown("all") == {"default", "shared", "a-team/spark", "team-b/spark", "default/spark"}


def test_the_live_stream_of_a_limited_reader_is_not_told_of_another_namespaces_changes(db, world):
    feed = LiveFeed(db, poll_s=0.05)

    async def news(stream) -> str:
        """The stream's next event (its keep-alive comments aside)."""
        while (part := await stream.__anext__()).startswith(":"):
            pass
        return part

    async def watch():
        limited, everything = feed.stream(namespaces={A}), feed.stream()
        assert (await limited.__anext__()).endswith("data: 0\n\n")
        assert (await everything.__anext__()).endswith("data: 0\n\n")
        assert await asyncio.to_thread(feed.watching.wait, 20)  # the feed knows where the changes stand
        pending = asyncio.ensure_future(news(limited))
        try:
            await asyncio.to_thread(set_paused, db, ETLS[B], True, now=NOW, who="test")  # team-b's change
            told = await asyncio.wait_for(news(everything), timeout=20)
            assert told.startswith("event: change")
            await asyncio.sleep(1.0)  # the limited stream would have been woken with it: it was not
            assert not pending.done()
            assert feed.version == 1 and feed.version_for({A}) == 0  # its counter does not count team-b's
            await asyncio.to_thread(set_paused, db, ETLS[A], True, now=NOW, who="test")  # its own namespace's
            assert await asyncio.wait_for(pending, timeout=20) == "event: change\ndata: 1\n\n"
        finally:
            pending.cancel()
            await limited.aclose()
            await everything.aclose()

    try:
        asyncio.run(watch())
    finally:
        feed.close()


def test_a_limited_readers_page_carries_its_own_change_counter(db, world):
    client, _ = _client(db, world, "a")
    feed = client.app.state.dagline_live
    client.get("/")  # a live page starts the feed
    assert feed.watching.wait(20)
    set_paused(db, ETLS[B], True, now=NOW, who="test")
    feed.look()  # what the feed's thread does when woken (it may have done so already)
    assert feed.version >= 1
    assert 'data-live-version="0"' in client.get("/dags/a-team/etl/grid").text
    everything, _ = _client(db, world, "all")
    everything.app.state.dagline_live = feed
    assert f'data-live-version="{feed.version}"' in everything.get("/").text


def test_the_live_feed_says_whose_each_stored_change_is_even_one_committed_out_of_id_order(db, world):
    """What the feed's thread does when woken, looked at directly: a DAG's change is its namespace's, a
    platform pool's is everyone's (PLATFORM), a signal is its sender's namespace's; and an event whose id
    is below one already read (a PostgreSQL transaction that took its id first and committed last) is
    still announced, once."""
    feed = LiveFeed(db, lookback=100)
    assert feed.look() == set()  # where the stored changes stand: no news
    set_paused(db, ETLS[B], True, now=NOW, who="test")
    assert feed.look() == {B}
    set_pool(db, "shared", 2, now=NOW)
    assert feed.look() == {PLATFORM}
    with db.begin() as conn:
        conn.execute(insert(signal_t).values(key="ml/model.ready", value="1", source="test", sent_at=NOW,
                                             handled_at=NOW, namespace="ml"))
        top = conn.execute(select(func.max(event_t.c.id))).scalar()
    assert feed.look() == {"ml"}

    def event(event_id: int, dag_id: str) -> None:
        with db.begin() as conn:
            conn.execute(insert(event_t).values(id=event_id, at=NOW, who="test", entity="dag", dag_id=dag_id))

    event(top + 10, ETLS[A])
    assert feed.look() == {A}
    event(top + 5, ETLS[D])  # committed after a later id was read
    assert feed.look() == {D}
    assert feed.look() == set()  # once


def test_an_open_live_stream_ends_once_its_token_is_revoked(db, world, monkeypatch):
    monkeypatch.setattr(live, "RECHECK_S", 0.2)
    monkeypatch.setattr(live, "PING_EVERY_S", 0.2)
    client, _ = _client(db, world, "a")
    parts = 0
    with client.stream("GET", "/ui/events") as stream:
        assert stream.status_code == 200
        for line in stream.iter_lines():
            if line.startswith((": ping", "event:")):
                parts += 1
                if parts == 2:  # the stream is going: revoke its token
                    with db.begin() as conn:
                        revoke_token(conn, "a")
            assert parts < 50, "the stream of a revoked token went on"
    assert client.get("/ui/events").status_code == 401  # and it cannot open again

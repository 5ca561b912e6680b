"""The web UI over HTTP (FastAPI's TestClient on the API's own app), on SQLite and PostgreSQL: who may
read and act, the CSRF check, confirmations, that actions are the CLI's (same event log), that every
value is escaped, and the live feed's wake-ups. The browser tests (tests/browser/) click through the
same pages in Chromium."""

from __future__ import annotations

import asyncio
import re

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from dagline.api import ApiSettings, create_app
from dagline.clock import FixedClock
from dagline.db.models import dag_run_t, event_t, signal_t
from dagline.executors.noop import NoopExecutor
from dagline.scheduler.loop import Scheduler
from dagline.store.pools import set_pool
from dagline.times import parse_instant
from dagline.web.live import LiveFeed
from tests.helpers import web_scenario as scene
from tests.helpers.web_session import csrf_field, sign_in


@pytest.fixture
def world(db, tmp_path):
    names = scene.build(db, tmp_path)
    names["logs"] = tmp_path / "logs"
    return names


def make_client(db, world, **settings) -> TestClient:
    app = create_app(db, ApiSettings(log_folder=str(world["logs"]), **settings))
    return TestClient(app, follow_redirects=False)






def runs_of(db, dag_id: str) -> list:
    with db.begin() as conn:
        return conn.execute(select(dag_run_t).where(dag_run_t.c.dag_id == dag_id).order_by(dag_run_t.c.id)).all()


def test_pages_need_a_token_unless_anonymous_reads_are_on(db, world):
    closed = make_client(db, world)
    answer = closed.get("/dags/sales/grid")
    assert answer.status_code == 303 and answer.headers["location"].startswith("/login?next=/dags/sales/grid")
    assert closed.get("/ui/events").status_code == 401
    assert closed.get("/api/v1/signals").status_code == 401  # the API on the same app keeps its rules
    bad = closed.get("/", headers={"Authorization": "Bearer dgl_1_" + "x" * 43})
    assert bad.status_code == 303
    login = closed.post("/login", data={"token": "dgl_9_" + "y" * 43, "csrf": csrf_field(closed.get("/login").text)})
    assert login.status_code == 401 and "unknown, revoked or expired token" in login.text

    sign_in(closed, world["reader"])
    for path in ("/", "/dags/sales/grid", "/dags/sales/graph", "/dags/sales/timeline", "/dags/sales/tasks/load",
                 "/runs/1", "/backfills", "/signals", "/pools"):
        page = closed.get(path)
        assert page.status_code == 200, (path, page.text)
        assert "default-src 'self'" in page.headers["content-security-policy"]
    assert closed.get("/dags/nope/grid").status_code == 404
    assert closed.get("/runs/99999").status_code == 404

    anonymous = make_client(db, world, anonymous_read=True)
    page = anonymous.get("/dags/sales/grid")
    assert page.status_code == 200 and "anonymous (read only)" in page.text


def test_the_grid_graph_and_timeline_show_the_runs(db, world):
    client = make_client(db, world)
    sign_in(client, world["reader"])
    grid = client.get("/dags/sales/grid").text
    main, _, replaced = grid.partition('id="grid-overridden"')
    assert main.count("<td class=s-success>") == 15  # 5 live runs x 3 tasks, the backfill's included
    assert "<td class=s-failed>" in replaced and "<td class=s-upstream_failed>" in replaced
    assert "Replaced by backfills" in grid
    overridden = next(r for r in runs_of(db, "sales") if r.state == "overridden")
    graph = client.get(f"/dags/sales/graph?run={overridden.id}").text
    assert re.search(r'<rect class="s-failed"[^>]*/>\s*<text[^>]*>transform</text>', graph)
    assert 'class="edge s-success"' in graph  # extract -> transform carried extract's success
    timeline = client.get("/dags/sales/timeline").text
    assert "backfill #1" in timeline and "replaced by this run" in timeline and overridden.run_id in timeline
    durations = client.get("/dags/sales/tasks/transform").text
    assert "median" in durations and 'class="median-line"' in durations


def test_every_rendered_value_is_escaped(db, world):
    client = make_client(db, world)
    csrf = sign_in(client, world["token"])
    answer = client.post("/dags/stream/trigger", data={"csrf": csrf, "confirmed": "yes",
                                                       "conf": '{"note": "%s"}' % scene.HTML.replace('"', '\\"')})
    assert answer.status_code == 303
    run = runs_of(db, "stream")[-1]
    scene.write_log(world["logs"], "sales", "scheduled__2026-01-01T00:00:00+00:00", "extract", 1,
                    f"starting\n{scene.HTML}\ndone\n")
    page = client.get(f"/runs/{run.id}").text
    assert "<script>window.pwned" not in page and "&lt;script&gt;window.pwned = 1&lt;/script&gt;" in page
    log_page = client.get("/runs/1?task=extract&try=1").text
    assert "<b>bold</b>" not in log_page and "&lt;b&gt;bold&lt;/b&gt;" in log_page
    raw = client.get("/runs/1/logs/extract/1?offset=0")
    assert raw.headers["content-type"].startswith("text/plain") and scene.HTML in raw.text
    assert raw.headers["x-log-offset"] == str(len(f"starting\n{scene.HTML}\ndone\n".encode()))
    missing = client.get("/runs/1/logs/nope/1?offset=0")
    assert missing.status_code == 404 and "has no task 'nope'" in missing.text
    sent = client.post("/signals/send", data={"csrf": csrf, "confirmed": "yes", "key": "model.published",
                                              "value": '{"path": "<img src=x onerror=alert(1)>"}'})
    assert sent.status_code == 303
    signals = client.get("/signals").text
    assert "<img src=x" not in signals and "&lt;img src=x onerror=alert(1)&gt;" in signals


def test_actions_need_the_scope_the_csrf_field_and_a_confirmation(db, world):
    client = make_client(db, world)
    csrf = sign_in(client, world["reader"])
    before = len(runs_of(db, "stream"))
    refused = client.post("/dags/stream/trigger", data={"csrf": csrf, "confirmed": "yes"})
    assert refused.status_code == 403 and "needs &#39;operate&#39;" in refused.text

    client = make_client(db, world)
    csrf = sign_in(client, world["token"])
    no_csrf = client.post("/dags/stream/trigger", data={"confirmed": "yes"})
    assert no_csrf.status_code == 403 and "CSRF" in no_csrf.text
    wrong = client.post("/dags/stream/trigger", data={"confirmed": "yes", "csrf": "x" * 43})
    assert wrong.status_code == 403
    elsewhere = client.post("/dags/stream/trigger", data={"confirmed": "yes", "csrf": csrf},
                            headers={"Origin": "https://evil.example"})
    assert elsewhere.status_code == 403 and "evil.example" in elsewhere.text
    bad_conf = client.post("/dags/stream/trigger", data={"csrf": csrf, "conf": "[1, 2]"})
    assert bad_conf.status_code == 422 and "conf" in bad_conf.text
    assert len(runs_of(db, "stream")) == before

    asked = client.post("/dags/stream/trigger", data={"csrf": csrf, "conf": '{"a": 1}'})
    assert asked.status_code == 200 and "Trigger a run of stream?" in asked.text and 'name="confirmed"' in asked.text
    assert len(runs_of(db, "stream")) == before  # asking writes nothing
    done = client.post("/dags/stream/trigger", data={"csrf": csrf, "conf": '{"a": 1}', "confirmed": "yes"})
    assert done.status_code == 303
    run = runs_of(db, "stream")[-1]
    assert done.headers["location"] == f"/runs/{run.id}" and run.conf == {"a": 1} and run.run_type == "manual"
    with db.begin() as conn:
        who = conn.execute(select(event_t.c.who).where(event_t.c.dag_run_id == run.id)).scalars().all()
    assert who and set(who) == {"web:ops"}  # recorded like the CLI's, with the token's name

    paused = client.post("/dags/sales/pause", data={"csrf": csrf, "confirmed": "yes", "next": "/dags/sales/grid"})
    assert paused.status_code == 303 and paused.headers["location"] == "/dags/sales/grid"
    assert "paused" in client.get("/dags/sales/grid").text
    client.post("/dags/sales/unpause", data={"csrf": csrf, "confirmed": "yes"})


def test_clear_stop_backfill_and_signal_through_the_pages(db, world):
    client = make_client(db, world)
    csrf = sign_in(client, world["token"])
    overridden = next(r for r in runs_of(db, "sales") if r.state == "overridden")
    refused = client.post(f"/runs/{overridden.id}/clear", data={"csrf": csrf})
    assert refused.status_code == 409 and "overridden" in refused.text
    first = runs_of(db, "sales")[0]
    asked = client.post(f"/runs/{first.id}/clear", data={"csrf": csrf, "task": ["transform"], "downstream": "on"})
    assert "load, transform" in asked.text and "Clear 2 task instance(s)" in asked.text
    done = client.post(f"/runs/{first.id}/clear", data={"csrf": csrf, "task": ["transform"], "downstream": "on",
                                                       "confirmed": "yes"})
    assert done.status_code == 303
    assert "cleared 2 task instance(s): load, transform" in client.get(done.headers["location"]).text
    assert runs_of(db, "sales")[0].state == "running"

    stopped = client.post(f"/runs/{first.id}/stop", data={"csrf": csrf, "confirmed": "yes"})
    assert stopped.status_code == 303
    assert "skipped load, transform" in client.get(stopped.headers["location"]).text

    form = {"csrf": csrf, "start": "2026-01-04", "end": "2026-01-05", "reprocess": "completed"}
    plan = client.post("/dags/sales/backfill", data=form)
    assert plan.status_code == 200 and "2 to replace" in plan.text and plan.text.count("<td>replace</td>") == 2
    backfills_before = client.get("/backfills").text.count('data-backfill="')
    made = client.post("/dags/sales/backfill", data={**form, "confirmed": "yes"})
    assert made.status_code == 303 and made.headers["location"] == "/backfills"
    listing = client.get("/backfills").text
    assert listing.count('data-backfill="') == backfills_before + 1 and "backfill 2 of sales: 2 run(s)" in listing
    bad = client.post("/dags/sales/backfill", data={**form, "start": "someday"})
    assert bad.status_code == 422 and "start" in bad.text

    asked = client.post("/signals/send", data={"csrf": csrf, "key": "model.published", "value": '{"path": "/m/1"}'})
    assert "stream spec.tasks[evaluate].on[0] (start)" in asked.text
    sent = client.post("/signals/send", data={"csrf": csrf, "key": "model.published", "value": '{"path": "/m/1"}',
                                              "id": "m1", "confirmed": "yes"})
    assert sent.status_code == 303
    with db.begin() as conn:
        row = conn.execute(select(signal_t).where(signal_t.c.sender_id == "m1")).one()
    assert row.source == "token:ops"
    assert client.post("/signals/send", data={"csrf": csrf, "key": "Bad Key"}).status_code == 422
    signals_before = client.get("/signals").text.count("model.published")
    for value, says in (('{"path": "\\ud800"}', "a lone surrogate"), ('"\\u0000"', "a NUL character"),
                        ("[" * 100_000, "nested more than")):
        refused = client.post("/signals/send", data={"csrf": csrf, "key": "model.published", "value": value,
                                                     "confirmed": "yes"})
        assert refused.status_code == 422 and says in refused.text, refused.text
    assert client.get("/signals").text.count("model.published") == signals_before


def test_pools_show_used_and_free_slots(db, world):
    set_pool(db, "spark", 4, now=parse_instant("2026-01-06T00:00:00"))
    client = make_client(db, world)
    sign_in(client, world["reader"])
    page = client.get("/pools").text
    assert re.search(r'data-pool="spark"><td>spark</td><td>4</td><td class="used">0</td>\s*<td class="free">4</td>',
                     page)


def test_the_live_feed_wakes_on_a_change_committed_elsewhere(db, world):
    feed = LiveFeed(db, poll_s=0.05)

    async def first_change():
        stream = feed.stream()
        assert (await stream.__anext__()).startswith("retry:")
        await asyncio.sleep(0.3)  # the watcher is listening (or has its first poll) by now
        scene.cli(db, "dags", "pause", "stream")  # another process's commit: NOTIFY, or a new event row
        try:
            return await asyncio.wait_for(stream.__anext__(), timeout=20)
        finally:
            await stream.aclose()

    try:
        assert asyncio.run(first_change()).startswith("event: change")
    finally:
        feed.close()


def test_the_run_page_renders_a_try_with_the_signal_that_started_it(db, world):
    scene.cli(db, "dags", "trigger", "stream", "--now", "2026-01-06T03:00:00")
    clock = FixedClock(parse_instant("2026-01-06T03:00:00"))
    sched = Scheduler(db, NoopExecutor(parallelism=4, clock=clock), clock=clock)
    sched.start()  # in this process: `serve` streams as long as its scheduler lives (no --until-idle)

    def settle():
        for _ in range(20):
            if sched.iterate().work == 0:
                return
        raise AssertionError("the scheduler did not settle")

    try:
        settle()  # the run is running
        scene.cli(db, "signals", "send", "model.published", "--value", '{"path": "/m/42"}', "--id", "m42",
                  "--now", "2026-01-06T03:00:00")
        settle()  # the signal started `evaluate`
    finally:
        sched.stop()
    [run] = runs_of(db, "stream")
    client = make_client(db, world)
    sign_in(client, world["reader"])
    page = client.get(f"/runs/{run.id}?task=evaluate").text
    args = re.search(r'<dt>arguments</dt><dd><pre class="args">(.*?)</pre>', page, re.S).group(1)
    assert args.split() == ["--model", "/m/42"]
    assert re.search(r"<dt>signal</dt><dd>seq \d+ <code>model.published</code>", page)
    report = client.get(f"/runs/{run.id}?task=report").text  # not started by a signal: none in its templates
    assert "<dt>signal</dt>" not in report


def test_the_grid_has_a_time_axis_at_the_schedules_resolution(db, world, tmp_path):
    """Daily runs are named by their date; hourly runs by their time too (HH:MM in the DAG's zone), with
    the date where a new day starts: the same labels as `dagline runs grid`."""
    client = make_client(db, world)
    sign_in(client, world["reader"])
    daily = client.get("/dags/sales/grid").text
    assert "axis-date" in daily and "axis-time" not in daily
    assert "<th><span>01-02</span>" in daily  # a daily run, named by its logical date

    (tmp_path / "hourly.yaml").write_text(
        "apiVersion: dagline.io/v1alpha1\nkind: DAG\nmetadata: {name: hourly}\nspec:\n  paused: false\n"
        "  catchup: true\n  schedule: '@hourly'\n  timezone: America/New_York\n  startDate: '2026-01-05T22:00:00'\n"
        "  tasks:\n    - {id: a, spark: {mainApplicationFile: a.py}}\n")
    scene.cli(db, "dags", "apply", str(tmp_path / "hourly.yaml"), "--now", "2026-01-06T03:00:00Z")
    scene.cli(db, "scheduler", "--executor", "noop", "--until-idle", "--now", "2026-01-06T06:00:00Z")
    hourly = client.get("/dags/hourly/grid").text
    time_row = re.search(r"<tr class='axis axis-time'>(.*?)</tr>", hourly).group(1)
    date_row = re.search(r"<tr class='axis axis-date'>(.*?)</tr>", hourly).group(1)
    assert re.findall(r"<span>([^<]*)</span>", time_row) == ["22:00", "23:00", "00:00"]  # New York time
    assert re.findall(r"<span>([^<]*)</span>", date_row) == ["01-05", "", "01-06"]


def _signal_rows(page: str) -> list[tuple[str, str]]:
    """(key, source) of every row of the signal log, in order."""
    return re.findall(r'<code class="key">([^<]*)</code>.*?<td class="small">([^<]*)</td>', page, re.S)


def test_the_signal_log_filters_by_key_and_source_hides_daglines_own_and_pages_through(db, world):
    from dagline.store.signals import send_signal

    client = make_client(db, world)
    sign_in(client, world["reader"])
    now = parse_instant("2026-01-07T00:00:00Z")
    with db.begin() as conn:
        for n, (key, source) in enumerate([("model.published", "user:ann"), ("model.validated", "user:bob"),
                                           ("load.ready", "user:ann"), ("model.published", "user:bob"),
                                           ("model_x.published", "user:ann")]):
            send_signal(conn, key, {"n": n}, source=source, now=now)
    shown = _signal_rows(client.get("/signals").text)
    assert shown and not [key for key, _ in shown if key.startswith("dagline.")]  # dagline's own: hidden
    everything = _signal_rows(client.get("/signals?internal=1&limit=1000").text)
    assert any(key.startswith("dagline.task.") for key, _ in everything)
    assert _signal_rows(client.get("/signals?key=model.").text) == [  # a prefix: `_` is no wildcard
        ("model.published", "user:bob"), ("model.validated", "user:bob"), ("model.published", "user:ann")]
    assert _signal_rows(client.get("/signals?key=model.&source=user:ann").text) == [("model.published", "user:ann")]
    assert _signal_rows(client.get("/signals?key=nothing.").text) == []

    first = client.get("/signals?key=model&limit=2").text
    assert _signal_rows(first) == [("model_x.published", "user:ann"), ("model.published", "user:bob")]
    older = re.search(r'href="(/signals\?[^"]*)" id="older"', first).group(1).replace("&amp;", "&")
    assert "key=model" in older and "limit=2" in older and "before=" in older
    with db.begin() as conn:  # a new signal does not move the pages after the first
        send_signal(conn, "model.published", {"n": 9}, source="user:cy", now=now)
    second = client.get(older).text
    assert _signal_rows(second) == [("model.validated", "user:bob"), ("model.published", "user:ann")]
    assert 'id="older"' not in second and 'id="newest"' in second


def test_the_trigger_confirmation_shows_the_date_in_the_dags_zone(db, world, tmp_path):
    (tmp_path / "ny.yaml").write_text(
        "apiVersion: dagline.io/v1alpha1\nkind: DAG\nmetadata: {name: ny}\nspec:\n  schedule: '@daily'\n"
        "  timezone: America/New_York\n  startDate: '2026-01-01'\n  tasks:\n    - {id: a, spark: {mainApplicationFile: a.py}}\n")
    scene.cli(db, "dags", "apply", str(tmp_path / "ny.yaml"), "--now", "2026-01-02T00:00:00Z")
    client = make_client(db, world)
    csrf = sign_in(client, world["token"])
    asked = client.post("/dags/ny/trigger", data={"csrf": csrf, "logical_date": "2026-03-02T10:00"}).text
    assert "2026-03-02 10:00:00 -05:00 (America/New_York)" in asked  # as entered, in the DAG's zone
    assert "15:00" not in asked


def test_a_first_visit_is_sent_to_sign_in_without_an_error_a_refused_token_with_one(db, world):
    client = make_client(db, world)
    first = client.get("/dags/sales/grid")
    assert first.status_code == 303 and "why=" not in first.headers["location"]
    assert 'class="problem"' not in client.get(first.headers["location"]).text
    client.cookies.set("dagline_token", "dgl_9_" + "y" * 43)
    refused = client.get("/dags/sales/grid")
    assert refused.status_code == 303 and "why=" in refused.headers["location"]
    assert 'class="problem"' in client.get(refused.headers["location"]).text


def test_the_durations_chart_names_its_runs_and_speaks_one_unit(db, world):
    client = make_client(db, world)
    sign_in(client, world["reader"])
    page = client.get("/dags/sales/tasks/extract").text
    assert re.findall(r'class="axis run-label"[^>]*>([^<]*)<', page) == ["01-01", "01-02", "01-03", "01-04", "01-05"]
    units = {label[-1] for label in re.findall(r'<text class="axis" [^>]*>([^<]*)<', page)}
    units |= {re.search(r'class="median-label"[^>]*>median ([^<]*)<', page).group(1)[-1]}
    assert len(units) == 1, units

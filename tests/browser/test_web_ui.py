"""The web UI in a real browser: Debian's Chromium (installed pinned by tests/tools/install_chromium.py)
driven by Playwright for Python, against two API replicas (two uvicorn servers on one PostgreSQL
database) and a real scheduler process (noop executor) that keeps a streaming task running.

The tests click through every page in the order a person would, assert what is on the screen, and
save a screenshot of each page (in a temporary folder; with DAGLINE_SCREENSHOTS=docs/screenshots,
the pictures of docs/how-to/web-ui.md are made again). One module, one shared scene: the whole set takes well under
two minutes.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

from dagline.api import ApiSettings, create_app
from dagline.api.server import ApiServer
from tests.helpers import web_scenario as scene
from tests.helpers.polling import wait_for
from tests.helpers.postgres import make_pg_database
from tests.tools.install_chromium import ensure_chromium

playwright_sync = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra: make install")
expect = playwright_sync.expect

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> pathlib.Path:
    folder = os.environ.get("DAGLINE_SCREENSHOTS")
    path = pathlib.Path(folder) if folder else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def ui(pg_admin, tmp_path_factory):
    """The scene on PostgreSQL, a scheduler process, and two API replicas serving the UI."""
    db, drop = make_pg_database(pg_admin)
    folder = tmp_path_factory.mktemp("web-ui")
    names = scene.build(db, folder)
    logs = folder / "logs"
    running_id = scene.cli(db, "dags", "trigger", "stream", "--conf", '{"note": "%s"}' %
                           scene.HTML.replace('"', '\\"')).strip()
    out = open(folder / "scheduler.log", "wb")
    scheduler = subprocess.Popen([sys.executable, "-m", "dagline.cli", "--db", db.url, "scheduler", "--executor",
                                  "noop", "--log-folder", str(logs)], stdout=out, stderr=subprocess.STDOUT)
    settings = ApiSettings(log_folder=str(logs))
    replicas = [ApiServer(create_app(db, settings), host="127.0.0.1", port=0).start() for _ in range(2)]
    try:
        run = wait_for(lambda: _run_state(db, running_id) == "running" and _run_pk(db, running_id),
                       "the streaming run to start", timeout=60)
        yield {**names, "db": db, "a": f"http://127.0.0.1:{replicas[0].port}",
               "b": f"http://127.0.0.1:{replicas[1].port}", "logs": logs, "stream_run": run,
               "stream_run_id": running_id}
    finally:
        for replica in replicas:
            replica.stop()
        scheduler.terminate()
        try:
            scheduler.wait(30)
        except subprocess.TimeoutExpired:
            scheduler.kill()
            scheduler.wait()
        out.close()
        drop()


def _run_row(db, run_id: str):
    from sqlalchemy import select

    from dagline.db.models import dag_run_t

    with db.begin() as conn:
        return conn.execute(select(dag_run_t).where(dag_run_t.c.run_id == run_id)).first()


def _run_state(db, run_id: str) -> str | None:
    row = _run_row(db, run_id)
    return row.state if row else None


def _run_pk(db, run_id: str) -> int:
    return _run_row(db, run_id).id


@pytest.fixture(scope="module")
def browser():
    executable = ensure_chromium()
    with playwright_sync.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=executable, headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def context(browser, ui):
    """One signed-in browser (the token cookie holds for both replicas: same host)."""
    ctx = browser.new_context(viewport={"width": 1360, "height": 860})
    page = ctx.new_page()
    page.goto(ui["a"] + "/dags/sales/grid")
    expect(page).to_have_url(re.compile(r"/login\?next=/dags/sales/grid"))
    expect(page.locator("#login-form")).to_be_visible()
    expect(page.locator("p.problem")).to_have_count(0)  # a first visit is no error
    page.fill("input[name=token]", ui["token"])
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(r"/dags/sales/grid$"))
    expect(page.locator(".notice")).to_have_text("signed in as ops")
    page.close()
    yield ctx
    ctx.close()


@pytest.fixture
def page(context):
    one = context.new_page()
    errors: list[str] = []
    one.on("pageerror", lambda exc: errors.append(str(exc)))
    yield one
    one.close()
    assert errors == [], errors


def test_the_dag_list(page, ui, shots):
    page.goto(ui["a"] + "/")
    rows = page.locator("#dags tbody tr")
    expect(rows).to_have_count(2)
    sales = page.locator("tr[data-dag=sales]")
    expect(sales).to_contain_text("@daily")
    expect(sales.locator(".state")).to_have_text("success")
    expect(page.locator("tr[data-dag=stream] .state")).to_have_text("running")
    expect(sales.locator("button")).to_have_text("Pause")
    page.screenshot(path=shots / "dags.png", full_page=True)


def test_the_grid_sets_overridden_runs_apart(page, ui, shots):
    page.goto(ui["a"] + "/dags/sales/grid")
    grid = page.locator("#grid")
    expect(grid.locator("tbody tr")).to_have_count(3)
    expect(grid.locator("tr.run-states th[data-run]")).to_have_count(5)
    expect(grid.locator("td.s-success")).to_have_count(15)
    expect(grid.locator("tr.run-types th.t-backfill")).to_have_text("b")
    replaced = page.locator("section.overridden")
    expect(replaced).to_contain_text("Replaced by backfills")
    expect(replaced.locator("td.s-failed")).to_have_count(1)
    expect(replaced.locator("td.s-upstream_failed")).to_have_count(1)
    page.screenshot(path=shots / "grid.png", full_page=True)
    replaced.locator("td.s-failed").click()  # a cell opens its run at its task
    expect(page).to_have_url(re.compile(r"/runs/\d+\?task=transform$"))
    expect(page.locator("tr[data-task=transform] .state")).to_have_text("failed")


def test_the_graph_colours_the_chosen_run(page, ui, shots):
    page.goto(ui["a"] + "/dags/sales/graph")
    expect(page.locator("svg#graph .node")).to_have_count(3)
    overridden = page.locator("select[name=run] option", has_text="overridden")
    value = overridden.get_attribute("value")
    page.select_option("select[name=run]", value)  # submits itself
    expect(page).to_have_url(re.compile(rf"run={value}$"))
    expect(page.locator("svg#graph .node[data-task=transform] rect")).to_have_class("s-failed")
    expect(page.locator("svg#graph .node[data-task=load] rect")).to_have_class("s-upstream_failed")
    expect(page.locator("svg#graph path.edge[data-from=extract]")).to_have_class("edge s-success")
    page.screenshot(path=shots / "graph.png", full_page=True)


def test_the_timeline_links_previous_runs_and_replaced_ones(page, ui, shots):
    page.goto(ui["a"] + "/dags/sales/timeline")
    items = page.locator("#timeline > li")
    expect(items).to_have_count(5)
    backfilled = page.locator("#timeline > li.t-backfill")
    expect(backfilled).to_contain_text("backfill #1")
    expect(backfilled.locator("ul.replaced")).to_contain_text("overridden")
    expect(backfilled.locator(".previous a")).to_have_text("scheduled__2026-01-02T00:00:00+00:00")
    expect(items.last.locator(".previous")).to_have_text("first on the timeline")
    page.screenshot(path=shots / "timeline.png", full_page=True)


def test_run_detail_tries_reasons_rendered_arguments_and_an_escaped_log(page, ui, shots):
    runs = scene.cli(ui["db"], "runs", "list", "sales", "--json")
    first = next(r for r in __import__("json").loads(runs) if r["logical_date"].startswith("2026-01-01"))
    scene.write_log(ui["logs"], "sales", first["run_id"], "extract", 1, f"reading /data/20260101\n{scene.HTML}\n")
    page.goto(ui["a"] + f"/runs/{first['id']}?task=extract")
    expect(page.locator("h1")).to_have_text(first["run_id"])
    expect(page.locator("#tasks tbody tr")).to_have_count(3)
    expect(page.locator("svg#gantt rect.bar")).to_have_count(3)
    expect(page.locator("pre.args").first).to_have_text(re.compile(r"--date\s+2026-01-01\s+--out\s+/data/20260101"))
    log = page.locator("pre.log")
    expect(log).to_contain_text("<script>window.pwned = 1</script>")  # shown as text, never run
    assert page.evaluate("window.pwned") is None
    assert page.locator("pre.log b").count() == 0
    page.screenshot(path=shots / "run.png", full_page=True)


def test_a_task_duration_chart_has_its_median(page, ui, shots):
    page.goto(ui["a"] + "/dags/sales/tasks/extract")
    expect(page.locator("svg#durations rect.bar")).to_have_count(5)
    expect(page.locator("svg#durations .median-label")).to_contain_text("median")
    page.screenshot(path=shots / "durations.png", full_page=True)


def test_a_run_triggered_on_one_replica_appears_live_on_the_other(page, context, ui, shots):
    page.goto(ui["b"] + "/dags/stream/grid")
    expect(page.locator("#live-dot.on")).to_have_count(1)  # the event stream is open
    columns = page.locator("#grid tr.run-states th[data-run]")
    before = columns.count()
    page.evaluate("window.__same_page = true")

    other = context.new_page()
    other.goto(ui["a"] + "/dags/stream/trigger")
    other.fill("textarea[name=conf]", '{"model": "/m/<b>7</b>"}')
    other.click("#trigger-form button[type=submit]")
    expect(other.locator(".confirm-box .question")).to_have_text("Trigger a run of stream?")
    expect(other.locator(".confirm-box")).to_contain_text('"model": "/m/<b>7</b>"')
    other.screenshot(path=shots / "confirm-trigger.png", full_page=True)
    other.click("form.confirm button[type=submit]")
    expect(other.locator(".notice")).to_contain_text("triggered run manual__")
    other.close()

    expect(columns).to_have_count(before + 1, timeout=20_000)  # no reload: the SSE said "change"
    assert page.evaluate("window.__same_page") is True


def test_signal_log_shows_signal_rule_action_try(page, ui, shots):
    page.goto(ui["a"] + "/signals")
    page.click("details.send summary")
    page.fill("#signal-form input[name=key]", "model.published")
    page.fill("textarea[name=value]", '{"path": "/m/<i>8</i>"}')
    page.fill("#signal-form input[name=id]", "m8")
    page.click("#signal-form button[type=submit]")
    expect(page.locator(".confirm-box")).to_contain_text("stream spec.tasks[evaluate].on[0] (start)")
    page.click("form.confirm button[type=submit]")
    expect(page.locator(".notice")).to_contain_text("signal model.published stored as seq")
    row = page.locator("#signals tbody tr", has=page.locator("code.key", has_text="model.published"))
    expect(row.first.locator("pre.value")).to_contain_text("/m/<i>8</i>")
    chain = row.first.locator("ul.chain li")
    expect(chain.first).to_contain_text("spec.tasks[evaluate].on[0]", timeout=20_000)  # live, once handled
    expect(chain.first.locator(".badge")).to_have_text("start")
    expect(chain.first.locator("a")).to_contain_text("evaluate try 1", timeout=20_000)
    page.screenshot(path=shots / "signals.png", full_page=True)


def test_pools_show_used_and_free_slots(page, ui, shots):
    page.goto(ui["a"] + "/pools")
    default = page.locator("tr[data-pool=default]")
    expect(default.locator("td").nth(1)).to_have_text("128")
    used = int(default.locator("td.used").inner_text())
    assert used >= 1  # the streaming tries hold slots
    expect(default.locator("td.free")).to_have_text(str(128 - used))
    page.screenshot(path=shots / "pools.png", full_page=True)


def test_a_running_try_log_is_followed_then_the_run_is_stopped(page, ui, shots):
    run = ui["stream_run"]
    path = scene.write_log(ui["logs"], "stream", ui["stream_run_id"], "serve", 1, "serving model v1\n")
    page.goto(ui["a"] + f"/runs/{run}?task=serve")
    expect(page.locator("#following")).to_contain_text("following while try 1 runs")
    expect(page.locator("pre.log")).to_have_text("serving model v1\n")
    with open(path, "a", encoding="utf-8") as f:
        f.write("request 1 served <em>fast</em>\n")
    expect(page.locator("pre.log")).to_contain_text("request 1 served <em>fast</em>", timeout=15_000)
    page.screenshot(path=shots / "run-following.png", full_page=True)

    page.click("#run-summary button.danger")
    expect(page.locator(".confirm-box .question")).to_contain_text("Mark run")
    expect(page.locator(".confirm-box")).to_contain_text("serve")
    page.click("form.confirm button[type=submit]")
    expect(page.locator(".notice")).to_contain_text("stop asked for serve")
    # the streaming try stops gracefully and ends success; the run someone stopped ends failed
    expect(page.locator("tr[data-task=serve] .state")).to_have_text("success", timeout=30_000)
    expect(page.locator("#run-summary .meta .state").first).to_have_text("failed", timeout=30_000)
    expect(page.locator("#following")).to_have_text("the try has ended", timeout=15_000)


def test_a_backfill_shows_its_plan_first_then_its_progress(page, ui, shots):
    page.goto(ui["a"] + "/dags/sales/backfill")
    page.fill("input[name=start]", "2026-01-01")
    page.fill("input[name=end]", "2026-01-02")
    page.select_option("select[name=reprocess]", "completed")
    page.click("#backfill-form button[type=submit]")
    expect(page.locator("p.summary")).to_contain_text("2 to replace")
    expect(page.locator("#plan tbody tr")).to_have_count(2)
    page.screenshot(path=shots / "backfill-plan.png", full_page=True)
    page.click("form.confirm button[type=submit]")
    expect(page).to_have_url(re.compile(r"/backfills$"))
    newest = page.locator("#backfills tbody tr").first
    expect(newest.locator(".badge")).to_have_text("completed", timeout=30_000)  # live, as the scheduler works
    expect(newest.locator(".pct")).to_have_text("100%")
    page.screenshot(path=shots / "backfills.png", full_page=True)

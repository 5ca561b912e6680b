"""The pages (GET), each at a stable URL a person can bookmark and share:
`/` DAGs, `/dags/{dag_id}/grid`, `/dags/{dag_id}/graph`, `/dags/{dag_id}/timeline`,
`/dags/{dag_id}/tasks/{task_id}` (its durations), `/runs/{run_id}` (numeric id or run id string),
`/backfills`, `/signals`, `/pools`; plus the forms of the actions, the sign-in form, a try's log
(`/runs/{run_id}/logs/{task_id}/{try}`, text) and the live events (`/ui/events`)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, RedirectResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from dagline.domain.states import Reprocess, TIState
from dagline.errors import DaglineError, OperationFailed
from dagline.executors.base import TaskKey
from dagline.store import pages as q
from dagline.store import read_models as cli_queries
from dagline.store.pools import list_pools
from dagline.store.tries import task_try
from dagline.store.waiting import task_reasons
from dagline.web import access, charts, logs
from dagline.web.respond import NotFound, Page, html, in_transaction, serve_page, state

router = APIRouter(include_in_schema=False)
GRID_CHOICES = (25, 50, 100, 365, 1000)


def _int(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query_params.get(name, "")
    try:
        return min(hi, max(lo, int(raw))) if raw else default
    except ValueError:
        return default


def _before(request: Request):
    """The `before` of a page of runs: an ISO-8601 logical date (runs strictly before it), None when absent."""
    from dagline.errors import InvalidInput
    from dagline.times import parse_instant

    raw = request.query_params.get("before", "")
    if not raw:
        return None
    try:
        return parse_instant(raw)
    except ValueError as exc:
        raise InvalidInput(str(exc), field="before") from None


def _dag(conn, dag_id: str) -> dict:
    try:
        return q.dag_header(conn, dag_id)
    except OperationFailed as exc:
        raise NotFound(str(exc)) from None


def _run(conn, run_ref: str):
    run = q.run_for_page(conn, run_ref)
    if run is None:
        raise NotFound(f"unknown run {run_ref!r}")
    return run


@router.get("/")
async def index(request: Request):
    def work(conn, viewer):
        return Page("index.html", {"dags": q.dag_list(conn), "title": "DAGs", "live": True})

    return await serve_page(request, work)


@router.get("/dags/{dag_id}")
async def dag_home(dag_id: str):
    return RedirectResponse(f"/dags/{dag_id}/grid", status_code=307)


@router.get("/dags/{dag_id}/grid")
async def grid_page(request: Request, dag_id: str):
    limit = _int(request, "runs", 25, 1, q.MAX_GRID_RUNS)

    def work(conn, viewer):
        before = _before(request)
        dag_row = _dag(conn, dag_id)
        dag = q.current_dag(conn, dag_id)
        grid = q.grid(conn, dag_id, dag, limit, before)
        return Page("grid.html", {"dag": dag_row, "grid": grid, "limit": limit, "choices": GRID_CHOICES,
                                  "window": q.window(conn, dag_id, grid.runs, before), "before": before,
                                  "title": f"{dag_id}: grid", "tab": "grid", "live": True})

    return await serve_page(request, work)


@router.get("/dags/{dag_id}/graph")
async def graph_page(request: Request, dag_id: str):
    chosen = request.query_params.get("run")

    def work(conn, viewer):
        dag_row = _dag(conn, dag_id)
        runs = q.recent_runs(conn, dag_id, limit=50)
        run = None
        if chosen:
            run = _run(conn, chosen)
            if run.dag_id != dag_id:
                raise NotFound(f"run {chosen!r} is not a run of {dag_id!r}")
        elif runs:
            run = _run(conn, str(runs[0]["id"]))
        dag = q.version(conn, run.dag_version_id) if run is not None else q.current_dag(conn, dag_id)
        states = cli_queries.task_states(conn, [run.id]).get(run.id, {}) if run is not None else {}
        upstream = {t.task_id: tuple(t.upstream) for t in dag.tasks.values()} if dag is not None else {}
        return Page("graph.html", {"dag": dag_row, "graph": charts.layout_graph(upstream, states), "run": run,
                                   "runs": runs, "title": f"{dag_id}: graph", "tab": "graph",
                                   "live": True})

    return await serve_page(request, work)


@router.get("/dags/{dag_id}/timeline")
async def timeline_page(request: Request, dag_id: str):
    limit = _int(request, "runs", 50, 1, q.MAX_GRID_RUNS)

    def work(conn, viewer):
        before = _before(request)
        dag_row = _dag(conn, dag_id)
        runs = q.timeline(conn, dag_id, limit, before)
        return Page("timeline.html", {"dag": dag_row, "runs": runs, "limit": limit, "before": before,
                                      "window": q.window(conn, dag_id, list(reversed(runs)), before),
                                      "title": f"{dag_id}: timeline", "tab": "timeline", "live": True})

    return await serve_page(request, work)


@router.get("/dags/{dag_id}/tasks/{task_id}")
async def task_page(request: Request, dag_id: str, task_id: str):
    limit = _int(request, "runs", 100, 1, q.MAX_GRID_RUNS)

    def work(conn, viewer):
        dag_row = _dag(conn, dag_id)
        found = q.durations(conn, dag_id, task_id, limit)
        dag = q.current_dag(conn, dag_id)
        if not found["points"] and (dag is None or task_id not in dag.tasks):
            raise NotFound(f"DAG {dag_id!r} has no task {task_id!r}")
        return Page("durations.html", {"dag": dag_row, "task_id": task_id, "data": found,
                                       "chart": charts.duration_chart(found["points"], found["median_s"]),
                                       "title": f"{dag_id}.{task_id}: durations", "tab": "grid", "live": True})

    return await serve_page(request, work)


@router.get("/dags/{dag_id}/trigger")
async def trigger_form(request: Request, dag_id: str):
    def work(conn, viewer):
        return Page("trigger.html", {"dag": _dag(conn, dag_id), "title": f"{dag_id}: trigger", "tab": None,
                                     "form": {}})

    return await serve_page(request, work)


@router.get("/dags/{dag_id}/backfill")
async def backfill_form(request: Request, dag_id: str):
    def work(conn, viewer):
        return Page("backfill_form.html", {"dag": _dag(conn, dag_id), "title": f"{dag_id}: backfill", "tab": None,
                                           "form": {"reprocess": Reprocess.NONE}})

    return await serve_page(request, work)


@router.get("/runs/{run_ref}")
async def run_page(request: Request, run_ref: str):
    api = state(request)
    chosen_task = request.query_params.get("task")
    chosen_try = _int(request, "try", 0, 0, 1_000_000)

    def work(conn, viewer):
        run = _run(conn, run_ref)
        now = api.clock.now()
        detail = cli_queries.run_detail(conn, run)
        reasons = task_reasons(conn, run, now=now)
        for t in detail["tasks"]:
            t["reason"] = reasons.get(t["task_id"])
        tries = q.tries(conn, run.id, detail["tasks"], now=now)
        dag_row = _dag(conn, run.dag_id)
        dag = q.version(conn, run.dag_version_id)
        task_ids = [t["task_id"] for t in detail["tasks"]]
        task = chosen_task if chosen_task in task_ids else (task_ids[0] if task_ids else None)
        current = next((t for t in detail["tasks"] if t["task_id"] == task), None)
        try_number = chosen_try or (current["try_number"] if current else 0)
        rendered = _rendered_job(conn, dag, run, task, try_number) if task else None
        log = None
        stored = task_try(conn, run.id, task) if task and try_number else None
        if stored is not None:
            following = bool(current and current["try_number"] == try_number and current["state"] in TIState.ACTIVE)
            log = {"source": (TaskKey(run.dag_id, run.run_id, task, try_number), stored),
                   "following": following, "try_number": try_number}
        return Page("run.html", {
            "dag": dag_row, "run": detail, "tries": tries, "gantt": charts.gantt(tries, now=now),
            "task": task, "current": current, "rendered": rendered, "log": log,
            "tries_of_task": sorted({t["try_number"] for t in tries if t["task_id"] == task}),
            "title": f"run {run.run_id}", "tab": None, "live": True,
        })

    def read_log(page: Page) -> Page:  # after the transaction: a driver pod's log is read over the network
        log = page.context.get("log")
        if log is not None:
            key, stored = log.pop("source")
            log["chunk"] = logs.read_try_chunk(getattr(api.settings, "log_folder", None), key, stored, None)
        return page

    return await serve_page(request, work, then=read_log)


def _rendered_job(conn, dag, run, task_id: str, try_number: int) -> dict:
    """The Spark job a try of this task gets (its arguments and conf rendered as the scheduler renders
    them, with the signal that started the try); `error` when a template fails."""
    from dagline.scheduler.launches import render_job, signal_for_templates

    task = dag.tasks.get(task_id)
    if task is None:
        return {"error": f"task {task_id!r} is not in this run's DAG version"}
    row = q.starting_signal(conn, run.id, task_id)
    signal = signal_for_templates(row) if row is not None else None
    try:
        job = render_job(task, dag, run_id=run.run_id, logical_date=run.logical_date,
                         data_interval=(run.data_interval_start, run.data_interval_end),
                         try_number=max(1, try_number), conf=run.conf or {}, signal=signal)
    except ValueError as exc:
        return {"error": f"template error: {exc}"}
    return {"main_application_file": job.main_application_file, "arguments": list(job.arguments),
            "conf": dict(job.conf), "try_number": max(1, try_number), "signal": signal, "error": None}


@router.get("/runs/{run_ref}/logs/{task_id}/{try_number}")
async def log_text(request: Request, run_ref: str, task_id: str, try_number: int):
    """The log of one try from `offset` (text/plain); headers say where the next read starts
    (`X-Log-Offset`) and whether the try still runs (`X-Try-Running`: keep following)."""
    api = state(request)
    raw = request.query_params.get("offset")
    offset = int(raw) if raw and raw.isdigit() else None

    def work(conn, viewer):
        run = _run(conn, run_ref)
        ti = task_try(conn, run.id, task_id)
        if ti is None:
            raise NotFound(f"run {run.run_id!r} has no task {task_id!r}")
        running = ti.try_number == try_number and ti.state in TIState.ACTIVE
        return run, ti, running

    try:
        (run, ti, running), _ = await run_in_threadpool(in_transaction, request, work)
    except DaglineError as exc:  # 401 sign in, 403 not allowed, 404 no such run or task...
        return PlainTextResponse(exc.reason, status_code=exc.http_status)
    chunk = await run_in_threadpool(logs.read_try_chunk, getattr(api.settings, "log_folder", None),
                                    TaskKey(run.dag_id, run.run_id, task_id, try_number), ti, offset)
    return PlainTextResponse(chunk.text, headers={"X-Log-Offset": str(chunk.offset),
                                                  "X-Try-Running": "1" if running else "0",
                                                  "X-Log-Exists": "1" if chunk.exists else "0",
                                                  "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"})


@router.get("/backfills")
async def backfills_page(request: Request):
    def work(conn, viewer):
        return Page("backfills.html", {"backfills": q.backfills(conn), "title": "Backfills", "live": True})

    return await serve_page(request, work)


@router.get("/signals")
async def signals_page(request: Request):
    limit = _int(request, "limit", 100, 1, 1000)

    def work(conn, viewer):
        return Page("signals.html", {"signals": q.signal_log(conn, limit), "title": "Signals", "live": True,
                                     "form": {}})

    return await serve_page(request, work)


@router.get("/pools")
async def pools_page(request: Request):
    def work(conn, viewer):
        return Page("pools.html", {"pools": list_pools(conn), "title": "Pools", "live": True})

    return await serve_page(request, work)


@router.get("/login")
async def login_form(request: Request):
    page = Page("login.html", {"title": "Sign in", "next": access.safe_next(request.query_params.get("next")),
                               "why": request.query_params.get("why", "")[:300]})
    return html(request, page, None)


@router.get("/ui/events")
async def events(request: Request):
    """Server-sent events: `change` after every committed change of stored state (see `web.live`)."""
    try:
        await run_in_threadpool(in_transaction, request, lambda conn, viewer: None)
    except (access.SignInNeeded, access.NotAllowed) as exc:
        return PlainTextResponse(str(exc), status_code=401)
    feed = request.app.state.dagline_live
    return StreamingResponse(feed.stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


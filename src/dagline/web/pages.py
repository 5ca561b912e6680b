"""The pages (GET), each at a stable URL a person can bookmark and share:
`/` DAGs, `/dags/{dag}/grid`, `/dags/{dag}/graph`, `/dags/{dag}/timeline`,
`/dags/{dag}/tasks/{task_id}` (its durations), `/runs/{run_id}` (numeric id or run id string),
`/backfills`, `/signals`, `/pools`; plus the forms of the actions, the sign-in form, a try's log
(`/runs/{run_id}/logs/{task_id}/{try}`, text) and the live events (`/ui/events`). `{dag}` is the DAG's
key: `etl` in `default`, `a-team/etl` in a-team (`web.urls`)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, RedirectResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from dagline.domain.input_values import MIN_INT64, read_integer
from dagline.domain.states import Reprocess, TIState
from dagline.errors import DaglineError, InvalidInput, OperationFailed
from dagline.executors.base import TaskKey
from dagline.limits import MAX_ROW_ID
from dagline.scheduler.launches import signal_for_templates
from dagline.store import pages as q
from dagline.store import read_models as cli_queries
from dagline.store.launches import launches_of_task
from dagline.store.pools import list_pools
from dagline.store.tries import task_try
from dagline.store.waiting import task_reasons
from dagline.times import run_labels
from dagline.web import access, charts, logs
from dagline.web.respond import NotFound, Page, html, in_transaction, serve_page, state
from dagline.web.urls import PAGE_WORDS, dag_url

router = APIRouter(include_in_schema=False)
GRID_CHOICES = (25, 50, 100, 365, 1000)
MAX_TRY_NUMBER = 1_000_000  # beyond any task's tries (`MAX_RETRIES` + 1)
STREAM_RETRY_AFTER_S = 30  # a refused event stream: when to try again


def _int(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    """A number from the query (`?runs=`), brought within [lo, hi]; not an integer (`²`, `1_000`), or beyond
    what a BIGINT holds: InvalidInput naming it (422)."""
    raw = request.query_params.get(name, "")
    return min(hi, max(lo, read_integer(raw, name, minimum=MIN_INT64))) if raw else default


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


def _dag(conn, dag_id: str, viewer) -> dict:
    access.check_dag(viewer, dag_id)  # another namespace's DAG is unknown to a limited token
    try:
        return q.dag_header(conn, dag_id)
    except OperationFailed:
        raise access.unknown_dag(dag_id) from None  # the same words as for another namespace's


def _run(conn, run_ref: str, viewer):
    return access.find_run(conn, viewer, run_ref)  # among the viewer's namespaces' runs only


@router.get("/")
async def index(request: Request):
    namespace = (request.query_params.get("namespace") or "")[:63] or None  # `?namespace=`: one namespace's DAGs

    def work(conn, viewer):
        dags = access.visible(viewer, q.dag_list(conn, namespace=namespace))
        return Page("index.html", {"dags": dags, "namespace": namespace, "title": "DAGs", "live": True})

    return await serve_page(request, work)


@router.get("/dags/{dag_id:dagkey}/tasks/{task_id}")
async def task_page(request: Request, dag_id: str, task_id: str):
    if task_id in PAGE_WORDS and "/" not in dag_id:
        # `/dags/N/tasks/grid`: the grid of namespace N's DAG `tasks`, or the page of `default`'s DAG N's
        # task `grid`? The task's, unless the viewer sees only the DAG `N/tasks` (see `web.urls`).
        other = f"{dag_id}/tasks"
        if await run_in_threadpool(_reads_as_page_of, request, other, dag_id, task_id):
            return await PAGES[task_id](request, other)
    limit = _int(request, "runs", 100, 1, q.MAX_GRID_RUNS)

    def work(conn, viewer):
        dag_row = _dag(conn, dag_id, viewer)
        found = q.durations(conn, dag_id, task_id, limit)
        dag = q.current_dag(conn, dag_id)
        if not found["points"] and (dag is None or task_id not in dag.tasks):
            raise NotFound(f"DAG {dag_id!r} has no task {task_id!r}")
        labels = run_labels(found["points"], dag_row["timezone"])  # each bar's run, as the grid names it
        chart = charts.duration_chart(found["points"], found["median_s"], labels=labels)
        return Page("durations.html", {"dag": dag_row, "task_id": task_id, "data": found, "chart": chart,
                                       "title": f"{dag_id}.{task_id}: durations", "tab": "grid", "live": True})

    return await serve_page(request, work)


def _reads_as_page_of(request: Request, other: str, dag_id: str, task_id: str) -> bool:
    """Whether the viewer sees the DAG `other` and not a task `task_id` of the DAG `dag_id`."""
    def work(conn, viewer):
        def has(key: str, task: str | None = None) -> bool:
            try:
                _dag(conn, key, viewer)
            except NotFound:
                return False
            dag = q.current_dag(conn, key)
            return task is None or (dag is not None and task in dag.tasks) or \
                bool(q.durations(conn, key, task, 1)["points"])

        return has(other) and not has(dag_id, task_id)

    try:
        return in_transaction(request, work)[0]
    except DaglineError:  # not signed in, say: the task page answers as it does
        return False


@router.get("/dags/{dag_id:dagkey}/grid")
async def grid_page(request: Request, dag_id: str):
    limit = _int(request, "runs", 25, 1, q.MAX_GRID_RUNS)

    def work(conn, viewer):
        before = _before(request)
        dag_row = _dag(conn, dag_id, viewer)
        dag = q.current_dag(conn, dag_id)
        grid = q.grid(conn, dag_id, dag, limit, before)
        return Page("grid.html", {"dag": dag_row, "grid": grid, "limit": limit, "choices": GRID_CHOICES,
                                  "window": q.window(conn, dag_id, grid.runs, before), "before": before,
                                  "title": f"{dag_id}: grid", "tab": "grid", "live": True})

    return await serve_page(request, work)


@router.get("/dags/{dag_id:dagkey}/graph")
async def graph_page(request: Request, dag_id: str):
    chosen = request.query_params.get("run")

    def work(conn, viewer):
        dag_row = _dag(conn, dag_id, viewer)
        runs = q.recent_runs(conn, dag_id, limit=50)
        run = None
        if chosen:
            run = _run(conn, chosen, viewer)
            if run.dag_id != dag_id:
                raise NotFound(f"run {chosen!r} is not a run of {dag_id!r}")
        elif runs:
            run = _run(conn, str(runs[0]["id"]), viewer)
        dag = q.version(conn, run.dag_version_id) if run is not None else q.current_dag(conn, dag_id)
        states = cli_queries.task_states(conn, [run.id]).get(run.id, {}) if run is not None else {}
        upstream = {t.task_id: tuple(t.upstream) for t in dag.tasks.values()} if dag is not None else {}
        return Page("graph.html", {"dag": dag_row, "graph": charts.layout_graph(upstream, states), "run": run,
                                   "runs": runs, "title": f"{dag_id}: graph", "tab": "graph",
                                   "live": True})

    return await serve_page(request, work)


@router.get("/dags/{dag_id:dagkey}/timeline")
async def timeline_page(request: Request, dag_id: str):
    limit = _int(request, "runs", 50, 1, q.MAX_GRID_RUNS)

    def work(conn, viewer):
        before = _before(request)
        dag_row = _dag(conn, dag_id, viewer)
        runs = q.timeline(conn, dag_id, limit, before)
        return Page("timeline.html", {"dag": dag_row, "runs": runs, "limit": limit, "before": before,
                                      "window": q.window(conn, dag_id, list(reversed(runs)), before),
                                      "title": f"{dag_id}: timeline", "tab": "timeline", "live": True})

    return await serve_page(request, work)


@router.get("/dags/{dag_id:dagkey}/trigger")
async def trigger_form(request: Request, dag_id: str):
    def work(conn, viewer):
        return Page("trigger.html", {"dag": _dag(conn, dag_id, viewer), "title": f"{dag_id}: trigger",
                                     "tab": None, "form": {}})

    return await serve_page(request, work)


@router.get("/dags/{dag_id:dagkey}/backfill")
async def backfill_form(request: Request, dag_id: str):
    def work(conn, viewer):
        return Page("backfill_form.html", {"dag": _dag(conn, dag_id, viewer), "title": f"{dag_id}: backfill",
                                           "tab": None, "form": {"reprocess": Reprocess.NONE}})

    return await serve_page(request, work)


PAGES = {"grid": grid_page, "graph": graph_page, "timeline": timeline_page, "trigger": trigger_form,
         "backfill": backfill_form}
assert set(PAGES) == set(PAGE_WORDS)


@router.get("/dags/{dag_id:dagkey}")  # after the pages: `/dags/etl/grid` is etl's grid, not a-team's DAG `grid`
async def dag_home(dag_id: str):
    return RedirectResponse(dag_url(dag_id), status_code=307)


@router.get("/runs/{run_ref}")
async def run_page(request: Request, run_ref: str):
    api = state(request)
    chosen_task = request.query_params.get("task")
    chosen_try = _int(request, "try", 0, 0, MAX_TRY_NUMBER)

    def work(conn, viewer):
        run = _run(conn, run_ref, viewer)
        now = api.clock.now()
        detail = {**cli_queries.run_detail(conn, run), "dag_id": run.dag_id}  # its DAG's key: the links
        reasons = task_reasons(conn, run, now=now)
        for t in detail["tasks"]:
            t["reason"] = reasons.get(t["task_id"])
        tries = q.tries(conn, run.id, detail["tasks"], now=now)
        dag_row = _dag(conn, run.dag_id, viewer)
        task_ids = [t["task_id"] for t in detail["tasks"]]
        task = chosen_task if chosen_task in task_ids else (task_ids[0] if task_ids else None)
        current = next((t for t in detail["tasks"] if t["task_id"] == task), None)
        try_number = chosen_try or (current["try_number"] if current else 0)
        rendered = _launched_job(conn, run, current, task, try_number) if task else None
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


def _launched_job(conn, run, current: dict | None, task_id: str, try_number: int) -> dict:
    """The Spark job a try of this task was launched with, as stored at its launch (never rendered
    here: ADR 60), or why it could not launch; for a try not launched yet, that its job is rendered
    at launch."""
    row = q.starting_signal(conn, run.id, task_id)
    signal = signal_for_templates(row) if row is not None else None
    shown = max(1, try_number)
    record = launches_of_task(conn, run.id, task_id).get(shown)
    if record is None:
        launched = current is not None and shown <= current["try_number"] and \
            not (shown == current["try_number"] and current["state"] == TIState.QUEUED)
        return {"try_number": shown, "signal": signal, "pending": not launched, "missing": launched,
                "error": None}
    return {"main_application_file": record.main_application_file, "arguments": record.arguments or [],
            "conf": record.conf or {}, "try_number": shown, "signal": signal, "error": record.error,
            "pending": False, "missing": False, "launched_at": record.launched_at}


@router.get("/runs/{run_ref}/logs/{task_id}/{try_number}")
async def log_text(request: Request, run_ref: str, task_id: str, try_number: str):
    """The log of one try from `offset` (text/plain); headers say where the next read starts
    (`X-Log-Offset`) and whether the try still runs (`X-Try-Running`: keep following)."""
    api = state(request)
    raw = request.query_params.get("offset")
    try:
        offset = read_integer(raw, "offset", minimum=0) if raw else None
        try_number = read_integer(try_number, "try_number", minimum=1, maximum=MAX_TRY_NUMBER)
    except InvalidInput as exc:
        return PlainTextResponse(str(exc), status_code=exc.http_status)

    def work(conn, viewer):
        run = _run(conn, run_ref, viewer)
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
        return Page("backfills.html", {"backfills": access.visible(viewer, q.backfills(conn)),
                                       "title": "Backfills", "live": True})

    return await serve_page(request, work)


@router.get("/signals")
async def signals_page(request: Request):
    limit = _int(request, "limit", 100, 1, 1000)
    query = request.query_params
    filters = {"key_prefix": query.get("key", "").strip()[:250],  # prefixes: `model.`, `try:ml-signals/`
               "source_prefix": query.get("source", "").strip()[:250],
               "internal": query.get("internal", "") in ("1", "on", "yes")}  # dagline's own `dagline.*` too
    before = _int(request, "before", 0, 0, MAX_ROW_ID)
    kept = [(name, value) for name, value in (  # a page's address: its filters, and `before` for older pages
        ("key", filters["key_prefix"]), ("source", filters["source_prefix"]),
        ("internal", "1" if filters["internal"] else ""), ("limit", str(limit) if limit != 100 else "")) if value]

    def work(conn, viewer):
        signals, more = q.signal_log(conn, limit, namespaces=access.namespaces(viewer), before=before or None,
                                     **filters)
        return Page("signals.html", {"signals": signals, "title": "Signals", "live": True, "form": {},
                                     "filters": filters, "before": before, "kept_query": kept,
                                     "older": signals[-1]["seq"] if more else None})

    return await serve_page(request, work)


@router.get("/pools")
async def pools_page(request: Request):
    def work(conn, viewer):  # the platform's pools (no namespace) and the viewer's namespaces' own
        pools = [p for p in list_pools(conn) if p["namespace"] is None or access.sees(viewer, p["namespace"])]
        return Page("pools.html", {"pools": pools, "title": "Pools", "live": True})

    return await serve_page(request, work)


@router.get("/login")
async def login_form(request: Request):
    page = Page("login.html", {"title": "Sign in", "next": access.safe_next(request.query_params.get("next")),
                               "why": access.sign_in_message(request.query_params.get("why"))})
    return html(request, page, None)


@router.get("/ui/events")
async def events(request: Request):
    """Server-sent events: `change` after every committed change of stored state the viewer may read
    (its namespaces' and the platform's; see `web.live`)."""
    try:
        _, viewer = await run_in_threadpool(in_transaction, request, lambda conn, viewer: None)
    except (access.SignInNeeded, access.NotAllowed) as exc:
        return PlainTextResponse(str(exc), status_code=401)
    feed = request.app.state.dagline_live
    client = access.client_key(request)
    refused = feed.admit(client)
    if refused is not None:  # the page works without it; the browser tries again later
        return PlainTextResponse(f"{refused}: try again later", status_code=429,
                                 headers={"Retry-After": str(STREAM_RETRY_AFTER_S), "Cache-Control": "no-store"})
    limited = access.namespaces(viewer)

    def still_reads() -> bool:  # the token is checked again, as every page does (a revoked one stops here)
        try:
            return access.namespaces(in_transaction(request, lambda conn, viewer: None)[1]) == limited
        except DaglineError:
            return False

    return StreamingResponse(feed.stream(client, limited, still_reads), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


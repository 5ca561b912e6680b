"""The actions (POST), each behind a confirmation and each done by the function the CLI calls, so
the event log records it as the CLI's (who: `web:<token name>`):

| form                           | confirmation shows                 | then calls                  | scope        |
|--------------------------------|------------------------------------|-----------------------------|--------------|
| pause / unpause a DAG          | the DAG and what changes           | `dagstore.set_paused`       | operate      |
| trigger a run (with conf)      | the logical date and conf          | `runs.trigger_run`          | operate      |
| clear tasks of a run           | the dry run: what would be cleared | `runs.clear_tasks`          | operate      |
| mark a run stopped             | the run and its active tasks       | `runs.stop_run`             | operate      |
| create a backfill              | the dry-run plan, interval by interval | `backfill.create_backfill` | operate    |
| send a signal                  | the key, value and who listens     | `signal_store.send_signal`  | signals:send |

Every form carries the CSRF field (checked first, before anything else). The first POST shows the
confirmation page (nothing is written); its "Confirm" button posts the same fields with
`confirmed=yes`, and only that POST acts, then redirects (303) to the page that shows the result.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse
from starlette.concurrency import run_in_threadpool

from dagline.domain.input_values import read_integer, read_text
from dagline.domain.json_values import path, read_json_object
from dagline.domain.names import qualify
from dagline.domain.signal_keys import parse_value, validate_key, validate_sender_id
from dagline.domain.states import Reprocess, RunState, TIState
from dagline.errors import InvalidInput, NotFound, OperationFailed
from dagline.limits import MAX_ACTIVE_LIMIT, MAX_JSON_BYTES
from dagline.store.backfills import create_backfill, resolve_range
from dagline.store.dags import require_dag, set_paused
from dagline.store.pages import task_instance_states
from dagline.store.runs import clear_tasks, stop_run, trigger_run
from dagline.store.signals import listeners, send_signal
from dagline.store.tokens import OPERATE, SEND, authenticate, sending_namespace
from dagline.times import parse_instant
from dagline.web import access
from dagline.web.render import local_time
from dagline.web.respond import Page, html, redirect_with_notice, serve_page, state
from dagline.web.urls import dag_url

router = APIRouter(include_in_schema=False)
MAX_FORM_BYTES = 2 * 1024 * 1024


async def _form(request: Request) -> dict[str, Any]:
    """The fields of a urlencoded form (the only kind the pages send; no multipart parser needed).
    A field given several times (checkboxes) becomes a list."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise InvalidInput(f"a form is sent as application/x-www-form-urlencoded, not {kind or 'nothing'}",
                           field="content-type")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise InvalidInput(f"a form of more than {MAX_FORM_BYTES:,} bytes", field="body")
    fields: dict[str, Any] = {}
    # bytes that are not UTF-8 become lone surrogates here, so `read_text` refuses them naming the field
    for key, value in parse_qsl(body.decode("latin-1"), keep_blank_values=True, max_num_fields=1000,
                                encoding="utf-8", errors="surrogateescape"):
        read_text(key, "body", max_length=200)
        read_text(value, path(key), max_length=MAX_FORM_BYTES)  # no NUL, no lone surrogate: InvalidInput, 422
        if key in fields:
            fields[key] = (fields[key] if isinstance(fields[key], list) else [fields[key]]) + [value]
        else:
            fields[key] = value
    return fields


def _list(value) -> list[str]:
    if value is None:
        return []
    return [v for v in (value if isinstance(value, list) else [value]) if v]


def _one(fields: dict, name: str) -> str:
    value = fields.get(name, "")
    return (value[0] if isinstance(value, list) else value).strip()


def _confirm(request: Request, viewer, *, title: str, question: str, action: str, fields: dict,
             preview: dict | None = None, danger: bool = False, cancel: str = "/") -> Page:
    hidden = [(k, v) for k, vs in fields.items() if k not in (access.CSRF_FIELD, "confirmed")
              for v in (vs if isinstance(vs, list) else [vs])]
    return Page("confirm.html", {"title": title, "question": question, "action": action, "hidden": hidden,
                                 "preview": preview or {}, "danger": danger, "cancel": cancel})


async def _act(request: Request, handler):
    """Check the CSRF field, then run `handler(viewer, fields)` (after the viewer is known)."""
    try:
        fields = await _form(request)
        access.check_csrf(request, fields)
    except (access.CsrfRefused, InvalidInput, ValueError) as exc:
        invalid = isinstance(exc, InvalidInput)  # a field the form reader refused: 422 naming it
        return html(request, Page("problem.html", {"title": "Invalid input" if invalid else "Refused",
                                                   "message": exc.reason if invalid else str(exc),
                                                   "field": exc.field if invalid else None}, 422 if invalid else 403),
                    None)
    return await serve_page(request, lambda viewer: handler(viewer, fields), action=True)


def _now(request: Request):
    return state(request).clock.now()


def _dag_zone(request: Request, dag_id: str, viewer) -> str:
    """The DAG's time zone; a DAG outside the viewer's namespaces is unknown (404, the words of a
    missing one), nothing done."""
    access.check_dag(viewer, dag_id)
    with state(request).database.begin() as conn:
        try:
            return require_dag(conn, dag_id).timezone
        except NotFound:
            raise access.unknown_dag(dag_id) from None


def _find_run(request: Request, run_ref: str, viewer):
    """The run, found among the viewer's namespaces' runs only: another namespace's is unknown (404),
    and a run id string shared with another namespace's run is not ambiguous (`access.find_run`)."""
    with state(request).database.begin() as conn:
        return access.find_run(conn, viewer, run_ref)


# -- pause / unpause ---------------------------------------------------------------------------

@router.post("/dags/{dag_id:dagkey}/pause")
async def pause(request: Request, dag_id: str):
    return await _act(request, lambda viewer, fields: _pause(request, viewer, fields, dag_id, True))


@router.post("/dags/{dag_id:dagkey}/unpause")
async def unpause(request: Request, dag_id: str):
    return await _act(request, lambda viewer, fields: _pause(request, viewer, fields, dag_id, False))


def _pause(request: Request, viewer, fields, dag_id: str, paused: bool) -> Page:
    access.require(viewer, OPERATE)
    word = "pause" if paused else "unpause"
    _dag_zone(request, dag_id, viewer)  # an unknown DAG (or another namespace's) is refused before anything
    if fields.get("confirmed") != "yes":
        what = ("no new runs are created or started; running tasks finish" if paused else
                "runs are created and started again as the schedule says")
        return _confirm(request, viewer, title=f"{word.title()} {dag_id}", question=f"{word.title()} DAG {dag_id}?",
                        action=dag_url(dag_id, word), fields=fields, preview={"What happens": what})
    changed = set_paused(state(request).database, dag_id, paused, now=_now(request), who=viewer.who)
    text = f"{dag_id}: {word}d" if changed else f"{dag_id}: already {word}d"
    return Page(response=redirect_with_notice(request, _back(fields, "/"), text))


def _back(fields: dict, default: str) -> str:
    return access.safe_next(_one(fields, "next") or default)


# -- trigger -----------------------------------------------------------------------------------

@router.post("/dags/{dag_id:dagkey}/trigger")
async def trigger(request: Request, dag_id: str):
    return await _act(request, lambda viewer, fields: _trigger(request, viewer, fields, dag_id))


def _trigger(request: Request, viewer, fields, dag_id: str) -> Page:
    access.require(viewer, OPERATE)
    zone = _dag_zone(request, dag_id, viewer)
    conf_text = _one(fields, "conf")
    conf = read_json_object(conf_text, "conf", max_bytes=MAX_JSON_BYTES) if conf_text else None
    date_text = _one(fields, "logical_date")
    try:
        when = parse_instant(date_text, zone) if date_text else None
    except ValueError as exc:
        raise InvalidInput(str(exc), field="logical_date") from None
    if fields.get("confirmed") != "yes":
        return _confirm(request, viewer, title=f"Trigger {dag_id}", question=f"Trigger a run of {dag_id}?",
                        action=dag_url(dag_id, "trigger"), fields=fields, cancel=dag_url(dag_id),
                        preview={"Logical date": f"{local_time(when, zone, seconds=True)} ({zone})" if when else "now",
                                 "Conf": json.dumps(conf, indent=2, sort_keys=True) if conf else "{}"})
    run = trigger_run(state(request).database, dag_id, now=_now(request), logical_date=when, conf=conf,
                      who=viewer.who)
    return Page(response=redirect_with_notice(request, f"/runs/{run.id}", f"triggered run {run.run_id}"))


# -- clear tasks -------------------------------------------------------------------------------

@router.post("/runs/{run_ref}/clear")
async def clear(request: Request, run_ref: str):
    return await _act(request, lambda viewer, fields: _clear(request, viewer, fields, run_ref))


def _clear(request: Request, viewer, fields, run_ref: str) -> Page:
    access.require(viewer, OPERATE)
    database = state(request).database
    tasks = _list(fields.get("task"))
    downstream = fields.get("downstream") == "on"
    failed_only = fields.get("failed_only") == "on"
    now = _now(request)
    run = _find_run(request, run_ref, viewer)
    if fields.get("confirmed") != "yes":
        planned, busy = clear_tasks(database, str(run.id), tasks or None, downstream=downstream,
                                    failed_only=failed_only, now=now, dry_run=True)
        preview = {"Task instances to clear": ", ".join(planned) or "none",
                   "Left alone (queued or running)": ", ".join(busy) or "none"}
        return _confirm(request, viewer, title=f"Clear tasks of {run.run_id}",
                        question=f"Clear {len(planned)} task instance(s) of run {run.run_id}?",
                        action=f"/runs/{run.id}/clear", fields=fields, preview=preview, danger=True,
                        cancel=f"/runs/{run.id}")
    cleared, busy = clear_tasks(database, str(run.id), tasks or None, downstream=downstream,
                                failed_only=failed_only, now=now, who=viewer.who)
    text = f"cleared {len(cleared)} task instance(s): {', '.join(cleared) or '-'}"
    if busy:
        text += f"; left alone (queued or running): {', '.join(busy)}"
    return Page(response=redirect_with_notice(request, f"/runs/{run.id}", text))


# -- stop a run --------------------------------------------------------------------------------

@router.post("/runs/{run_ref}/stop")
async def stop(request: Request, run_ref: str):
    return await _act(request, lambda viewer, fields: _stop(request, viewer, fields, run_ref))


def _stop(request: Request, viewer, fields, run_ref: str) -> Page:
    access.require(viewer, OPERATE)
    database = state(request).database
    if fields.get("confirmed") != "yes":
        run = _find_run(request, run_ref, viewer)
        with database.begin() as conn:
            active = task_instance_states(conn, run.id)
        if run.state not in RunState.ACTIVE:
            raise OperationFailed(f"run {run.run_id!r} is {run.state}: nothing to stop")
        not_started = (TIState.NONE, TIState.SCHEDULED, TIState.UP_FOR_RETRY)
        preview = {"Tries asked to stop": ", ".join(t.task_id for t in active if t.state in TIState.ACTIVE) or "none",
                   "Skipped (not started)": ", ".join(t.task_id for t in active if t.state in not_started) or "none"}
        return _confirm(request, viewer, title=f"Stop {run.run_id}", question=f"Mark run {run.run_id} stopped?",
                        action=f"/runs/{run.id}/stop", fields=fields, preview=preview, danger=True,
                        cancel=f"/runs/{run.id}")
    run = _find_run(request, run_ref, viewer)
    stopping, skipped = stop_run(database, str(run.id), now=_now(request), who=viewer.who)
    text = (f"run {run.run_id}: stop asked for {', '.join(stopping) or 'no running try'}; "
            f"skipped {', '.join(skipped) or 'nothing'}")
    return Page(response=redirect_with_notice(request, f"/runs/{run.id}", text))


# -- backfill ----------------------------------------------------------------------------------

@router.post("/dags/{dag_id:dagkey}/backfill")
async def backfill(request: Request, dag_id: str):
    return await _act(request, lambda viewer, fields: _backfill(request, viewer, fields, dag_id))


def _backfill(request: Request, viewer, fields, dag_id: str) -> Page:
    access.require(viewer, OPERATE)
    zone = _dag_zone(request, dag_id, viewer)
    start, end = _one(fields, "start"), _one(fields, "end")
    if not start:
        raise InvalidInput("give the first logical date", field="start")
    if not end:
        raise InvalidInput("give the last logical date", field="end")
    first, last = resolve_range(start, end, zone, start_field="start", end_field="end")
    reprocess = _one(fields, "reprocess") or Reprocess.NONE
    raw_max = _one(fields, "max_active_runs")
    max_active = read_integer(raw_max, "max_active_runs", minimum=1, maximum=MAX_ACTIVE_LIMIT) if raw_max else None
    conf_text = _one(fields, "conf")
    conf = read_json_object(conf_text, "conf", max_bytes=MAX_JSON_BYTES) if conf_text else None
    options = dict(start=first, end=last, now=_now(request), reprocess=reprocess, max_active_runs=max_active,
                   run_backwards=fields.get("run_backwards") == "on", conf=conf)
    database = state(request).database
    if fields.get("confirmed") != "yes":
        result = create_backfill(database, dag_id, dry_run=True, **options)
        plan = result.plan
        summary = (f"{plan.count('create')} to create, {plan.count('replace')} to replace, "
                   f"{plan.count('keep_existing')} kept, {plan.count('keep_active')} still active, "
                   f"{plan.count('not_due')} not due yet")
        return Page("backfill_plan.html", {
            "title": f"{dag_id}: backfill plan", "dag_id": dag_id, "zone": zone, "plan": plan.entries,
            "summary": summary, "hidden": [(k, v) for k, v in fields.items()
                                           if k not in (access.CSRF_FIELD, "confirmed")],
            "creates": len(plan.to_run)})
    result = create_backfill(database, dag_id, who=viewer.who, **options)
    return Page(response=redirect_with_notice(
        request, "/backfills", f"backfill {result.backfill_id} of {dag_id}: {len(result.plan.to_run)} run(s)"))


# -- signals -----------------------------------------------------------------------------------

@router.post("/signals/send")
async def send(request: Request):
    return await _act(request, lambda viewer, fields: _send(request, viewer, fields))


def _send(request: Request, viewer, fields) -> Page:
    access.require(viewer, SEND)
    key = _one(fields, "key")
    value_text = _one(fields, "value")
    value = parse_value(value_text, field="value") if value_text else None
    sender_id = _one(fields, "id") or None

    validate_key(key, field="key")
    validate_sender_id(sender_id, field="id")
    # the namespace it is sent in: the form's `namespace`, else the token's only one, else `default` (ADR 92)
    namespace = sending_namespace(viewer.principal, _one(fields, "namespace") or None, field="namespace")
    api = state(request)
    with api.database.begin() as conn:
        heard = [h for h in listeners(conn, key, namespace=namespace, exports=api.settings.signal_exports)
                 if access.sees(viewer, h["namespace"])]  # rules of namespaces it may not read are not named
    if fields.get("confirmed") != "yes":
        who_listens = ", ".join(f"{qualify(h['namespace'], h['dag_id'])} {h['rule']} ({h['action']})"
                                for h in heard) or \
            "no DAG listens to this key: it would be stored, nothing acts on it"
        return _confirm(request, viewer, title="Send a signal", question=f"Send signal {key} in namespace {namespace}?",
                        action="/signals/send",
                        fields=fields, cancel="/signals",
                        preview={"Value": json.dumps(value, indent=2, sort_keys=True), "Id": sender_id or "(none)",
                                 "Rules listening": who_listens})
    token = access.presented_token(request)
    with api.database.begin() as conn:
        principal = authenticate(conn, token, now=_now(request))  # the signal's source is the token's
        namespace = sending_namespace(principal, _one(fields, "namespace") or None, field="namespace")
        seq, created = send_signal(conn, key, value, sender_id=sender_id, source=principal.source, now=_now(request),
                                   namespace=namespace)
    text = f"signal {key} stored as seq {seq}" if created else f"signal {key} was stored before (seq {seq})"
    return Page(response=redirect_with_notice(request, "/signals", text, "ok" if heard else "warn"))


# -- sign in / out -----------------------------------------------------------------------------

@router.post("/login")
async def login(request: Request):
    try:
        fields = await _form(request)
        access.check_csrf(request, fields)
    except (access.CsrfRefused, InvalidInput, ValueError) as exc:
        return html(request, Page("problem.html", {"title": "Refused", "message": str(exc), "field": None}, 403), None)
    token = _one(fields, "token")
    target = access.safe_next(_one(fields, "next"))
    api = state(request)

    def check():
        with api.database.begin() as conn:
            return access.identify(conn, token or None, anonymous_read=False, now=api.clock.now())

    try:
        viewer = await run_in_threadpool(check)
    except (access.SignInNeeded, access.NotAllowed) as exc:
        page = Page("login.html", {"title": "Sign in", "next": target, "why": str(exc)}, status=401)
        return html(request, page, None)
    response = redirect_with_notice(request, target, f"signed in as {viewer.name}")
    response.set_cookie(access.TOKEN_COOKIE, token, httponly=True, samesite="lax", secure=access.is_https(request),
                        path="/", max_age=30 * 24 * 3600)
    access.rotate_csrf(request)  # every sign-in gets CSRF values of its own
    access.set_cookies(request, response)
    return response


@router.post("/logout")
async def logout(request: Request):
    try:
        fields = await _form(request)
        access.check_csrf(request, fields)
    except (access.CsrfRefused, InvalidInput, ValueError) as exc:
        return html(request, Page("problem.html", {"title": "Refused", "message": str(exc), "field": None}, 403), None)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(access.TOKEN_COOKIE, path="/")
    access.rotate_csrf(request)
    access.set_cookies(request, response)
    return response

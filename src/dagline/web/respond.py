"""The plumbing every page and action shares: one
transaction per request in the thread pool (run again after a PostgreSQL conflict, like the API's),
the viewer, the CSRF cookie, a one-shot notice after an action, and the answers to refusals: a
sign-in redirect, else a page with the error's own `http_status` (403, 404, 409, 422...)."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from dagline import errors
from dagline.db.faults import run_again_on_conflict
from dagline.domain.json_values import read_json
from dagline.errors import DaglineError, InvalidInput
from dagline.web import access
from dagline.web.render import render

log = logging.getLogger(__name__)
NOTICE_COOKIE = "dagline_notice"
MAX_NOTICE_BYTES = 4096  # what a browser keeps of one cookie


@dataclasses.dataclass
class Page:
    """What a page handler returns: a template and its context, or a ready response."""

    template: str | None = None
    context: dict = dataclasses.field(default_factory=dict)
    status: int = 200
    response: Response | None = None


def state(request: Request):
    return request.app.state.dagline


def in_transaction(request: Request, work: Callable):
    """`work(conn, viewer)` in one transaction (run again after a conflict); the viewer is checked in it."""
    api = state(request)
    token = access.presented_token(request)

    def once():
        with api.database.begin() as conn:
            viewer = access.identify(conn, token, anonymous_read=api.settings.anonymous_read, now=api.clock.now())
            return work(conn, viewer), viewer

    return run_again_on_conflict(once, what="a web UI request", pause_s=0.05)


def html(request: Request, page: Page, viewer: access.Viewer | None) -> Response:
    if page.response is not None:
        response = page.response
    else:
        notice = request.cookies.get(NOTICE_COOKIE)
        feed = request.app.state.dagline_live
        if page.context.get("live"):
            feed.ensure_started()  # from now on it counts changes: the page's stream compares (see web.live)
        context = {"viewer": viewer, "csrf": access.csrf_value(request), "path": request.url.path,
                   "url": str(request.url.path) + (f"?{request.url.query}" if request.url.query else ""),
                   "notice": _read_notice(notice), "anonymous_read": state(request).settings.anonymous_read,
                   "live_version": feed.version_for(access.namespaces(viewer) if viewer else None),
                   **page.context}
        response = HTMLResponse(render(page.template, **context), status_code=page.status)
        if notice:
            response.delete_cookie(NOTICE_COOKIE, path="/")
    access.set_cookies(request, response)
    response.headers.setdefault("Cache-Control", "no-store")  # the security headers: `api.headers`, on every answer
    return response


def _read_notice(raw: str | None) -> dict | None:
    if not raw:
        return None
    try:  # a cookie: bounded like any JSON a browser sends
        value = read_json(raw, NOTICE_COOKIE, max_bytes=MAX_NOTICE_BYTES)
        return {"text": str(value["text"])[:500], "kind": "ok" if value.get("kind") == "ok" else "warn"}
    except (InvalidInput, KeyError, TypeError, AttributeError):
        return None


def redirect_with_notice(request: Request, target: str, text: str, kind: str = "ok") -> RedirectResponse:
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(NOTICE_COOKIE, json.dumps({"text": text, "kind": kind}), max_age=120, httponly=True,
                        samesite="strict", secure=access.is_https(request), path="/")
    return response


def identified(request: Request, work: Callable):
    """`work(viewer)` after the viewer was checked in a transaction of its own: actions call the CLI's
    domain functions, which open their own transactions (each run again after a conflict)."""
    _, viewer = in_transaction(request, lambda conn, viewer: None)
    return run_again_on_conflict(lambda: work(viewer), what="a web UI action", pause_s=0.05), viewer


async def serve_page(request: Request, handler: Callable, *, action: bool = False,
                     then: Callable[[Page], Page] | None = None) -> Response:
    """Run `handler(conn, viewer) -> Page` (an action: `handler(viewer) -> Page`, see `identified`) and
    answer with its HTML (or the refusal's page). `then(page)`, if given, runs after the transaction
    ended (in a worker thread): what may wait on something slower than the database."""
    try:
        page, viewer = await run_in_threadpool(identified if action else in_transaction, request, handler)
        if then is not None:
            page = await run_in_threadpool(then, page)
    except access.SignInNeeded as exc:
        return sign_in_redirect(request, exc.code)
    except DaglineError as exc:
        return problem(request, exc)
    return html(request, page, viewer)


TITLES = {403: "Not allowed", 404: "Not found", 409: "Not done", 413: "Too large", 422: "Invalid input",
          503: "Unavailable"}


def problem(request: Request, exc: DaglineError) -> Response:
    """The refusal's page, by the error's `http_status`: its reason, and the field at fault where there is one."""
    title = TITLES.get(exc.http_status, "Not done" if exc.http_status >= 500 else "Refused")
    return html(request, Page("problem.html", {"title": title, "message": exc.reason, "field": exc.field},
                              exc.http_status), None)


NotFound = errors.NotFound  # pages raise it for an unknown DAG, run or task: 404


def sign_in_redirect(request: Request, code: str) -> Response:
    """To the sign-in form, and back here after it; `code` chooses its message (`access.SIGN_IN_MESSAGES`)."""
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    if request.method != "GET":
        target = request.headers.get("referer", "/")
        target = "/" if "://" in target and not target.startswith(str(request.base_url)) else target
        target = "/" + target.split("://", 1)[-1].split("/", 1)[-1] if "://" in target else target
    # a first visit (a page asked for without any token) is no error: the sign-in page shows no message
    first_visit = (request.method == "GET" and not request.cookies.get(access.TOKEN_COOKIE)
                   and "authorization" not in request.headers)
    reason = "" if first_visit else f"&why={quote(code)}"
    response = RedirectResponse(f"/login?next={quote(access.safe_next(target), safe='/')}{reason}", status_code=303)
    if request.cookies.get(access.TOKEN_COOKIE):
        response.delete_cookie(access.TOKEN_COOKIE, path="/")
    return response

"""Who is asking, and may they: API tokens from `Authorization: Bearer` or the sign-in cookie, the
scope each page and action needs, and the CSRF check of every form.

- Reading a page needs a token with `read` (or `admin`); without a token only when the server runs
  with `--anonymous-read`. Actions need `operate` (pause, trigger, clear, stop, backfill) or
  `signals:send` (send a signal); anonymous visitors never act.
- Signing in stores the token in an HttpOnly cookie (`SameSite=Lax`, `Secure` over HTTPS); every
  request checks it again (`api_tokens.authenticate`), so a revoked token signs out at once.
- Namespaces (docs/adr/0050, ADR 92): a token limited to namespaces sees only those namespaces' DAGs
  (a DAG's key says whose it is: `etl` is `default`'s, `a-team/etl` a-team's), with their runs, logs
  and backfills, the signals sent within them, their pools and the platform's, and the live events of
  their changes only. Anything else answers the very 404 an unknown DAG or run does (same status,
  same words: `unknown_dag`, `store.runs.find_run`), so its existence is not revealed; a run
  id string is resolved among the visible runs only; listings leave the rest out.
- CSRF (ADR 61): a random `dagline_csrf` cookie (HttpOnly, `SameSite=Strict`), made anew at every
  sign-in and sign-out, and a form field that is an HMAC, keyed with the server's secret
  (`DAGLINE_UI_SECRET`), of that cookie and the sign-in token the request presents. A cookie planted by
  someone else, with a field of their choosing, does not match: they know neither the secret nor the
  token. A POST whose field does not match, whose `Origin` is `null` or names another host, or that the
  browser says is cross-site (`Sec-Fetch-Site`), is refused with nothing done. No server-side state:
  every replica that shares the secret checks it.
- Sign-in messages are chosen by a fixed code in the link (`/login?why=expired`): a link cannot put
  words of its own on the sign-in page.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from fastapi import Request

from dagline.domain import names
from dagline.errors import AccessRefused, NotFound
from dagline.store.runs import find_run as find_run_among
from dagline.store.tokens import OPERATE, READ, SEND, Forbidden, Principal, Unauthorized, authenticate

TOKEN_COOKIE = "dagline_token"
CSRF_COOKIE = "dagline_csrf"
CSRF_FIELD = "csrf"
SCOPE_WORDS = {READ: "read the pages", OPERATE: "act on DAGs and runs", SEND: "send signals"}


class SignInNeeded(AccessRefused):
    """No usable token: the page sends the visitor to the sign-in form (an API client gets 401), which
    says why by `code` (a key of `SIGN_IN_MESSAGES`)."""

    http_status = 401

    def __init__(self, message: str, *, code: str = "required"):
        super().__init__(message)
        self.code = code


SIGN_IN_MESSAGES = {  # the only texts a link can put on the sign-in page (`/login?why=CODE`)
    "required": "To see this page, sign in with an API token (`dagline tokens create NAME --scope read`).",
    "expired": "Your token is unknown, revoked or expired: sign in with a valid one.",
    "act": "Sign in with a token that may do this (scope 'operate', or 'signals:send' to send signals).",
}


def sign_in_message(code: str | None) -> str:
    """The sign-in page's message for a code; nothing for no code or an unknown one."""
    return SIGN_IN_MESSAGES.get(code or "", "")


class NotAllowed(AccessRefused):
    """A valid token without the scope: 403."""


class CsrfRefused(AccessRefused):
    """A form without the right CSRF field, or from another origin: 403, nothing done."""


@dataclasses.dataclass(frozen=True)
class Viewer:
    """The person behind a request: a token's principal, or anonymous (None)."""

    principal: Principal | None

    @property
    def name(self) -> str:
        return self.principal.name if self.principal else "anonymous"

    def can(self, scope: str) -> bool:
        return self.principal is not None and self.principal.allows(scope)

    @property
    def who(self) -> str:
        """The event log's `who` for this person's actions (the CLI writes `cli`)."""
        return f"web:{self.name}"[:100]


def namespaces(viewer: Viewer) -> frozenset[str] | None:
    """The namespaces this viewer is limited to (None: every namespace, anonymous readers included)."""
    return viewer.principal.namespaces if viewer.principal is not None else None


def sees(viewer: Viewer, namespace: str | None) -> bool:
    return viewer.principal is None or viewer.principal.sees(namespace)


def unknown_dag(dag_id: str) -> NotFound:
    """The one refusal of a DAG a viewer cannot have: unknown, or another namespace's (same words)."""
    return NotFound(f"unknown DAG {dag_id!r} (see `dagline dags list`)")


def check_dag(viewer: Viewer, dag_id: str) -> None:
    """Refuse (`unknown_dag`) a DAG key outside the viewer's namespaces."""
    if not sees(viewer, names.namespace_of(dag_id)):
        raise unknown_dag(dag_id)


def find_run(conn, viewer: Viewer, run_ref: str):
    """The run `run_ref` names among those of the viewer's namespaces (`store.runs.find_run`): another
    namespace's run is unknown (the same words as a missing one), and never makes a run id string ambiguous."""
    return find_run_among(conn, run_ref, namespaces=namespaces(viewer))


def visible(viewer: Viewer, rows: list[dict]) -> list[dict]:
    """The rows (each with a `dag_id`: a DAG's key) of DAGs the viewer may see."""
    if namespaces(viewer) is None:
        return rows
    return [r for r in rows if sees(viewer, names.namespace_of(r["dag_id"]))]


def presented_token(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header:
        scheme, _, token = header.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return request.cookies.get(TOKEN_COOKIE) or None


def client_key(request: Request) -> str:
    """Who a request comes from, for per-client caps: its sign-in token (hashed), else its address."""
    token = presented_token(request)
    if token:
        return "token:" + hashlib.sha256(token.encode()).hexdigest()[:32]
    return "address:" + (request.client.host if request.client else "unknown")


def identify(conn, token: str | None, *, anonymous_read: bool, now) -> Viewer:
    """The viewer of a page; raises SignInNeeded or NotAllowed."""
    if token is None:
        if anonymous_read:
            return Viewer(None)
        raise SignInNeeded("sign in with an API token (`dagline tokens create NAME --scope read`)")
    try:
        principal = authenticate(conn, token, now=now)
    except Unauthorized as exc:
        raise SignInNeeded(str(exc), code="expired") from None
    if not principal.allows(READ):
        raise NotAllowed(f"token {principal.name!r} may not read: it needs the scope 'read' "
                         f"(it has {' '.join(sorted(principal.scopes))!r})")
    return Viewer(principal)


def require(viewer: Viewer, scope: str) -> None:
    """Refuse an action this viewer may not take (SignInNeeded for anonymous visitors)."""
    if viewer.principal is None:
        raise SignInNeeded(f"sign in with a token that may {SCOPE_WORDS.get(scope, scope)} (scope {scope!r})",
                           code="act")
    try:
        viewer.principal.require(scope)
    except Forbidden as exc:
        raise NotAllowed(str(exc)) from None


def _browser_nonce(request: Request) -> str:
    """This browser's CSRF cookie: the one it sent, or a new one (set on the response by `set_cookies`)."""
    made = getattr(request.state, "new_csrf", None)
    if made is not None:
        return made
    current = request.cookies.get(CSRF_COOKIE)
    if current and 20 <= len(current) <= 100:
        return current
    return rotate_csrf(request)


def rotate_csrf(request: Request) -> str:
    """A new CSRF cookie for this browser (at sign-in and sign-out): forms of earlier pages stop working."""
    made = secrets.token_urlsafe(32)
    request.state.new_csrf = made
    return made


def _signature(key: bytes, nonce: str, token: str | None) -> str:
    digest = hmac.new(key, b"dagline-csrf\0" + nonce.encode() + b"\0" + (token or "").encode(), hashlib.sha256)
    return base64.urlsafe_b64encode(digest.digest()).decode().rstrip("=")


def _key(request: Request) -> bytes:
    return request.app.state.dagline.csrf_key


def csrf_value(request: Request, token: str | None = None) -> str:
    """The CSRF field of this browser's forms: bound to its cookie and to the token it signs in with
    (`token`, default: the one this request presents)."""
    return _signature(_key(request), _browser_nonce(request), token if token is not None else presented_token(request))


def check_csrf(request: Request, form) -> None:
    cookie = request.cookies.get(CSRF_COOKIE) or ""
    sent = str(form.get(CSRF_FIELD) or "")
    expected = _signature(_key(request), cookie, presented_token(request)) if cookie else ""
    if not expected or not sent or not hmac.compare_digest(expected.encode(), sent.encode()):
        raise CsrfRefused("the form's CSRF field does not match this browser's sign-in: reload the page and try again")
    origin = request.headers.get("origin")
    if origin == "null":  # a sandboxed frame, a data: URL, a file: page: never one of these pages
        raise CsrfRefused("a form sent from an opaque origin (Origin: null): refused")
    if request.headers.get("sec-fetch-site", "").lower() == "cross-site":
        raise CsrfRefused("a form sent from another site: refused")
    if origin:
        host = request.headers.get("x-forwarded-host") or request.headers.get("host") or ""
        if urlsplit(origin).netloc.lower() != host.split(",")[0].strip().lower():
            raise CsrfRefused(f"a form sent from {origin} to {host}: refused")


def is_https(request: Request) -> bool:
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return request.url.scheme == "https" or forwarded == "https"


def set_cookies(request: Request, response) -> None:
    """Give the browser its CSRF cookie if this request made one."""
    made = getattr(request.state, "new_csrf", None)
    if made:
        response.set_cookie(CSRF_COOKIE, made, httponly=True, samesite="strict", secure=is_https(request), path="/")


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a path on this site only (never another host)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target

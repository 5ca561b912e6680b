"""The application factory: `create_app(database, settings)` returns the FastAPI app with the signal
routes, bearer-token authentication and dagline's JSON errors (every `DaglineError` answered by its
`http_status`: `api.errors`), and the web UI's pages (`dagline.web`). Every request passes the input
boundary first (`api.boundary`: no NUL, lone surrogate or undecodable byte in the URL or a header); the
document at `/api/openapi.json` is built from `api.schema`.

Authentication (`ApiState.principal`): `Authorization: Bearer <token>`, checked inside the request's
own transaction (`api_tokens.authenticate`). No token, or a wrong, revoked or expired one, is 401;
a token without the scope the route needs is 403. Without a token a GET is allowed only when
`settings.anonymous_read` is on; writes never are. A presented token is always checked, even where
anonymity would do. Routes do their database work in the thread pool, one transaction per request;
a transaction PostgreSQL rolled back for a deadlock or serialization failure runs again (up to 4
times), and a database that cannot be reached is 503 (the client retries, with the same ids).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from dagline.api import errors, schema
from dagline.api.boundary import InputBoundary
from dagline.api.headers import SecurityHeaders
from dagline.api.settings import ApiSettings
from dagline.api.signals import router as signals_router
from dagline.clock import Clock, SystemClock
from dagline.db.engine import Database
from dagline.db.faults import first_line, is_transient, run_again_on_conflict
from dagline.errors import DaglineError, DatabaseUnreachable
from dagline.store.secrets import shared_secret
from dagline.store.tokens import Principal, authenticate
from dagline.web import mount as mount_web_ui

log = logging.getLogger(__name__)

ANONYMOUS = Principal(0, "anonymous", frozenset(), source="anonymous")


@dataclasses.dataclass
class ApiState:
    database: Database
    settings: ApiSettings
    clock: Clock
    _csrf_key: bytes | None = None

    @property
    def csrf_key(self) -> bytes:
        """The key of the web UI's CSRF values (`web.access`): from `DAGLINE_UI_SECRET`, else the secret
        the replicas share in the database (made at first use; read once per process)."""
        if self._csrf_key is None:
            secret = self.settings.ui_secret
            if not secret:
                with self.database.begin() as conn:
                    secret = shared_secret(conn, "ui-csrf", now=self.clock.now())
            self._csrf_key = hashlib.sha256(b"dagline-ui\0" + secret.encode()).digest()
        return self._csrf_key

    @staticmethod
    def bearer(request: Request) -> str | None:
        header = request.headers.get("authorization")
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise errors.unauthorized("the Authorization header must be 'Bearer <token>'")
        return token.strip()

    def principal(self, conn, token: str | None, scope: str, *, anonymous_ok: bool = False) -> Principal:
        if token is None and anonymous_ok:
            return ANONYMOUS
        principal = authenticate(conn, token, now=self.clock.now())  # Unauthorized: 401, Forbidden: 403
        principal.require(scope)
        return principal

    def in_transaction(self, work):
        """`work()` (one transaction), run again after a conflict; an unreachable database is a 503."""
        try:
            return run_again_on_conflict(work, what="an API request", pause_s=0.05)
        except Exception as exc:
            outage = isinstance(exc, DatabaseUnreachable) or (not isinstance(exc, DaglineError) and is_transient(exc))
            if not outage:
                raise  # a DaglineError is answered by its own http_status (`errors.answer`)
            raise errors.ApiError(503, f"the database failed ({first_line(exc)}); nothing was stored: try again",
                                  headers={"Retry-After": "1"}) from None


def create_app(database: Database, settings: ApiSettings | None = None, *, clock: Clock | None = None) -> FastAPI:
    """The dagline HTTP API on `database`, and the web UI on the same app (`dagline.web`)."""
    # no /api/docs: Swagger UI would load a script from a CDN on the UI's origin (ADR 63); the document is served
    app = FastAPI(title="dagline", version="1", docs_url=None, openapi_url="/api/openapi.json", redoc_url=None)
    app.state.dagline = ApiState(database, settings or ApiSettings(), clock or SystemClock())
    app.add_exception_handler(DaglineError, errors.answer)  # by its http_status, reason and field
    app.add_exception_handler(RequestValidationError, errors.invalid_request)  # the same shape as ours
    app.include_router(signals_router)
    mount_web_ui(app)
    app.add_middleware(InputBoundary)  # NUL and lone surrogates in the URL, before routing
    app.add_middleware(SecurityHeaders)  # outermost: every answer, JSON, errors and refused URLs included

    @app.get("/api/v1/health", summary="Liveness", response_model=schema.Health, responses=schema.errors(422))
    def health():
        return {"status": "ok"}

    @app.exception_handler(404)
    async def not_found(_request: Request, _exc):
        return JSONResponse({"error": "no such path (see /api/openapi.json)", "field": None}, status_code=404)

    return app

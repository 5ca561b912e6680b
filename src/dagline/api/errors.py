"""The API's errors as HTTP answers: one JSON shape, `{"error": <message>, "field": <field or null>}`.

Every `DaglineError` is answered by its own `http_status`, `reason` and `field` (`answer`); `ApiError`
is one the API makes itself for what only HTTP knows (a body that is not JSON, a token header). 400 a
body that is not JSON; 401 no valid token (with `WWW-Authenticate: Bearer`); 403 a token without the
scope; 404 no such signal; 409 the same key and id sent before with another value; 413 a body, batch or
value over its limit; 422 a well-formed body with an invalid field (the field is named, e.g.
`[3].key`); 503 the database cannot be reached (with `Retry-After`). Every one of them is answered
before anything is stored, or with the transaction rolled back.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from dagline.errors import DaglineError


class ApiError(DaglineError):
    """An answer the API makes itself: its status, message, field and headers."""

    def __init__(self, status: int, message: str, *, field: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status = self.http_status = status
        self.exit_code = 2 if 400 <= status < 500 else 1
        self.message = message
        self.field = field
        self.headers = headers


def bad_request(message: str, field: str | None = None) -> ApiError:
    return ApiError(400, message, field=field)


def unprocessable(message: str, field: str | None = None) -> ApiError:
    return ApiError(422, message, field=field)


def too_large(message: str, field: str | None = None) -> ApiError:
    return ApiError(413, message, field=field)


def unauthorized(message: str) -> ApiError:
    return ApiError(401, message, headers={"WWW-Authenticate": "Bearer"})


def conflict(message: str, field: str | None = None) -> ApiError:
    return ApiError(409, message, field=field)


async def answer(_request: Request, exc: DaglineError) -> JSONResponse:
    headers = dict(getattr(exc, "headers", None) or {})
    if exc.http_status == 401:
        headers.setdefault("WWW-Authenticate", "Bearer")  # a 401 says how to authenticate (RFC 9110)
    return JSONResponse({"error": exc.reason, "field": exc.field}, status_code=exc.http_status,
                        headers=headers or None)


async def invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
    """A parameter FastAPI itself checked (a route's typed parameter), answered in dagline's shape: 422
    naming the first parameter at fault."""
    first = (exc.errors() or [{}])[0]
    where = [str(step) for step in first.get("loc", ()) if step not in ("path", "query", "body", "header")]
    return JSONResponse({"error": str(first.get("msg", "invalid")), "field": ".".join(where) or None},
                        status_code=422)

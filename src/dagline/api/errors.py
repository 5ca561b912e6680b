"""The API's errors as HTTP answers: one JSON shape, `{"error": <message>, "field": <field or null>}`.

400 a body that is not JSON; 401 no valid token (with `WWW-Authenticate: Bearer`); 403 a token
without the scope; 409 the same key and id sent before with another value; 413 a body, batch or
value over its limit; 422 a well-formed body with an invalid field (the field is named, e.g.
`[3].key`). Every one of them is answered before anything is stored, or with the transaction
rolled back.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, field: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status = status
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


def forbidden(message: str) -> ApiError:
    return ApiError(403, message)


def conflict(message: str, field: str | None = None) -> ApiError:
    return ApiError(409, message, field=field)


async def answer(_request: Request, exc: ApiError) -> JSONResponse:
    return JSONResponse({"error": exc.message, "field": exc.field}, status_code=exc.status, headers=exc.headers)

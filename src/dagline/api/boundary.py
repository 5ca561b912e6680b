"""The URL's part of the input boundary: an ASGI middleware, outermost on the app (API and web UI alike),
that refuses a request whose path, query or headers hold what no handler may see, before routing.

A path segment or a query parameter (its name or its value) with a NUL character or a lone surrogate, or
a header value with a NUL character, is answered 422 `{"error": ..., "field": ...}` (the API's error
shape, `api.errors`) naming `path`, the query parameter or the header; nothing runs, nothing is stored.
The rules and words are `domain.input_values`' (`text_problem`), the reader every other input goes
through, so a NUL in `/runs/a%00b` is refused the same on SQLite (which would store it) and PostgreSQL
(which would fail on it). Bytes that are not UTF-8 (`%ED%A0%80`, `%FF`) are read as lone surrogates,
so they are refused too, rather than quietly turned into U+FFFD.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qsl, unquote

from dagline.domain.input_values import text_problem
from dagline.domain.json_values import path as field_path


class InputBoundary:
    """Wraps an ASGI app; HTTP requests with a refused URL or header get their 422 here."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            refused = url_problem(scope)
            if refused is not None:
                field, reason = refused
                body = json.dumps({"error": reason, "field": field}).encode()
                await send({"type": "http.response.start", "status": 422,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode()),
                                        (b"cache-control", b"no-store")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def url_problem(scope) -> tuple[str, str] | None:
    """(field, reason) of the first refused part of an HTTP request's URL or headers, else None."""
    raw_path = scope.get("raw_path")  # as sent: undecodable bytes become lone surrogates here, so are refused
    path = (unquote(raw_path.decode("latin-1"), errors="surrogateescape") if raw_path is not None
            else scope.get("path", ""))
    problem = text_problem(path, "the URL's path")
    if problem:
        return "path", problem
    query = scope.get("query_string", b"").decode("latin-1")
    for name, value in parse_qsl(query, keep_blank_values=True, encoding="utf-8", errors="surrogateescape"):
        name_problem = text_problem(name, "a query parameter's name")
        if name_problem:
            return "query", name_problem
        problem = text_problem(value, f"the query parameter {field_path(name)}")
        if problem:
            return field_path(name), problem
    for name, value in scope.get("headers", ()):
        if b"\x00" in value:
            header = name.decode("latin-1").lower()
            return header, f"a NUL character (\\u0000) in the header {header}"
    return None


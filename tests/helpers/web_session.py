"""Signing in to the web UI through its form, as a browser does: the CSRF field comes from the page (it is
bound to the sign-in, ADR 61), never from a cookie."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient


def csrf_field(page: str) -> str:
    """The CSRF value a page's forms carry."""
    return re.search(r'name="csrf" value="([^"]+)"', page).group(1)


def sign_in(client: TestClient, token: str) -> str:
    """Sign in through the form; returns the CSRF field the pages carry from then on."""
    answer = client.post("/login", data={"token": token, "csrf": csrf_field(client.get("/login").text), "next": "/"})
    assert answer.status_code == 303 and answer.headers["location"] == "/", answer.text
    return csrf_field(client.get("/").text)

"""Mounting the UI on the API's FastAPI app (`api.create_app` calls `mount`): the pages, the actions,
the static files (`/ui/static`, package data) and the live feed of this app."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.staticfiles import StaticFiles

from dagline.web import actions, pages
from dagline.web.live import LiveFeed


def mount(app: FastAPI) -> None:
    """Add the UI's pages, actions, static files and live events to `app` (made by `api.create_app`)."""
    settings = app.state.dagline.settings
    app.state.dagline_live = LiveFeed(app.state.dagline.database, max_streams=settings.max_event_streams,
                                      max_per_client=settings.max_event_streams_per_client)
    # pages compress about 20 to 1 (a 1,000-run grid: 600 KB of HTML); event streams are never compressed
    app.add_middleware(GZipMiddleware, minimum_size=4096, compresslevel=5)
    app.mount("/ui/static", StaticFiles(packages=[("dagline.web", "static")]), name="ui-static")
    app.include_router(pages.router)
    app.include_router(actions.router)

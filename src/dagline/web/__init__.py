"""The web UI: server-rendered pages (Jinja2, every value autoescaped) on the same FastAPI app as the
HTTP API, so `dagline api` and every operator replica serve both. `mount(app)` adds its routes.

Role in the flow of data: it reads stored state through the read models (`dagline.store.read_models`,
`dagline.store.pages`, `dagline.store.signals`, `dagline.store.pools`, `dagline.store.waiting`) and acts
through the very functions the command line calls (`runs.trigger_run`, `runs.clear_tasks`, `runs.stop_run`,
`backfill.create_backfill`, `dagstore.set_paused`, `signal_store.send_signal`), so an action taken
here is recorded in the event log exactly as the CLI's is, with `web:<token name>` as who did it. It
builds no SQL: its statements are named functions of `dagline.store` (and `dagline.db.notify`'s LISTEN).

Modules: `app` (mount), `respond` (the shared request plumbing), `access` (who is asking: API tokens
from a header or a cookie, scopes, CSRF), `render` (the Jinja2 environment and formatting), `charts`
(graph layout, Gantt and duration charts as SVG geometry, pure), `live` (server-sent events fed by
PostgreSQL NOTIFY, or by polling on SQLite, told per namespace), `logs` (a try's log by offset), `urls`
(a DAG's key in an address), `pages` (GET routes), `actions` (POST routes, each behind a confirmation).
"""

from dagline.web.app import mount

__all__ = ["mount"]

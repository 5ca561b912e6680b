"""`dagline api` (the HTTP API on uvicorn) and `dagline tokens` (create, list, revoke API tokens).
Contract: shared/CLI.md; the model: README "Signals over HTTP"."""

from __future__ import annotations

import gc

import click

from dagline.cli.base import (
    Context,
    Integer,
    emit_json,
    json_option,
    log_folder_option,
    main,
    make_clock,
    now_option,
    print_table,
)


@main.command("api", retry_conflicts=False)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0: every one).")
@click.option("--port", type=Integer(0, 65535), default=8793, show_default=True)
@click.option("--anonymous-read", is_flag=True,
              help="Allow reading (GET, the web UI's pages) without a token; writes and actions always need one.")
@log_folder_option
@click.pass_obj
def api_cmd(obj: Context, host, port, anonymous_read, log_folder):
    """Serve the HTTP API (POST/GET /api/v1/signals with bearer tokens, `dagline tokens create`) and the
    web UI (http://HOST:PORT/). SIGTERM or Ctrl-C finishes the requests in flight, then stops."""
    from dagline.api import ApiSettings, create_app
    from dagline.api.server import serve

    settings = ApiSettings.from_env(anonymous_read=anonymous_read or None, log_folder=log_folder)
    database = obj.db()
    click.echo(f"dagline API on http://{host}:{port}/api/v1/signals, web UI on http://{host}:{port}/"
               + (" (anonymous reads allowed)" if settings.anonymous_read else ""), err=True)
    app = create_app(database, settings)
    gc.freeze()  # start-up objects (modules, FastAPI, SQLAlchemy) leave the collector's scans: no 50-70 ms pauses
    serve(app, host=host, port=port)


@main.group()
def tokens():
    """API tokens: named, scoped, stored hashed; the secret is printed once."""


@tokens.command("create")
@click.argument("name")
@click.option("--scope", "scopes", multiple=True, metavar="SCOPE",
              help="signals:send (the default), read, operate or admin; repeat for several.")
@click.option("--namespace", "namespaces", multiple=True, metavar="NS",
              help="Limit the token to this Kubernetes namespace's DAGs, runs, logs and signals; repeat for several "
                   "(default: every namespace).")
@now_option
@json_option
@click.pass_obj
def tokens_create(obj: Context, name, scopes, namespaces, now, as_json):
    """Create a token and print its secret (the only time it is shown: store it now)."""
    from dagline.store.tokens import SEND, create_token, validate_name, validate_namespaces, validate_scopes

    validate_name(name)
    scope_set = validate_scopes(scopes or (SEND,))
    limited = validate_namespaces(namespaces)
    with obj.db().begin() as conn:
        token = create_token(conn, name, scope_set, now=make_clock(now).now(), namespaces=limited)
    listed = sorted(limited) if limited else None
    if as_json:
        emit_json({"name": name, "scope": " ".join(sorted(scope_set)), "namespaces": listed, "token": token})
        return
    click.echo(token)
    click.echo(f"token {name!r} ({' '.join(sorted(scope_set))}"
               f"{'; namespaces ' + ', '.join(listed) if listed else ''}) created: this is the only time its secret "
               "is shown; send it as 'Authorization: Bearer <token>'", err=True)


@tokens.command("list")
@json_option
@click.pass_obj
def tokens_list(obj: Context, as_json):
    """Named tokens (never their secrets)."""
    from dagline.store.tokens import list_tokens

    with obj.db().begin() as conn:
        rows = list_tokens(conn)
    if as_json:
        emit_json(rows)
    else:
        print_table([{**r, "namespaces": " ".join(r["namespaces"] or ["(all)"])} for r in rows],
                    ["name", "scope", "namespaces", "created_at", "last_used_at"])


@tokens.command("revoke")
@click.argument("name")
@click.pass_obj
def tokens_revoke(obj: Context, name):
    """Revoke a token: it is refused (401) from the next request on."""
    from dagline.store.tokens import revoke_token

    with obj.db().begin() as conn:
        revoke_token(conn, name)
    click.echo(f"token {name!r} revoked")

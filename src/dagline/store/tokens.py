"""API tokens: who may call the HTTP API, stored so a leaked database does not leak a usable token.

A token is `dgl_<row id>_<secret>`: the row id names its `api_token` row (one primary-key look-up),
the secret is 32 random bytes (URL-safe base64); only `sha256:<hex of SHA-256(secret)>` is stored,
and the hash of a presented secret is compared with `hmac.compare_digest` (constant time). SHA-256
without a salt or key stretching is right for random secrets of 256 bits (nothing to guess; a slow
hash would only slow down every request). The `dgl_` prefix lets secret scanners recognise one.

Scopes (space-separated in `api_token.scope`): `signals:send` (POST signals, the web UI's "send a
signal"), `read` (GET the signal log, every page of the web UI), `operate` (the web UI's actions on
DAGs and runs: pause, trigger, clear, stop, backfill), `admin` (everything, including what later
versions add). Named tokens are made by
`dagline tokens create NAME [--scope ...]` (default `signals:send`) and end with `tokens revoke`.

Namespaces (`api_token.namespaces`, ADR 92): a named token may be limited to namespaces
(`dagline tokens create NAME --namespace a-team`, repeatable). Such a token sees and acts on the DAGs
of those namespaces (and their runs, logs and backfills) and nothing else: anything of another
namespace answers as if it did not exist (404). It sends signals in one of its namespaces
(`sending_namespace`: the only one, or the one it names; another is refused, 403, whatever that
namespace holds) and reads only signals sent in them. A try's token is limited to its DAG's namespace.

A try's token (`issue_try_tokens`, called when a try is launched) has the scope `signals:send`,
names that try (`ti_id`, `try_number`) and is valid only while the task instance is still on that
try and queued or running: it expires when the try ends, with no clock involved. Signals it sends
have the source `try:<dag_id>/<run_id>/<task_id>/<try_number>` and carry the run and task
instance ids (so `scope: run` rules can tell a run's own signals). Ended tries' tokens are deleted
by `delete_ended_try_tokens` (scheduler housekeeping).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Sequence

from sqlalchemy import bindparam, delete, insert, select, update
from sqlalchemy.engine import Connection

from dagline.db.bulk import insert_rows
from dagline.db.models import api_token_t, dag_run_t, ti_t
from dagline.domain import names
from dagline.domain.states import TIState
from dagline.errors import AccessRefused, InvalidInput, NotFound, OperationFailed
from dagline.times import isoformat

SEND = "signals:send"
READ = "read"
OPERATE = "operate"
ADMIN = "admin"
SCOPES = (SEND, READ, OPERATE, ADMIN)
PREFIX = "dgl_"
TRY_NAME_PREFIX = "try:"
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]*")
MAX_NAME_LENGTH = 100
_TOKEN_RE = re.compile(r"dgl_(?P<id>[0-9]{1,18})_(?P<secret>[A-Za-z0-9_-]{20,100})")
LAST_USED_EVERY = dt.timedelta(minutes=1)  # `last_used_at` is written at most this often per token


class Unauthorized(AccessRefused):
    """No valid token (missing, malformed, unknown, revoked or expired): HTTP 401."""

    http_status = 401


class Forbidden(AccessRefused):
    """A valid token without the scope the request needs: HTTP 403."""


@dataclasses.dataclass(frozen=True)
class Principal:
    """Who is calling: a named token or a try's token."""

    token_id: int
    name: str
    scopes: frozenset[str]
    source: str  # the signal source it stands for
    dag_run_id: int | None = None
    ti_id: int | None = None
    namespaces: frozenset[str] | None = None  # None: every namespace (and the DAGs of none)

    def sees(self, namespace: str | None) -> bool:
        """Whether this principal may see (and, with the scope, act on) a DAG owned by `namespace`."""
        return self.namespaces is None or namespace in self.namespaces

    def allows(self, scope: str) -> bool:
        return ADMIN in self.scopes or scope in self.scopes

    def require(self, scope: str) -> None:
        if not self.allows(scope):
            raise Forbidden(f"token {self.name!r} has scope {' '.join(sorted(self.scopes))!r}; this needs {scope!r}")


def sending_namespace(principal: Principal, requested: str | None, *, field: str = "namespace") -> str:
    """The namespace a principal's signal is sent in: `requested` if it may send there, else its only
    namespace, else `default` for an unlimited principal. A principal limited to several must name one
    (InvalidInput, 422, naming `field`); one outside its namespaces is refused (`Forbidden`, 403, naming
    only what the request said: the answer is the same whatever that namespace holds)."""
    if requested is not None:
        names.check_namespace(requested, field=field)
        if not principal.sees(requested):
            refused = Forbidden(f"token {principal.name!r} may not send signals in namespace {requested!r}")
            refused.field = field
            raise refused
        return requested
    if principal.namespaces is None:
        return names.DEFAULT_NAMESPACE
    if len(principal.namespaces) == 1:
        [only] = principal.namespaces
        return only
    raise InvalidInput(f"token {principal.name!r} may send in namespaces {', '.join(sorted(principal.namespaces))}: "
                       "say which one", field=field)


def hash_secret(secret: str) -> str:
    return "sha256:" + hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _new_secret() -> str:
    return secrets.token_urlsafe(32)


def _token(token_id: int, secret: str) -> str:
    return f"{PREFIX}{token_id}_{secret}"


def validate_scopes(scopes: Iterable[str], *, field: str = "--scope") -> frozenset[str]:
    found = frozenset(scopes)
    if not found:
        raise InvalidInput(f"give at least one scope: {', '.join(SCOPES)}", field=field)
    unknown = sorted(found - set(SCOPES))
    if unknown:
        raise InvalidInput(f"unknown scope {unknown[0]!r}: one of {', '.join(SCOPES)}", field=field)
    return found


def validate_name(name: str, *, field: str = "NAME") -> str:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or len(name) > MAX_NAME_LENGTH:
        raise InvalidInput(f"{name!r} is not a token name: lowercase letters, digits, '.', '_' and '-', at most "
                           f"{MAX_NAME_LENGTH} characters, starting with a letter or digit", field=field)
    return name


_NAMESPACE_RE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # a Kubernetes namespace: a DNS-1123 label
MAX_TOKEN_NAMESPACES = 8


def validate_namespaces(namespaces: Iterable[str] | None, *, field: str = "--namespace") -> frozenset[str] | None:
    """None (no limit) or the namespaces, each a DNS-1123 label, at most MAX_TOKEN_NAMESPACES."""
    if namespaces is None:
        return None
    found = frozenset(namespaces)
    if not found:
        return None
    for namespace in sorted(found):
        if not isinstance(namespace, str) or not _NAMESPACE_RE.fullmatch(namespace):
            raise InvalidInput(f"{namespace!r} is not a namespace name: lowercase letters, digits and '-', at most "
                               "63 characters, starting and ending with a letter or digit", field=field)
    if len(found) > MAX_TOKEN_NAMESPACES:
        raise InvalidInput(f"{len(found)} namespaces; a token may be limited to at most {MAX_TOKEN_NAMESPACES}",
                           field=field)
    return found


def create_token(conn: Connection, name: str, scopes: Iterable[str], *, now: dt.datetime,
                 namespaces: Iterable[str] | None = None) -> str:
    """Store a named token, limited to `namespaces` if given; returns the token (the only time it exists
    in clear)."""
    validate_name(name)
    scope_set = validate_scopes(scopes)
    limited = validate_namespaces(namespaces)
    taken = conn.execute(select(api_token_t.c.id).where(api_token_t.c.name == name)).first()
    if taken is not None:
        raise OperationFailed(f"a token named {name!r} exists already (revoke it first, or choose another name)")
    secret = _new_secret()
    token_id = conn.execute(insert(api_token_t).values(
        name=name, secret_hash=hash_secret(secret), scope=" ".join(sorted(scope_set)), created_at=now,
        namespaces=" ".join(sorted(limited)) if limited else None,
    ).returning(api_token_t.c.id)).scalar_one()
    return _token(token_id, secret)


def list_tokens(conn: Connection) -> list[dict]:
    """Named tokens (never their secrets; try tokens are not listed), oldest first."""
    t = api_token_t.c
    rows = conn.execute(select(t.name, t.scope, t.namespaces, t.created_at, t.last_used_at, t.expires_at,
                               t.revoked_at).where(t.ti_id.is_(None)).order_by(t.id)).all()
    return [{"name": r.name, "scope": r.scope, "namespaces": r.namespaces.split() if r.namespaces else None,
             "created_at": isoformat(r.created_at),
             "last_used_at": isoformat(r.last_used_at), "expires_at": isoformat(r.expires_at),
             "revoked_at": isoformat(r.revoked_at)} for r in rows]


def revoke_token(conn: Connection, name: str) -> None:
    """Delete a named token: requests presenting it get 401 from the next one on. The row goes (not
    only marked), so the name can be used again."""
    t = api_token_t.c
    gone = conn.execute(delete(api_token_t).where(t.name == name, t.ti_id.is_(None))).rowcount
    if not gone:
        raise NotFound(f"no token named {name!r} (see `dagline tokens list`)")


def authenticate(conn: Connection, token: str | None, *, now: dt.datetime) -> Principal:
    """The principal a bearer token stands for; `Unauthorized` if there is none."""
    if not token:
        raise Unauthorized("no token: send 'Authorization: Bearer <token>' (see `dagline tokens create`)")
    match = _TOKEN_RE.fullmatch(token.strip())
    if match is None:
        raise Unauthorized("malformed token: dagline tokens look like dgl_<number>_<secret>")
    t = api_token_t.c
    row = conn.execute(_TOKEN_BY_ID, {"id": int(match["id"])}).first()
    presented = hash_secret(match["secret"])
    stored = row.secret_hash if row is not None else hash_secret(_new_secret())  # same work either way
    if row is None or not hmac.compare_digest(presented.encode(), stored.encode()):
        raise Unauthorized("unknown, revoked or expired token (a try's token ends with its try)")
    if row.revoked_at is not None:
        raise Unauthorized(f"token {row.name!r} was revoked")
    if row.expires_at is not None and now >= row.expires_at:
        raise Unauthorized(f"token {row.name!r} expired at {isoformat(row.expires_at)}")
    scopes = frozenset(row.scope.split())
    if row.ti_id is None:
        principal = Principal(row.id, row.name, scopes, source=f"token:{row.name}",
                              namespaces=frozenset(row.namespaces.split()) if row.namespaces else None)
    else:
        principal = _try_principal(conn, row)
    if row.last_used_at is None or now - row.last_used_at >= LAST_USED_EVERY:
        conn.execute(update(api_token_t).where(t.id == row.id).values(last_used_at=now))
    return principal


_TOKEN_BY_ID = select(api_token_t).where(api_token_t.c.id == bindparam("id"))  # built once: every request


def _try_principal(conn: Connection, row) -> Principal:
    ti = conn.execute(
        select(ti_t.c.id, ti_t.c.dag_id, ti_t.c.task_id, ti_t.c.try_number, ti_t.c.state, ti_t.c.dag_run_id,
               dag_run_t.c.run_id)
        .join(dag_run_t, dag_run_t.c.id == ti_t.c.dag_run_id).where(ti_t.c.id == row.ti_id)).first()
    if ti is None or ti.try_number != row.try_number or ti.state not in (TIState.QUEUED, TIState.RUNNING):
        raise Unauthorized("this try's token expired: the try has ended")
    source = f"try:{ti.dag_id}/{ti.run_id}/{ti.task_id}/{ti.try_number}"
    # limited to its DAG's namespace (the DAG's key carries it): it sends there and nowhere else
    return Principal(row.id, row.name, frozenset({SEND}), source=source, dag_run_id=ti.dag_run_id, ti_id=ti.id,
                     namespaces=frozenset({names.namespace_of(ti.dag_id)}))


def issue_try_tokens(conn: Connection, tries: Sequence[tuple[int, int]], *, now: dt.datetime) -> dict[int, str]:
    """One token per (ti id, try number), stored hashed in one statement; returns ti id -> token."""
    if not tries:
        return {}
    made = []
    for ti_id, try_number in tries:
        secret = _new_secret()
        made.append((ti_id, secret, dict(
            name=f"{TRY_NAME_PREFIX}{ti_id}.{try_number}.{secrets.token_hex(4)}", secret_hash=hash_secret(secret),
            scope=SEND, created_at=now, ti_id=ti_id, try_number=try_number)))
    ids = dict(insert_rows(conn, api_token_t, [values for _, _, values in made], returning=("secret_hash", "id")))
    return {ti_id: _token(ids[values["secret_hash"]], secret) for ti_id, secret, values in made}


def delete_ended_try_tokens(conn: Connection, *, limit: int = 1000) -> int:
    """Delete the tokens of tries that have ended (they no longer authenticate anyway); how many."""
    t = api_token_t.c
    current = (select(ti_t.c.id).where(ti_t.c.id == t.ti_id, ti_t.c.try_number == t.try_number,
                                       ti_t.c.state.in_((TIState.QUEUED, TIState.RUNNING))).exists())
    ended = (select(t.id).where(t.ti_id.is_not(None), ~current).order_by(t.id).limit(limit))
    ids = list(conn.execute(ended).scalars())
    if ids:
        conn.execute(delete(api_token_t).where(t.id.in_(ids)))
    return len(ids)

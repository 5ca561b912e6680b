"""`/api/v1/signals`: sending signals (one or a batch) and reading the signal log.

POST takes one object `{"key": ..., "value": ..., "id": ..., "namespace": ...}` or a list of them
(`value` defaults to null, `id` is the sender's idempotency key, `namespace` the namespace it is sent
in). The whole request is checked first (size, JSON, every
field of every signal); then, in one transaction, the token is checked and every signal stored
(`signal_batches.send_signals`: the rules of `signal_store.send_signal`, in a few statements); the
answer is sent only after the commit, so a signal answered is a signal stored. A batch is all or
nothing: one conflicting or invalid signal stores none. The answer: 201 if any signal was new, 200
if all were already stored (a sender's retry with the same ids), each signal with its `seq`,
`created`, and a `warning` when no DAG listens to its key.

A signal lives in the namespace it is sent in (ADR 92; `tokens.sending_namespace`): the one named by
its `namespace` field, else the token's only namespace, else `default` for an unlimited token. A token
limited to several namespaces must name one (422 naming `namespace`, or `[3].namespace` in a batch);
naming one outside its namespaces is 403 naming the field, whatever that namespace holds (a try's
token is limited to its DAG's namespace). Ids are per namespace: another namespace's signal of the same
key and id is never compared with (no answer depends on it). The `warning` counts the rules that would
act: the sender's namespace's DAGs, and others' only where the key is exported to them
(`DAGLINE_SIGNAL_EXPORTS`). A limited token reads only the signals sent in its namespaces (another's
seq: the same 404 as a missing one); `namespace=` narrows the list to one namespace.

GET answers `{"signals": [...]}`, the signals after `since` (of `key`), the newest `limit` (100 by
default, at most 10,000), each with the actions it caused, as `dagline signals list --json` does.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from dagline.api import schema
from dagline.api.errors import ApiError, bad_request, conflict, too_large, unprocessable
from dagline.domain.input_values import read_integer
from dagline.domain.json_values import InvalidJson, check_value, parse_json, path
from dagline.domain.names import check_namespace
from dagline.domain.signal_exports import NO_EXPORTS, SignalExports
from dagline.domain.signal_keys import MAX_VALUE_BYTES, validate_key, validate_sender_id
from dagline.errors import DaglineError, NotFound
from dagline.limits import MAX_NESTING_DEPTH, MAX_ROW_ID
from dagline.store.signal_batches import send_signals
from dagline.store.signals import MAX_LIST, SignalConflict, list_signals, listeners, show_signal
from dagline.store.tokens import READ, SEND, sending_namespace

router = APIRouter()
FIELDS = ("key", "value", "id", "namespace")


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it is known to be over `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise too_large(f"the request body is {declared} bytes; at most {limit} are accepted (send smaller batches)")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(f"the request body is over {limit} bytes (send smaller batches)")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_signals(body: bytes, *, max_batch: int) -> tuple[list[dict], bool]:
    """The signals of a POST body, each checked; and whether it was a list. Raises a DaglineError: the
    body's own faults (not JSON, nested too deep) are 400 naming `body`; a signal's are 422 (413 for a value
    over MAX_VALUE_BYTES) naming the field, as `[3].value`."""
    try:  # the body's text rules; each part is checked below under its own name
        # the size was bounded by `read_body`; a value nests in an object in a list: two levels more
        document = parse_json(body, "body", max_bytes=len(body), max_depth=MAX_NESTING_DEPTH + 2)
    except InvalidJson as exc:
        raise bad_request(exc.reason, field="body") from None
    batch = isinstance(document, list)
    items = document if batch else [document]
    if batch and not items:
        raise unprocessable("an empty list: send at least one signal", field="body")
    if len(items) > max_batch:
        raise too_large(f"{len(items)} signals in one request; at most {max_batch}", field="body")
    signals = []
    for i, item in enumerate(items):
        where = f"[{i}]." if batch else ""
        if not isinstance(item, dict):
            raise unprocessable(f"a signal is an object with key, value and id, not {type(item).__name__}",
                                field=f"[{i}]" if batch else "body")
        unknown = sorted(set(item) - set(FIELDS))
        if unknown:
            raise unprocessable(f"unknown field {unknown[0]!r}: a signal has key, value, id and namespace",
                                field=path(*([i] if batch else []), unknown[0]))
        if "key" not in item:
            raise unprocessable("missing: every signal needs a key", field=where + "key")
        value = item.get("value")
        check_value(value, where + "value", max_bytes=MAX_VALUE_BYTES)  # InvalidJson: 413 over the size, else 422
        validate_key(item["key"], field=where + "key")  # InvalidInput: 422
        validate_sender_id(item.get("id"), field=where + "id")
        if item.get("namespace") is not None:
            check_namespace(item["namespace"], field=where + "namespace")  # InvalidInput: 422
        signals.append({"key": item["key"], "value": value, "id": item.get("id"), "namespace": item.get("namespace")})
    return signals, batch


def store_signals(conn, principal, signals: list[dict], *, now, batch: bool = True,
                  exports: SignalExports = NO_EXPORTS) -> list[dict]:
    """Store the signals in this transaction (`signal_batches.send_signals`), each in the namespace the
    principal sends it in (`tokens.sending_namespace`; nothing is stored if one is refused); one answer
    per signal."""
    signals = [{**s, "namespace": sending_namespace(principal, s.get("namespace"),
                                                    field=f"[{i}].namespace" if batch else "namespace")}
               for i, s in enumerate(signals)]
    try:
        stored = send_signals(conn, signals, source=principal.source, now=now,
                              source_dag_run_id=principal.dag_run_id, source_ti_id=principal.ti_id)
    except SignalConflict as exc:
        index = getattr(exc, "index", 0)
        raise conflict(exc.reason, field=f"[{index}].id" if batch else "id") from None
    heard = {pair: bool(listeners(conn, pair[1], namespace=pair[0], exports=exports))
             for pair in {(s["namespace"], s["key"]) for s in signals}}
    out = []
    for s, (seq, created) in zip(signals, stored, strict=True):
        row: dict[str, Any] = {"seq": seq, "key": s["key"], "id": s["id"], "created": created}
        if not heard[(s["namespace"], s["key"])]:
            row["warning"] = f"no DAG listens to {s['key']!r}: the signal is stored, nothing acts on it"
        row["namespace"] = s["namespace"]  # last, as every JSON object's namespace
        out.append(row)
    return out


@router.post("/api/v1/signals", summary="Send one signal or a batch",
             openapi_extra={"requestBody": schema.SIGNALS_BODY}, response_model=None, status_code=201,
             responses={200: {"model": schema.SignalStored | schema.SignalsStored,
                              "description": "Every signal was stored before (a retry with the same ids)"},
                        201: {"model": schema.SignalStored | schema.SignalsStored,
                              "description": "At least one signal was new"},
                        **schema.errors(400, 401, 403, 409, 413, 422, 503)})
async def post_signals(request: Request):
    api = request.app.state.dagline
    body = await read_body(request, api.settings.max_body_bytes)
    try:
        signals, batch = await run_in_threadpool(parse_signals, body, max_batch=api.settings.max_batch)
        problem = None
    except DaglineError as exc:
        signals, batch, problem = [], False, exc
    token = api.bearer(request)

    def work():
        with api.database.begin() as conn:
            principal = api.principal(conn, token, SEND)
            if problem is not None:  # the caller may write: now tell them what is wrong with the body
                raise problem
            return store_signals(conn, principal, signals, now=api.clock.now(), batch=batch,
                                 exports=api.settings.signal_exports)

    rows = await run_in_threadpool(api.in_transaction, work)
    status = 201 if any(r["created"] for r in rows) else 200
    return JSONResponse({"signals": rows} if batch else rows[0], status_code=status)


def _int_param(request: Request, name: str, *, minimum: int, maximum: int = MAX_ROW_ID) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    return read_integer(raw, name, minimum=minimum, maximum=maximum)  # InvalidInput naming `name`: 422


@router.get("/api/v1/signals", summary="The signal log", response_model=None,
            openapi_extra={"parameters": schema.SIGNAL_LIST_PARAMETERS},
            responses={200: {"model": schema.SignalList, "description": "The signals, oldest first"},
                       **schema.errors(401, 403, 422, 503)})
async def get_signals(request: Request):
    api = request.app.state.dagline
    key = request.query_params.get("key") or None
    if key is not None:
        validate_key(key, reserved_ok=True)  # InvalidInput naming `key`: 422
    namespace = request.query_params.get("namespace") or None
    if namespace is not None:
        check_namespace(namespace, field="namespace")  # 422
    since = _int_param(request, "since", minimum=0)
    limit = _int_param(request, "limit", minimum=1, maximum=MAX_LIST) or 100
    token = api.bearer(request)

    def work():
        with api.database.begin() as conn:
            who = api.principal(conn, token, READ, anonymous_ok=api.settings.anonymous_read)
            readable = who.namespaces
            if namespace is not None:  # one the token may not read: nothing, as a namespace without signals
                readable = frozenset({namespace}) & readable if readable is not None else frozenset({namespace})
            return list_signals(conn, key=key, since=since, limit=limit, namespaces=readable)

    return {"signals": await run_in_threadpool(api.in_transaction, work)}


@router.get("/api/v1/signals/{seq}", summary="One signal", response_model=None,
            openapi_extra={"parameters": schema.SIGNAL_SEQ_PARAMETERS},
            responses={200: {"model": schema.Signal, "description": "The signal and its actions"},
                       **schema.errors(401, 403, 404, 422, 503)})
async def get_signal(request: Request):
    api = request.app.state.dagline
    seq = read_integer(request.path_params["seq"], "seq", minimum=0, maximum=MAX_ROW_ID)  # 422 naming `seq`
    token = api.bearer(request)

    def work():
        with api.database.begin() as conn:
            who = api.principal(conn, token, READ, anonymous_ok=api.settings.anonymous_read)
            try:  # another namespace's signal is not found: a limited token learns nothing of it
                return show_signal(conn, seq, namespaces=who.namespaces)
            except NotFound as exc:
                raise ApiError(404, str(exc), field="seq") from None

    return await run_in_threadpool(api.in_transaction, work)

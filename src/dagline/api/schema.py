"""The API's document: pydantic models of every body and answer, the error model of every refusal, and
the parameters, as `/api/openapi.json` shows them (FastAPI builds the document from these).

The bodies are read by dagline's own bounded reader (`domain.json_values`, `api.signals.parse_signals`),
never by FastAPI's, so a deeply nested body cannot make a parser recurse: the models here describe the
request (`openapi_extra`), and the reader enforces it with dagline's messages. The parameters are read by
`domain.input_values.read_integer` for the same reason (ASCII digits, a BIGINT's range) and described here
with the same bounds. Every refusal has one shape, `Error` (`api.errors.answer`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dagline.domain.signal_keys import MAX_KEY_LENGTH, MAX_SENDER_ID_LENGTH
from dagline.limits import MAX_ROW_ID
from dagline.store.signals import MAX_LIST


class Error(BaseModel):
    """Every 4xx and 5xx answer of the API."""

    error: str = Field(description="What was refused and why.")
    field: str | None = Field(description="The input at fault (`key`, `[3].value`, `since`, `path`), or null.")


class SignalIn(BaseModel):
    """One signal to send."""

    model_config = ConfigDict(extra="forbid", title="SignalIn")

    key: str = Field(min_length=1, max_length=MAX_KEY_LENGTH, pattern=r"^[a-z0-9][a-z0-9._-]*$",
                     description="Lowercase and dotted; keys under `dagline.` are dagline's own.")
    value: Any = Field(default=None, description="Any JSON value, at most 64 KiB as compact UTF-8 JSON, "
                                                 "nested at most 32 levels, integers within a signed 64-bit "
                                                 "range, strings without NUL characters.")
    id: str | None = Field(default=None, min_length=1, max_length=MAX_SENDER_ID_LENGTH,
                           description="The sender's idempotency key: the same key and id again (in the same "
                                       "namespace) is the same signal.")
    namespace: str | None = Field(default=None, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
                                  description="The namespace it is sent in. Default: the token's only namespace; "
                                              "`default` for an unlimited token. A token limited to several "
                                              "namespaces must name one (422); one outside them is 403; a try's "
                                              "token sends only in its DAG's namespace.")


class SignalStored(BaseModel):
    """The answer for one signal sent."""

    seq: int
    key: str
    id: str | None
    created: bool = Field(description="False when the same key and id were stored before.")
    warning: str | None = Field(default=None, description="Present when no DAG listens to the key.")
    namespace: str = Field(description="The namespace it was sent in.")


class SignalsStored(BaseModel):
    """The answer for a batch: one entry per signal, in order."""

    signals: list[SignalStored]


class SignalAction(BaseModel):
    """What a rule did with a signal."""

    rule: str
    dag_id: str = Field(description="The DAG's name in its namespace.")
    run_id: str | None
    task_id: str | None
    action: str
    status: str | None
    try_number: int | None
    decided_at: str | None
    done_at: str | None
    detail: str | None
    namespace: str = Field(description="The DAG's namespace.")


class Signal(BaseModel):
    """A stored signal with the actions it caused (as `dagline signals show --json`)."""

    seq: int
    key: str = Field(description="The key, without its namespace.")
    value: Any
    id: str | None
    source: str
    sent_at: str | None
    handled_at: str | None
    actions: list[SignalAction]
    why_nothing: str | None = Field(default=None, description="Present when it caused no action: why.")
    namespace: str = Field(description="The sender's namespace.")


class SignalList(BaseModel):
    signals: list[Signal]


class Health(BaseModel):
    status: str


def _schema_of_signal_in() -> dict:
    schema = SignalIn.model_json_schema()
    schema.pop("title", None)
    return schema


SIGNALS_BODY = {
    "required": True,
    "content": {"application/json": {"schema": {
        "anyOf": [_schema_of_signal_in(),
                  {"type": "array", "items": _schema_of_signal_in(), "minItems": 1}],
    }}},
}
"""POST /api/v1/signals: one signal, or a non-empty list of them (at most `DAGLINE_API_MAX_BATCH`)."""


def integer_parameter(name: str, where: str, *, minimum: int, maximum: int = MAX_ROW_ID, required: bool = False,
                      description: str) -> dict:
    """An integer parameter as the document states it (ASCII digits within [minimum, maximum])."""
    return {"name": name, "in": where, "required": required or where == "path", "description": description,
            "schema": {"type": "integer", "minimum": minimum, "maximum": maximum}}


SIGNAL_LIST_PARAMETERS = [
    {"name": "key", "in": "query", "required": False, "description": "Only signals of this key.",
     "schema": {"type": "string", "maxLength": MAX_KEY_LENGTH, "pattern": r"^[a-z0-9][a-z0-9._-]*$"}},
    {"name": "namespace", "in": "query", "required": False,
     "description": "Only signals sent in this namespace (one the token may not read: none).",
     "schema": {"type": "string", "maxLength": 63, "pattern": r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"}},
    integer_parameter("since", "query", minimum=0, description="Only signals after this seq."),
    integer_parameter("limit", "query", minimum=1, maximum=MAX_LIST, description="The newest N (default 100)."),
]
SIGNAL_SEQ_PARAMETERS = [integer_parameter("seq", "path", minimum=0, description="The signal's seq.")]


def errors(*statuses: int) -> dict:
    """`responses=` for the refusals an operation can answer, each with the `Error` model."""
    words = {400: "The body is not JSON, or nested too deep.", 401: "No valid token.",
             403: "The token lacks the scope, or may not send in the namespace named.", 404: "No such thing.",
             409: "The same key and id were sent before with another value.",
             413: "A body, batch or value over its limit.",
             422: "An invalid field, parameter, path or header (named in `field`).",
             503: "The database cannot be reached now: try again (see Retry-After)."}
    return {status: {"model": Error, "description": words[status]} for status in statuses}

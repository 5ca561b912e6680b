"""What a signal is, as pure rules: key syntax, dagline's reserved keys, and values as bounded JSON.

A key lives in its sender's namespace (stored as `names.qualify(namespace, key)`). A DAG's rule may name
another namespace's key as `namespace/key` (`split_rule_key`), which only that namespace's export lets
through. A key is lowercase and dotted (`[a-z0-9][a-z0-9._-]*`, at most 200 characters). Keys under
`dagline.` are dagline's own: the only one is `dagline.task.<dag_id>.<task_id>.<state>`, sent by
dagline itself when a task instance enters one of `TASK_SIGNAL_STATES` (its task id keeps the
characters a task id may have, uppercase and `_` included). A value is any JSON document within the
bounds of `json_values` whose compact UTF-8 encoding is at most 64 KiB. No database here: the spec
validates rules with these functions, the stores validate what is sent.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from dagline.domain.json_values import check_value, compact_text, parse_json
from dagline.domain.names import check_namespace, qualify
from dagline.domain.states import TIState
from dagline.errors import InvalidInput
from dagline.limits import MAX_JSON_BYTES, MAX_SIGNAL_VALUE_BYTES

MAX_KEY_LENGTH = 200
MAX_VALUE_BYTES = MAX_SIGNAL_VALUE_BYTES
MAX_SENDER_ID_LENGTH = 200
RESERVED_PREFIX = "dagline."
TASK_PREFIX = "dagline.task."

# The task states that are signals: a try started, and every way a task instance can end or wait
# for a retry. `scheduled` and `queued` are not: they are dagline's own bookkeeping, frequent, and
# nothing outside the scheduler can act on them usefully.
TASK_SIGNAL_STATES = (
    TIState.RUNNING, TIState.SUCCESS, TIState.FAILED, TIState.UP_FOR_RETRY, TIState.UPSTREAM_FAILED,
    TIState.SKIPPED,
)

_KEY_RE = re.compile(r"[a-z0-9][a-z0-9._-]*")
_TASK_KEY_RE = re.compile(
    r"dagline\.task\.(?P<dag>[a-z0-9]([-a-z0-9]*[a-z0-9])?)\.(?P<task>[A-Za-z0-9_.-]+)\.(?P<state>[a-z_]+)")


def validate_key(key: Any, *, field: str = "key", reserved_ok: bool = False) -> str:
    """The key if it is well formed; else InvalidInput naming `field`. A key under `dagline.` is
    accepted only with `reserved_ok` (rules may listen to dagline's keys; only dagline sends them)
    and only in the form `dagline.task.<dag_id>.<task_id>.<state>`."""
    if not isinstance(key, str) or not key:
        raise InvalidInput("a signal key must be a non-empty string", field=field)
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidInput(f"a signal key has at most {MAX_KEY_LENGTH} characters, this one {len(key)}", field=field)
    if key.startswith(RESERVED_PREFIX):
        if not reserved_ok:
            raise InvalidInput(f"{key!r}: keys under 'dagline.' are sent by dagline itself", field=field)
        match = _TASK_KEY_RE.fullmatch(key)
        if match is None:
            raise InvalidInput(
                f"{key!r}: the only key under 'dagline.' is dagline.task.<dag_id>.<task_id>.<state>", field=field)
        if match["state"] not in TASK_SIGNAL_STATES:
            raise InvalidInput(f"{key!r}: state {match['state']!r} is not signalled; one of "
                               f"{', '.join(TASK_SIGNAL_STATES)}", field=field)
        return key
    if not _KEY_RE.fullmatch(key):
        raise InvalidInput(f"{key!r} is not a signal key: lowercase letters, digits, '.', '_' and '-', "
                           "starting with a letter or digit", field=field)
    return key


def task_state_key(dag_id: str, task_id: str, state: str) -> str:
    """The key dagline sends when a task instance enters `state`."""
    return f"{TASK_PREFIX}{dag_id}.{task_id}.{state}"


def parse_task_state_key(key: str) -> tuple[str, str, str] | None:
    """(dag_id, task_id, state) of a `dagline.task.` key, else None."""
    match = _TASK_KEY_RE.fullmatch(key)
    return (match["dag"], match["task"], match["state"]) if match else None


def split_rule_key(text: str) -> tuple[str | None, str]:
    """(namespace or None for the rule's own, key) of a rule's `signal`: `key` or `namespace/key`."""
    namespace, sep, key = text.rpartition("/")
    return (namespace, key) if sep else (None, text)


def listened_key(dag_namespace: str, rule_signal: str) -> str:
    """The stored key a rule of a DAG of `dag_namespace` listens to: its own namespace's key, or the
    namespace it names (`namespace/key`)."""
    namespace, key = split_rule_key(rule_signal)
    return qualify(namespace or dag_namespace, key)


def validate_rule_key(text: Any, *, field: str) -> tuple[str | None, str]:
    """A rule's `signal` (`key` or `namespace/key`), checked; dagline's own keys are allowed."""
    if not isinstance(text, str):
        raise InvalidInput("a signal key must be a non-empty string", field=field)
    namespace, key = split_rule_key(text)
    if namespace is not None:
        check_namespace(namespace, field=field)
    return namespace, validate_key(key, field=field, reserved_ok=True)


def validate_sender_id(sender_id: Any, *, field: str = "id") -> str | None:
    if sender_id is None:
        return None
    if not isinstance(sender_id, str) or not sender_id or len(sender_id) > MAX_SENDER_ID_LENGTH:
        raise InvalidInput(f"a signal id is a string of 1 to {MAX_SENDER_ID_LENGTH} characters", field=field)
    check_value(sender_id, field)  # no NUL, no lone surrogate
    return sender_id


def encode_value(value: Any, *, field: str = "value") -> str:
    """The value as compact JSON text, checked by `json_values` (JSON types only, finite numbers, no NUL or
    lone surrogate, nesting), at most MAX_VALUE_BYTES of UTF-8."""
    return compact_text(value, field, max_bytes=MAX_VALUE_BYTES)


def parse_value(text: str, *, field: str = "--value") -> Any:
    """JSON text as typed by a person (`--value`, the web form's value), as a value; InvalidJson naming `field`
    if it is not bounded JSON or its compact form is over MAX_VALUE_BYTES."""
    value = parse_json(text, field, max_bytes=MAX_JSON_BYTES)
    encode_value(value, field=field)  # the value's rules, its size first: a long string is a large value
    return value


def same_value(stored_text: str, value: Any) -> bool:
    """Whether a stored value and a newly sent one are the same JSON document (key order aside)."""
    stored = json.loads(stored_text)
    return _normal(stored) == _normal(value)


def _normal(value: Any) -> Any:
    # 1 and 1.0 are the same JSON number; bool is not a number here (True != 1 in JSON)
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return (type(value).__name__, value)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return ("number", int(value))
    if isinstance(value, (int, float)):
        return ("number", value)
    if isinstance(value, list):
        return ("list", tuple(_normal(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, _normal(v)) for k, v in value.items())))
    return ("other", repr(value))

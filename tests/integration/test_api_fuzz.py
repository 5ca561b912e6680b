"""The API driven from its own OpenAPI document by schemathesis, in-process against the ASGI app, on SQLite
and on PostgreSQL: every operation, with data the document allows (positive) and data it does not
(negative), by a sender, a reader and nobody. Every answer must be a non-5xx, a status the operation
documents, of the documented content type, with a body valid against the documented schema.

Seeded and derandomized (the same cases every run) and bounded: EXAMPLES cases per operation and mode, about
half a minute per database on this machine. A failure prints the case as a reproducible request."""

from __future__ import annotations

import datetime as dt

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from dagline.api import ApiSettings, create_app
from dagline.clock import FixedClock
from dagline.store.signals import send_signal
from dagline.store.tokens import create_token
from tests.helpers.harness import apply, write_dag

NOW = dt.datetime(2026, 5, 1, tzinfo=dt.timezone.utc)
EXAMPLES = 60
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
OPERATIONS = {"GET /api/v1/health", "POST /api/v1/signals", "GET /api/v1/signals", "GET /api/v1/signals/{seq}"}
LISTENER = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: fuzz}
spec:
  schedule: null
  paused: false
  tasks:
    - id: react
      onSignal: [{signal: a, action: start}]
      spark: {mainApplicationFile: react.py}
"""


def test_fuzz_every_operation_answers_as_its_document_says(db, tmp_path):
    apply(db, write_dag(tmp_path, LISTENER))  # signals of key `a` start runs: answers carry actions
    with db.begin() as conn:
        sender = create_token(conn, "sender", ("signals:send", "read"), now=NOW)
        reader = create_token(conn, "reader", ("read",), now=NOW)
        send_signal(conn, "a", {"first": True}, sender_id="s1", source="test", now=NOW)  # seq 1
    app = create_app(db, ApiSettings(), clock=FixedClock(NOW))
    schema = schemathesis.openapi.from_asgi("/api/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.label for op in operations} == OPERATIONS  # the document lists every operation of the API

    callers = st.sampled_from([{"Authorization": f"Bearer {sender}"}, {"Authorization": f"Bearer {reader}"}, {}])
    answered: dict[str, set[int]] = {}
    for operation in operations:
        has_inputs = any(list(getattr(operation, part)) for part in ("path_parameters", "query", "body"))
        modes = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE) if has_inputs else (GenerationMode.POSITIVE,)
        for mode in modes:

            @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
                      suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy(generation_mode=mode), headers=callers)
            def drive(case, headers):
                response = case.call_and_validate(headers=headers, checks=CHECKS)
                answered.setdefault(case.operation.label, set()).add(response.status_code)

            drive()
        if operation.path_parameters.get("seq") is not None:  # and a signal that exists, read by every caller
            @settings(max_examples=10, derandomize=True, database=None, deadline=None,
                      suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy(path_parameters={"seq": 1}), headers=callers)
            def drive_stored(case, headers):
                response = case.call_and_validate(headers=headers, checks=CHECKS)
                answered.setdefault(case.operation.label, set()).add(response.status_code)

            drive_stored()
    # the fuzzer got past authentication into every operation (not only 401s)
    assert all(codes - {401, 403} for codes in answered.values()), answered
    assert {201, 422} <= answered["POST /api/v1/signals"] and 200 in answered["GET /api/v1/signals/{seq}"], answered

"""States are enums: no bare state string in src/.

Every state, run type and signal action the database stores is a member of an enum in
`dagline.domain.states`. This test reads every module of src/dagline (ast) and fails on a string
constant equal to one of their values (`state == "running"`), or quoting one inside SQL text
(`text("state = 'pending'")`), outside the enums themselves and the migrations (history, never
edited). What is not a state although it is spelt like one is exempt by its place in the code
(docstrings, `Literal[...]` types, click command names, other enums' members, table names, the field
names of a record) or listed in `ALLOWED` with how many times it occurs and why.
"""

from __future__ import annotations

import ast
import collections
import json
import pathlib
import re

from dagline import metrics
from dagline.domain.states import (
    BackfillState,
    OutboxState,
    ReplicaState,
    Reprocess,
    RunState,
    RunType,
    SignalAction,
    SignalActionStatus,
    TIState,
)

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "dagline"

VOCABULARIES = (TIState, RunState, RunType, BackfillState, Reprocess, ReplicaState, OutboxState, SignalAction,
                SignalActionStatus)
VALUES = frozenset(member.value for vocabulary in VOCABULARIES for member in vocabulary)
_QUOTED = re.compile("'(" + "|".join(sorted(VALUES)) + ")'")  # a value inside SQL text

DEFINITIONS = "domain/states.py"
HISTORY = "db/migrations/versions/"  # the migrations say what the schema was: never rewritten

# Words spelt like a state that are not one: (file, text) -> (how many, why). The count is exact, so a
# new bare state in one of these files still fails, and an entry whose words are gone must go too.
ALLOWED: dict[tuple[str, str], tuple[int, str]] = {
    ("metrics.py", "scheduled"): (1, "RUN_TYPES: dagline.metrics is below the domain in the import layers; "
                                     "test_metrics_run_types_are_the_run_types keeps it equal to RunType"),
    ("metrics.py", "manual"): (1, "RUN_TYPES, as above"),
    ("metrics.py", "backfill"): (1, "RUN_TYPES, as above"),
    ("metrics.py", "signal"): (1, "RUN_TYPES, as above"),
    ("db/notify.py", "signal"): (1, "SIGNALS_ONLY, a NOTIFY payload"),
    ("domain/templating.py", "signal"): (1, "a template variable's name"),
    ("cli/testing.py", "signal"): (1, "the `signal` template variable of a try, as the context's key"),
    ("store/deletion.py", "backfill"): (1, "a message word: '1 backfill'"),
    ("k8s/resources.py", "backfill"): (1, "the Backfill CRD's singular name"),
    ("k8s/sparkapp.py", "pending"): (1, "OUTCOME_PENDING, a value of the dagline.io/outcome label"),
    ("spec/checks.py", "none"): (1, "a message word: '(params are: none)'"),
    ("web/urls.py", "trigger"): (1, "PAGE_WORDS: a DAG page's address, `/dags/<key>/trigger`"),
    ("web/urls.py", "backfill"): (1, "PAGE_WORDS: a DAG page's address, `/dags/<key>/backfill`"),
    ("web/actions.py", "trigger"): (1, "dag_url(dag_id, 'trigger'): the trigger page's address"),
    ("api/headers.py", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                       "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"):
        (1, "a Content-Security-Policy keyword"),
    ("store/backfills.py", "backfill"): (3, "the event log's entity (the backfill table)"),
    ("store/dags.py", "backfill"): (1, "the event log's entity (the backfill table)"),
    ("cli/progress.py", "failed"): (2, "the field of a backfill's status: its runs that failed"),
    ("store/pages.py", "failed"): (1, "the field of a backfill's status: its runs that failed"),
    ("cli/scheduling.py", "failed"): (3, "the field of a backfill's status (its runs that failed) and a column"),
    ("cli/scheduling.py", "queued"): (2, "the field of a backfill's status: its queued runs, and a column"),
    ("cli/scheduling.py", "running"): (2, "the field of a backfill's status: its running runs, and a column"),
    ("cli/scheduling.py", "overridden"): (1, "a column of `backfills list`: the runs it replaced"),
    ("web/actions.py", "none"): (4, "a preview's word for an empty list of tasks"),
    ("web/actions.py", "start"): (3, "the backfill form's field: its first logical date"),
    ("store/pages.py", "start"): (6, "the field of a try: when it started"),
    ("web/charts.py", "start"): (4, "the field of a try: when it started"),
    ("scheduler/housekeeping.py", "backfill"): (1, "the event log's entity (the backfill table)"),
    ("executors/wrapper.py", "signal"): (1, "a field of the try's exit file: the signal the wrapper received"),
    ("executors/local.py", "signal"): (3, "the exit file's field, as above"),
    ("executors/local.py", "cancelled"): (1, "a failure message: the try was cancelled"),
    ("executors/noop.py", "cancelled"): (1, "a failure message: the try was cancelled"),
    ("scheduler/executor_events.py", "stopped"): (1, "the message of a stopped streaming try"),
    ("scheduler/executor_events.py", "failed"): (1, "the event's detail for a failed try without a message"),
    ("scheduler/deliveries.py", "delivered"): (1, "dagline_callback_deliveries' outcome label: how one attempt went "
                                                  "(a failed attempt retried leaves its outbox row pending)"),
    ("scheduler/deliveries.py", "failed"): (1, "dagline_callback_deliveries' outcome label, as above"),
    ("scheduler/phases/context.py", "start"): (1, "the loop's step before its first phase, a log word"),
}


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else ""


def _text(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _exempt(tree: ast.Module) -> set[int]:
    """The string constants that are not values by their place in the code."""
    exempt: set[int] = set()

    def all_of(node: ast.AST) -> None:
        exempt.update(id(n) for n in ast.walk(node))

    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and _text(first.value) is not None:
                exempt.add(id(first.value))  # a docstring
        if isinstance(node, ast.Subscript) and _name(node.value) == "Literal":
            all_of(node.slice)  # a type: pydantic would show enum members by their repr in its errors
        if isinstance(node, ast.Call) and _name(node.func) in ("command", "group") and node.args:
            exempt.add(id(node.args[0]))  # a click command's name (`dagline tasks stop`)
        if isinstance(node, ast.ClassDef) and any(_name(base).endswith("Enum") for base in node.bases):
            for statement in node.body:
                if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
                    all_of(statement.value)  # another vocabulary's member (a callback event, a phase)
        if isinstance(node, ast.Assign) and any(_name(t) in ("__tablename__", "__slots__") for t in node.targets):
            all_of(node.value)
        if isinstance(node, ast.Dict):
            keys = [_text(key) for key in node.keys]
            if any(key is not None and key not in VALUES for key in keys):
                exempt.update(id(key) for key in node.keys if key is not None)  # a record: keys are field names
    return exempt


def bare_states(source: str) -> list[tuple[int, str]]:
    """(line, text) of each string constant in `source` that is a bare value, or quotes one."""
    tree = ast.parse(source)
    exempt = _exempt(tree)
    return sorted((node.lineno, node.value) for node in ast.walk(tree)
                  if (text := _text(node)) is not None and id(node) not in exempt  # type: ignore[arg-type]
                  and (text in VALUES or _QUOTED.search(text)))


def _converted_modules() -> list[tuple[str, pathlib.Path]]:
    modules = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel != DEFINITIONS and not rel.startswith(HISTORY):
            modules.append((rel, path))
    return modules


def test_no_bare_state_strings_in_src():
    lines: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
    for rel, path in _converted_modules():
        for line, text in bare_states(path.read_text()):
            lines[(rel, text)].append(line)
    wrong = [f"{rel}:{','.join(map(str, found))}: {text!r} (allowed {ALLOWED.get((rel, text), (0,))[0]})"
             for (rel, text), found in sorted(lines.items()) if len(found) != ALLOWED.get((rel, text), (0,))[0]]
    stale = [f"{rel}: {text!r} is allowed but gone" for rel, text in sorted(ALLOWED) if (rel, text) not in lines]
    problems = wrong + stale
    assert not problems, "use the enums of dagline.domain.states (or say why in ALLOWED):\n" + "\n".join(problems)


def test_a_bare_state_is_caught_where_it_means_a_state():
    source = '''
"""The module's docstring may say 'running' and "running"."""
def f(ti, conn, text):
    if ti.state == "running":
        conn.execute(text("state = 'pending'"))
    counts = {"running": 1, "queued": 2}
    record = {"dag_id": "x", "running": 3}
    return ti.run_type in ("manual", "backfill"), record
'''
    assert bare_states(source) == [(4, "running"), (5, "state = 'pending'"), (6, "queued"), (6, "running"),
                                   (8, "backfill"), (8, "manual")]


def test_metrics_run_types_are_the_run_types():
    assert metrics.RUN_TYPES == tuple(RunType)


def test_a_member_is_its_stored_string():
    """What the code relies on: members equal, hash, format and serialise as the database's strings,
    and the groups are sets of states, not members."""
    assert TIState.RUNNING == "running" and {"running": 1}[TIState.RUNNING] == 1
    assert f"{RunType.MANUAL}__x" == "manual__x" and str(OutboxState.PENDING) == "pending"
    assert json.dumps({TIState.UP_FOR_RETRY: RunState.OVERRIDDEN}) == '{"up_for_retry": "overridden"}'
    assert "success" in TIState.FINISHED and TIState.QUEUED in RunState.ACTIVE
    assert len(TIState) == 10 and len(RunState) == 5 and "FINISHED" not in TIState.__members__

"""Secrets a DAG may read, and what a job's environment may hold: the rules, as values (no I/O).

A DAG reaches secret values in two places: a task's `env` (`valueFrom: {secretKeyRef: {name, key}}`)
and a callback's webhook `urlFrom` / header `valueFrom` (`{env: NAME}` or `{secretKeyRef}`). The
scheduler's and the operator's own settings (the database URL, API tokens: anything `DAGLINE_*`) are
never among them (DESIGN.md section 12; ADR 0040).

On Kubernetes a `secretKeyRef` names a Secret of the DAG object's namespace. Outside Kubernetes the
same reference, and every `{env: NAME}`, reads a *secret variable*: a variable of the scheduler's
environment, or of the secrets file (`DAGLINE_SECRETS_FILE`, dotenv), whose name starts with the
secret prefix (`DAGLINE_SECRET_PREFIX`, default `SECRET_`). A `secretKeyRef {name: hooks, key:
token}` is the variable `SECRET_HOOKS__TOKEN`: the prefix, the Secret's name and its key upper-cased,
every character that is not a letter or a digit turned into `_`, name and key joined by two `_`.
Names that are never readable, whatever the prefix: `DAGLINE_*`, and the variables with which
libpq and the Kubernetes client find their credentials (`RESERVED_VARIABLES`).

A local job's environment is the scheduler's with every reserved and every secret variable taken
out (`job_environment`), plus what the try needs (its signal token and the API's URL) and the task's
`env` (which may set any name but `DAGLINE_*`, `PGPASSWORD` for its own database included).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

DEFAULT_SECRET_PREFIX = "SECRET_"
RESERVED_PREFIX = "DAGLINE_"
# What the database driver or the Kubernetes client read credentials from, besides DAGLINE_*.
RESERVED_VARIABLES = frozenset({
    "PGPASSWORD", "PGPASSFILE", "PGSERVICE", "PGSERVICEFILE", "PGSSLKEY", "PGSSLCERT", "PGSSLROOTCERT",
    "PGUSER", "PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "KUBECONFIG",
})
# What a try gets from dagline itself (`dagline.scheduler.launches.try_env`): the one DAGLINE_* a job sees.
TRY_VARIABLES = frozenset({"DAGLINE_API_URL", "DAGLINE_SIGNAL_TOKEN"})

_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]")
MAX_VARIABLE_NAME = 253


def is_reserved(name: str) -> bool:
    """True for the scheduler's own settings: `DAGLINE_*` (in any case) and `RESERVED_VARIABLES`."""
    return name.upper().startswith(RESERVED_PREFIX) or name.upper() in RESERVED_VARIABLES


def _check_name(name: str, what: str) -> None:
    if not _VARIABLE_NAME.fullmatch(name) or len(name) > MAX_VARIABLE_NAME:
        raise ValueError(f"{what} {name[:80]!r} is not a valid name (letters, digits and _, not starting with a "
                         f"digit, at most {MAX_VARIABLE_NAME} characters)")


def check_readable(name: str) -> str:
    """A variable a DAG may name in `{env: NAME}` (raises ValueError saying why not)."""
    _check_name(name, "environment variable")
    if is_reserved(name):
        raise ValueError(
            f"environment variable {name} is one of the scheduler's own settings (DAGLINE_*, or a database or "
            "Kubernetes credential variable), which a DAG may never read; use secretKeyRef, or {env: NAME} "
            f"with NAME under the secret prefix ({DEFAULT_SECRET_PREFIX} unless DAGLINE_SECRET_PREFIX says "
            "otherwise)")
    return name


def check_task_variable(name: str) -> str:
    """A variable a task's `env` may set in its job (raises ValueError saying why not)."""
    _check_name(name, "variable")
    if name.upper().startswith(RESERVED_PREFIX):
        raise ValueError(f"variable {name}: DAGLINE_* variables are dagline's own (a try's signal token and "
                         "API URL, the scheduler's settings); a task may not set them")
    return name


def check_prefix(prefix: str) -> str:
    """A secret prefix: a variable-name start that can never match a reserved name."""
    if not prefix or not _VARIABLE_NAME.fullmatch(prefix):
        raise ValueError(f"{prefix!r} is not the start of a variable name (letters, digits and _)")
    upper = prefix.upper()
    if RESERVED_PREFIX.startswith(upper) or upper.startswith(RESERVED_PREFIX) or any(
            v.startswith(upper) for v in RESERVED_VARIABLES):
        raise ValueError(f"{prefix!r} would let DAGs read the scheduler's own settings (DAGLINE_*, PG*, "
                         "KUBECONFIG); choose a prefix such as SECRET_")
    return prefix


def under_prefix(name: str, prefix: str) -> bool:
    """Whether a DAG may read variable `name` (outside Kubernetes)."""
    return name.startswith(prefix) and len(name) > len(prefix) and not is_reserved(name)


def secret_variable(name: str, key: str, prefix: str = DEFAULT_SECRET_PREFIX) -> str:
    """The secret variable a `secretKeyRef {name, key}` reads outside Kubernetes."""
    return f"{prefix}{_NOT_ALNUM.sub('_', name).upper()}__{_NOT_ALNUM.sub('_', key).upper()}"


def parse_dotenv(text: str) -> dict[str, str]:
    """`KEY=value` lines (a leading `export `, `#` comments, blank lines and matching quotes around a
    value allowed). Raises ValueError naming the line for anything else."""
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not _VARIABLE_NAME.fullmatch(name):
            raise ValueError(f"line {number} is not KEY=value")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[name] = value
    return values


def job_environment(scheduler_env: Mapping[str, str], *, secret_prefix: str = DEFAULT_SECRET_PREFIX,
                    try_env: Iterable[tuple[str, str]] = (),
                    task_env: Iterable[tuple[str, str]] = ()) -> dict[str, str]:
    """The environment of a local job: the scheduler's without its reserved variables and without its
    secret variables (a job gets the secrets its task names, not every one), then the try's own
    (`DAGLINE_API_URL`, `DAGLINE_SIGNAL_TOKEN`), then the task's `env` (never `DAGLINE_*`: the spec
    refuses those)."""
    env = {name: value for name, value in scheduler_env.items()
           if not is_reserved(name) and not name.startswith(secret_prefix)}
    env.update((name, value) for name, value in try_env if name in TRY_VARIABLES)
    env.update((name, value) for name, value in task_env if not name.upper().startswith(RESERVED_PREFIX))
    return env

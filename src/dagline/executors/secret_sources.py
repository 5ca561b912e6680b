"""Where a DAG's secrets are read outside Kubernetes: the secrets file and the secret variables.

`LocalSecrets.from_env()` reads two settings when a command or replica starts:

- `DAGLINE_SECRET_PREFIX` (default `SECRET_`): only variables whose name starts with it can be read by
  a DAG (`{env: NAME}`, `secretKeyRef`); it may not be a start of `DAGLINE_` (or of the database and
  Kubernetes credential variables), and `DAGLINE_*` is never readable whatever it is;
- `DAGLINE_SECRETS_FILE` (unset by default): a dotenv file (`KEY=value` lines) read at every lookup,
  so an edited file is used at once without a restart; the same names as in the environment, and the
  same prefix rule. A variable of the scheduler's environment wins over the file's line.

A `secretKeyRef {name, key}` reads `secret_variable(name, key, prefix)` (`SECRET_HOOKS__TOKEN` for
`{name: hooks, key: token}`). The rules are `dagline.domain.secrets`; this module does the reading.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from dagline.domain.secrets import (
    DEFAULT_SECRET_PREFIX,
    check_prefix,
    is_reserved,
    parse_dotenv,
    secret_variable,
    under_prefix,
)
from dagline.errors import DaglineError, InvalidInput

PREFIX_VARIABLE = "DAGLINE_SECRET_PREFIX"
FILE_VARIABLE = "DAGLINE_SECRETS_FILE"


class SecretNotFound(DaglineError, LookupError):
    """A secret a DAG names is not there (or may not be read); the message says which and where it was looked for."""

    exit_code = 1


@dataclasses.dataclass(frozen=True)
class LocalSecrets:
    """The secret variables of this process's environment and of the secrets file."""

    environ: Mapping[str, str]
    prefix: str = DEFAULT_SECRET_PREFIX
    file: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> LocalSecrets:
        """Read `DAGLINE_SECRET_PREFIX` and `DAGLINE_SECRETS_FILE`; a bad prefix raises `InvalidInput`."""
        env = os.environ if environ is None else environ
        prefix = (env.get(PREFIX_VARIABLE) or "").strip() or DEFAULT_SECRET_PREFIX
        try:
            check_prefix(prefix)
        except ValueError as exc:
            raise InvalidInput(str(exc), field=PREFIX_VARIABLE) from None
        file = (env.get(FILE_VARIABLE) or "").strip() or None
        return cls(environ=env, prefix=prefix, file=os.path.abspath(file) if file else None)

    def variable(self, name: str) -> str:
        """The value of secret variable `name`; raises `SecretNotFound` saying why it cannot be read."""
        if is_reserved(name) or not under_prefix(name, self.prefix):
            raise SecretNotFound(f"variable {name} is not a secret variable: a DAG may read only names that start "
                                 f"with {self.prefix} ({PREFIX_VARIABLE}), never DAGLINE_*")
        value = self.environ.get(name)
        if value is not None:
            return value
        value = self._file_values().get(name)
        if value is not None:
            return value
        where = "the scheduler's environment" + (f" or {self.file}" if self.file else f" ({FILE_VARIABLE} is unset)")
        raise SecretNotFound(f"secret variable {name} is not set in {where}")

    def secret_key(self, name: str, key: str) -> str:
        """The value of `secretKeyRef {name, key}` outside Kubernetes."""
        variable = secret_variable(name, key, self.prefix)
        try:
            return self.variable(variable)
        except SecretNotFound as exc:
            raise SecretNotFound(f"secretKeyRef {name}/{key} (read as {variable} outside Kubernetes): {exc}") from None

    def _file_values(self) -> dict[str, str]:
        if self.file is None:
            return {}
        try:
            with open(self.file, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise SecretNotFound(f"the secrets file {self.file} ({FILE_VARIABLE}) cannot be read: "
                                 f"{exc.strerror or exc}") from None
        try:
            return parse_dotenv(text)
        except ValueError as exc:
            raise SecretNotFound(f"the secrets file {self.file} ({FILE_VARIABLE}): {exc}") from None

    def resolve_env(self, env) -> tuple[tuple[str, str], ...]:
        """A task's `env` (`EnvVar`s, or `TaskEnv` pairs) with every value read; raises `SecretNotFound`."""
        out = []
        for var in env:
            ref = var.secret
            out.append((var.name, var.value if ref is None else self.secret_key(*ref)))
        return tuple(out)

"""Executors by name: the one place where an executor's name chooses code.

`KINDS` lists every executor kind: its name (the `--executor` choice, `DAGLINE_EXECUTOR`, and what a
replica stores as its executor), whether `dags test` and `tasks test` may use it (`foreground`), and
where its code is: a `"module:attribute"` path to a `KindCode`, imported only when the kind is used.
The `KindCode` (in the kind's own module) builds the executor from checked `ExecutorSettings`, reads
the kind's options from the environment, opens a stored try's log (`try_logs`), and lists its
settings for `dagline config`. Everything else asks this module, or the executor object's own
capabilities (`host_bound`), never compares a name.

Why a path string, imported on use, rather than registration by import or by entry point: the
`spark-k8s` kind lives in `dagline.k8s` (the only importer of the Kubernetes client), which sits
above `dagline.executors` in the layers, so this module may not import it; a registration made when
`dagline.k8s` is imported would exist only in processes that happened to import it first (the web UI
reading a spark-k8s log would not see it); and an entry point is package metadata, seen only once
the package is installed again, not from a source tree on the path. A path string keeps the
lookup here, loads the Kubernetes client only for the kind that needs it (`dagline --help` stays
light), and a new kind is its own module plus one line in `KINDS`.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable, Mapping

from dagline.clock import Clock
from dagline.errors import InvalidInput
from dagline.executors.base import Executor
from dagline.executors.try_logs import StoredTry, TryLog


def resolve_log_folder(value: str | None) -> str:
    """Where task logs go: `value`, else `$DAGLINE_LOG_FOLDER`, else `./logs` (absolute)."""
    return os.path.abspath(value or os.environ.get("DAGLINE_LOG_FOLDER") or "logs")


@dataclasses.dataclass(frozen=True)
class ExecutorSettings:
    """What building an executor takes, checked by `ExecutorKind.settings`."""

    parallelism: int                 # tries it runs at once
    log_folder: str                  # absolute: where tries that write logs write them
    clock: Clock | None = None
    options: Mapping[str, object] = dataclasses.field(default_factory=dict)  # the kind's own


@dataclasses.dataclass(frozen=True)
class ShownSetting:
    """One setting of a kind as `dagline config` lists it."""

    name: str
    value: object
    variable: str | None  # the environment variable it is read from


def _no_options(environ: Mapping[str, str]) -> dict:
    return {}


def _nothing_shown(environ: Mapping[str, str]) -> list[ShownSetting]:
    return []


def _no_exit_status(stored: StoredTry) -> int | None:
    return None


@dataclasses.dataclass(frozen=True)
class KindCode:
    """The code of an executor kind, defined in the kind's own module."""

    build: Callable[[ExecutorSettings], Executor]
    open_log: Callable[[StoredTry], TryLog]  # the log reader of its tries
    read_options: Callable[[Mapping[str, str]], dict] = _no_options  # from the environment; checked
    option_names: frozenset[str] = frozenset()  # the options `build` understands
    settings_shown: Callable[[Mapping[str, str]], list[ShownSetting]] = _nothing_shown
    runs_jobs: bool = True  # False: a try is no job (no log of its own, no exit status), it only reports
    exit_status: Callable[[StoredTry], int | None] = _no_exit_status  # a finished job's, where it has one


_loaded: dict[str, KindCode] = {}


@dataclasses.dataclass(frozen=True)
class ExecutorKind:
    name: str         # the `--executor` choice
    code_path: str    # "module:attribute" of its `KindCode`
    foreground: bool  # `dags test` and `tasks test` may run tries with it (and follow their logs)

    def code(self) -> KindCode:
        if self.name not in _loaded:
            module, _, attribute = self.code_path.partition(":")
            code = getattr(importlib.import_module(module), attribute)
            if not isinstance(code, KindCode):
                raise TypeError(f"{self.code_path} is not a KindCode")
            _loaded[self.name] = code
        return _loaded[self.name]

    def settings(self, *, parallelism: int, log_folder: str | None = None, clock: Clock | None = None,
                 environ: Mapping[str, str] | None = None, **options) -> ExecutorSettings:
        """Checked settings: parallelism at least 1, the log folder resolved (`resolve_log_folder`), the
        kind's options read from the environment (`environ`, default `os.environ`; a bad value is an
        `InvalidInput` naming its variable) where `options` does not give them."""
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
            raise InvalidInput(f"must be an integer of at least 1, got {parallelism!r}", field="parallelism")
        code = self.code()
        unknown = sorted(set(options) - code.option_names)
        if unknown:
            takes = f"it takes {', '.join(sorted(code.option_names))}" if code.option_names else "it takes none"
            raise InvalidInput(f"the {self.name} executor has no option {', '.join(unknown)} ({takes})",
                               field="executor")
        read = code.read_options(os.environ if environ is None else environ)
        return ExecutorSettings(parallelism=parallelism, log_folder=resolve_log_folder(log_folder), clock=clock,
                                options={**read, **options})

    def build(self, settings: ExecutorSettings) -> Executor:
        return self.code().build(settings)

    def open_log(self, stored: StoredTry) -> TryLog:
        return self.code().open_log(stored)


DEFAULT = "local"  # the laptop's executor: `dagline scheduler`, `backfill run`, `dags test`, `tasks test`

KINDS: tuple[ExecutorKind, ...] = (
    ExecutorKind("local", "dagline.executors.local:KIND_CODE", foreground=True),
    ExecutorKind("noop", "dagline.executors.noop:KIND_CODE", foreground=True),
    ExecutorKind("spark-k8s", "dagline.k8s.executor:KIND_CODE", foreground=False),
)
_BY_NAME = {k.name: k for k in KINDS}


def names(*, foreground: bool | None = None, first: str | None = None) -> list[str]:
    """The kinds' names (the `--executor` choices): all, or those that can (not) run in the foreground;
    `first` leads (a command whose default it is lists it first)."""
    chosen = [k.name for k in KINDS if foreground is None or k.foreground == foreground]
    return sorted(chosen, key=lambda name: name != first)


def kind(name: str, *, field: str = "--executor") -> ExecutorKind:
    """The kind of this name; an unknown name is an `InvalidInput` (naming `field`) listing the known ones."""
    found = _BY_NAME.get(name)
    if found is None:
        raise InvalidInput(f"unknown executor {name!r} (choose {', '.join(names())})", field=field)
    return found


def make_executor(name: str, *, parallelism: int, log_folder: str | None = None, clock: Clock | None = None,
                  environ: Mapping[str, str] | None = None, **options) -> Executor:
    """Build the executor of this name (see `ExecutorKind.settings` for what is checked)."""
    chosen = kind(name)
    return chosen.build(chosen.settings(parallelism=parallelism, log_folder=log_folder, clock=clock,
                                        environ=environ, **options))


def open_log(executor: str | None, stored: StoredTry) -> TryLog:
    """The log of a stored try, read as the kind of `executor` (the name its replica stored) reads it. A try
    no known kind ran (queued before replicas stored their executor, or by a kind since removed) is looked
    for where the default kind writes: the log folder."""
    return _BY_NAME.get(executor or "", _BY_NAME[DEFAULT]).open_log(stored)

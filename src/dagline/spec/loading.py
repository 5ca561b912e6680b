"""Reading DAG specs from YAML texts, files and folders.

Loading (`load_dag_paths`, `load_dag_file`, `parse_dag_yaml`) validates everything before returning
anything, so callers can write to the database knowing the whole batch is valid.
"""

from __future__ import annotations

import difflib
import logging
import os
import stat
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import yaml
from pydantic import ValidationError

from dagline.domain.input_values import first_text_problem
from dagline.domain.spark_policy import DEFAULT_POLICY, SparkPolicy
from dagline.errors import InvalidInput
from dagline.limits import MAX_SPEC_FILE_BYTES, MAX_TASKS_PER_DAG
from dagline.spec.bounds import check_yaml_bounds
from dagline.spec.checks import check_dag_spec
from dagline.spec.dag import Dag, deprecated_spellings
from dagline.spec.models import DagDocument
from dagline.spec.problems import dag_label, invalid_input

Warn = Callable[[str], None]
"""Where loading reports what it skipped (a special file, another tool's manifest): the CLI prints it."""

_log = logging.getLogger(__name__)

DAG_KIND = "DAG"
OTHER_KINDS = ("Backfill", "DagRun", "Pool")  # dagline's other kinds: their manifests may share a DAG folder
_API_GROUP = "dagline.io/"


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Safe YAML that refuses a key given twice in one mapping (PyYAML silently keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor` keys may be overridden: that is what they are for
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue  # the base class reports it
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {seen[key].start_mark.line + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def _yaml_documents(text: str, source: str) -> list[Any]:
    try:
        return list(yaml.load_all(text, Loader=_StrictLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InvalidInput(f"invalid YAML{where}: {exc.problem}", source=source) from None
    except yaml.YAMLError as exc:
        raise InvalidInput(f"invalid YAML: {exc}", source=source) from None
    except ValueError as exc:  # a value PyYAML cannot build, e.g. an integer of more than 4,300 digits
        raise InvalidInput(f"invalid YAML value: {exc}", source=source) from None


def parse_dag_document(data: Any, source: str | None = None, *,
                       spark_policy: SparkPolicy = DEFAULT_POLICY) -> DagDocument:
    """Validate one document (a parsed YAML mapping or a resource body) completely, with the Spark policy
    (`dagline.domain.spark_policy`; by default nothing the policy refuses is allowed)."""
    if not isinstance(data, Mapping):
        raise InvalidInput(
            f"expected a mapping with apiVersion, kind, metadata and spec, got {type(data).__name__}", source=source
        )
    metadata = data.get("metadata")
    label = dag_label(metadata.get("name") if isinstance(metadata, Mapping) else None, source)
    spec = data.get("spec")
    tasks = spec.get("tasks") if isinstance(spec, Mapping) else None
    if isinstance(tasks, Sequence) and not isinstance(tasks, str) and len(tasks) > MAX_TASKS_PER_DAG:
        raise InvalidInput(f"{len(tasks):,} tasks: a DAG has at most {MAX_TASKS_PER_DAG:,} tasks",
                           field="spec.tasks", source=label)
    text = first_text_problem(data)  # a NUL ("\0" in YAML) would reach spark-submit's argv and the database
    if text is not None:
        raise InvalidInput(text[1], field=text[0] or None, source=label)
    try:
        document = DagDocument.model_validate(data)
    except ValidationError as exc:
        raise invalid_input(exc, DagDocument, label) from None
    check_dag_spec(document.spec, label, document.metadata.name, spark_policy=spark_policy)
    return document


def parse_dag_yaml(text: str, source: str = "<string>", warn: Warn | None = None, *,
                   spark_policy: SparkPolicy = DEFAULT_POLICY) -> list[DagDocument]:
    """The DAG documents in a YAML text (several may be separated by `---`).

    The text's size, nesting, aliases and strings are bounded (`dagline.limits`) before it is built into
    objects. dagline's other kinds (Backfill, DagRun, Pool) are skipped; a document of another tool (an
    `apiVersion` outside dagline.io) is skipped with a warning; any other `kind` (`Dag`, a typo) is an error.
    """
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_SPEC_FILE_BYTES:
        raise InvalidInput(f"{size:,} bytes of YAML (the limit is {MAX_SPEC_FILE_BYTES:,} bytes per spec file)",
                           source=source)
    check_yaml_bounds(text, source)
    documents = [data for data in _yaml_documents(text, source) if data is not None]
    if not documents:
        raise InvalidInput("empty file: no YAML document", source=source)
    result = []
    for index, data in enumerate(documents):
        kind = data.get("kind") if isinstance(data, Mapping) else None
        if kind is None or kind == DAG_KIND:
            result.append(parse_dag_document(data, source, spark_policy=spark_policy))
            for problem in deprecated_spellings(data):
                (warn or _log.warning)(f"{source}: {problem}")
        elif kind in OTHER_KINDS:
            continue
        elif isinstance(data.get("apiVersion"), str) and not data["apiVersion"].startswith(_API_GROUP):
            (warn or _log.warning)(f"{source}: skipped document {index + 1}: {data['apiVersion']} {kind} is not a "
                                   "dagline document")
        else:
            raise InvalidInput(_unknown_kind(kind), field="kind" if len(documents) == 1 else f"[{index}].kind",
                               source=source)
    return result


def _unknown_kind(kind: Any) -> str:
    known = [DAG_KIND, *OTHER_KINDS]
    close = [k for k in known if k.lower() == str(kind).lower()] or difflib.get_close_matches(
        str(kind), known, n=1, cutoff=0.5)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return (f"unknown kind {kind!r}: {hint}dags apply reads kind {DAG_KIND!r} and skips "
            f"{', '.join(OTHER_KINDS)}")


class LoadedDag(NamedTuple):
    """A DAG and the file it came from."""

    dag: Dag
    source_path: str  # absolute


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"


def read_spec_file(path: str) -> str:
    """The text of a spec file, refusing what is not a regular file or is larger than MAX_SPEC_FILE_BYTES.

    Checked before reading (a FIFO would block the read forever, a device never end), and again on the
    open descriptor, which is opened non-blocking so that even a file swapped for a FIFO cannot hang."""
    def refuse(reason: str) -> InvalidInput:
        return InvalidInput(reason, source=path)

    try:
        before = os.stat(path)
        if not stat.S_ISREG(before.st_mode):
            raise refuse(f"{_file_kind(before.st_mode)}, not a regular file: only YAML files are read")
        if before.st_size > MAX_SPEC_FILE_BYTES:
            raise refuse(f"the file is {before.st_size:,} bytes (the limit is {MAX_SPEC_FILE_BYTES:,} bytes per "
                         "spec file)")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            opened = os.fstat(fd)
            if not stat.S_ISREG(opened.st_mode):
                raise refuse(f"{_file_kind(opened.st_mode)}, not a regular file: only YAML files are read")
            with os.fdopen(os.dup(fd), "rb") as handle:
                data = handle.read(MAX_SPEC_FILE_BYTES + 1)
        finally:
            os.close(fd)
        if len(data) > MAX_SPEC_FILE_BYTES:
            raise refuse(f"the file is more than {MAX_SPEC_FILE_BYTES:,} bytes (the limit per spec file)")
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise refuse(f"cannot read the file: {reason}") from None


def _load_file(path: str, warn: Warn | None = None, spark_policy: SparkPolicy = DEFAULT_POLICY,
               namespace: str | None = None) -> list[LoadedDag]:
    text = read_spec_file(path)
    absolute = os.path.abspath(path)
    loaded = []
    for document in parse_dag_yaml(text, path, warn, spark_policy=spark_policy):
        own = document.metadata.namespace
        if namespace is not None and own is not None and own != namespace:
            raise InvalidInput(f"DAG {document.metadata.name!r} says namespace {own!r}, and --namespace says "
                               f"{namespace!r}: give the same, or leave one out", field="metadata.namespace",
                               source=path)
        loaded.append(LoadedDag(Dag.from_document(document, namespace), absolute))
    return loaded


def _yaml_files(path: str, warn: Warn | None = None) -> list[str]:
    """A file as given, or a folder's *.yaml / *.yml files (recursively, sorted, hidden ones skipped).

    In a folder, what is not a regular file (a FIFO, a socket, a device) is skipped with a warning; named
    on its own, it is an error."""
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        if os.path.lexists(path) and os.path.exists(path):
            return [path]  # a FIFO, device or socket: read_spec_file says what it is
        raise InvalidInput("no such file or directory", source=path)
    found = []
    for folder, subfolders, files in os.walk(path):
        subfolders[:] = [name for name in subfolders if not name.startswith(".")]
        for name in files:
            if not name.endswith((".yaml", ".yml")) or name.startswith("."):
                continue
            file = os.path.join(folder, name)
            try:
                mode = os.stat(file).st_mode
            except OSError:
                mode = None  # a broken link: reading it reports why
            if mode is not None and not stat.S_ISREG(mode):
                (warn or _log.warning)(f"{file}: skipped: {_file_kind(mode)}, not a regular file")
                continue
            found.append(file)
    return sorted(found)


def _refuse_duplicates(loaded: Sequence[LoadedDag]) -> None:
    first: dict[str, LoadedDag] = {}
    for item in loaded:
        dag_id = item.dag.dag_id
        if dag_id in first:
            other = first[dag_id].source_path
            where = f"{other} and {item.source_path}" if other != item.source_path else f"{other}, twice"
            raise InvalidInput(
                f"DAG {dag_id!r} is defined more than once: {where}", field="metadata.name", source=dag_id
            )
        first[dag_id] = item


def load_dag_file(path: str | os.PathLike[str], warn: Warn | None = None, *,
                  spark_policy: SparkPolicy = DEFAULT_POLICY, namespace: str | None = None) -> list[LoadedDag]:
    """The DAGs of one YAML file, all validated, in `namespace` (else each document's own, else
    `default`); a file without a DAG document is an error."""
    path = os.fspath(path)
    loaded = _load_file(path, warn, spark_policy, namespace)
    if not loaded:
        raise InvalidInput("no DAG document in this file (kind: DAG)", source=path)
    _refuse_duplicates(loaded)
    return loaded


def load_dag_paths(paths: Iterable[str | os.PathLike[str]], warn: Warn | None = None, *,
                   spark_policy: SparkPolicy = DEFAULT_POLICY, namespace: str | None = None) -> list[LoadedDag]:
    """The DAGs of files and folders, all validated before any is returned; dag ids must be unique within
    a namespace. `warn` hears of what was skipped (default: the log); `spark_policy` is what the admin
    allowed; `namespace` (`dags apply --namespace`) is the namespace of every DAG, else each document's
    `metadata.namespace`, else `default`; a document naming another namespace than `namespace` is refused."""
    paths = [os.fspath(path) for path in paths]
    files: dict[str, str] = {}  # absolute -> as given: a file named twice is read once
    for path in paths:
        for file in _yaml_files(path, warn):
            files.setdefault(os.path.abspath(file), file)
    loaded = [item for file in files.values() for item in _load_file(file, warn, spark_policy, namespace)]
    if not loaded:
        raise InvalidInput(f"no DAG found in {', '.join(paths) or 'no paths'}")
    _refuse_duplicates(loaded)
    return loaded


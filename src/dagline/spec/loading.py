"""Reading DAG specs from YAML texts, files and folders.

Loading (`load_dag_paths`, `load_dag_file`, `parse_dag_yaml`) validates everything before returning
anything, so callers can write to the database knowing the whole batch is valid.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import yaml
from pydantic import ValidationError

from dagline.errors import InvalidInput
from dagline.spec.checks import check_dag_spec
from dagline.spec.dag import Dag
from dagline.spec.models import DagDocument
from dagline.spec.problems import dag_label, invalid_input


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


def parse_dag_document(data: Any, source: str | None = None) -> DagDocument:
    """Validate one document (a parsed YAML mapping or a resource body) completely."""
    if not isinstance(data, Mapping):
        raise InvalidInput(
            f"expected a mapping with apiVersion, kind, metadata and spec, got {type(data).__name__}", source=source
        )
    metadata = data.get("metadata")
    label = dag_label(metadata.get("name") if isinstance(metadata, Mapping) else None, source)
    try:
        document = DagDocument.model_validate(data)
    except ValidationError as exc:
        raise invalid_input(exc, DagDocument, label) from None
    check_dag_spec(document.spec, label)
    return document


def parse_dag_yaml(text: str, source: str = "<string>") -> list[DagDocument]:
    """The DAG documents in a YAML text (several may be separated by `---`); other kinds are skipped."""
    documents = [data for data in _yaml_documents(text, source) if data is not None]
    if not documents:
        raise InvalidInput("empty file: no YAML document", source=source)
    result = []
    for data in documents:
        if isinstance(data, Mapping) and isinstance(data.get("kind"), str) and data["kind"] != "DAG":
            continue  # Backfill, Pool, DagRun... manifests may share the folder
        result.append(parse_dag_document(data, source))
    return result


class LoadedDag(NamedTuple):
    """A DAG and the file it came from."""

    dag: Dag
    source_path: str  # absolute


def _load_file(path: str) -> list[LoadedDag]:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InvalidInput(f"cannot read the file: {reason}", source=path) from None
    absolute = os.path.abspath(path)
    return [LoadedDag(Dag.from_document(document), absolute) for document in parse_dag_yaml(text, path)]


def _yaml_files(path: str) -> list[str]:
    """A file as given, or a folder's *.yaml / *.yml files (recursively, sorted, hidden ones skipped)."""
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise InvalidInput("no such file or directory", source=path)
    found = []
    for folder, subfolders, files in os.walk(path):
        subfolders[:] = [name for name in subfolders if not name.startswith(".")]
        found += [
            os.path.join(folder, name) for name in files
            if name.endswith((".yaml", ".yml")) and not name.startswith(".")
        ]
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


def load_dag_file(path: str | os.PathLike[str]) -> list[LoadedDag]:
    """The DAGs of one YAML file, all validated; a file without a DAG document is an error."""
    path = os.fspath(path)
    loaded = _load_file(path)
    if not loaded:
        raise InvalidInput("no DAG document in this file (kind: DAG)", source=path)
    _refuse_duplicates(loaded)
    return loaded


def load_dag_paths(paths: Iterable[str | os.PathLike[str]]) -> list[LoadedDag]:
    """The DAGs of files and folders, all validated before any is returned; dag ids must be unique."""
    paths = [os.fspath(path) for path in paths]
    files: dict[str, str] = {}  # absolute -> as given: a file named twice is read once
    for path in paths:
        for file in _yaml_files(path):
            files.setdefault(os.path.abspath(file), file)
    loaded = [item for file in files.values() for item in _load_file(file)]
    if not loaded:
        raise InvalidInput(f"no DAG found in {', '.join(paths) or 'no paths'}")
    _refuse_duplicates(loaded)
    return loaded

"""Names within namespaces, as pure rules: every DAG, signal key and namespace pool is one namespace's.

A name is stored under one key that carries its namespace (ADR 92): `name` in the `default`
namespace, `namespace/name` in any other. Names and namespaces are DNS-1123 labels and keys are
lowercase and dotted, so neither holds a '/' and a key splits one way only. Every row keyed by a DAG
or a signal key is therefore its namespace's by construction: no query can forget the namespace, and
nothing changes a row's namespace without changing its key.

Pools differ: the platform's pools belong to no namespace (key `name`, shared by every namespace's
tasks); a namespace's own pool is `namespace/name` in every namespace, `default` included.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from dagline.errors import InvalidInput

DEFAULT_NAMESPACE = "default"
SEPARATOR = "/"
MAX_NAMESPACE_LENGTH = 63
_NAMESPACE_RE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def check_namespace(namespace: object, *, field: str = "--namespace") -> str:
    """The namespace if it is a DNS-1123 label; else InvalidInput naming `field`."""
    if not isinstance(namespace, str) or not _NAMESPACE_RE.fullmatch(namespace):
        raise InvalidInput(f"{namespace!r} is not a namespace name: lowercase letters, digits and '-', at most "
                           f"{MAX_NAMESPACE_LENGTH} characters, starting and ending with a letter or digit",
                           field=field)
    return namespace


def qualify(namespace: str, name: str) -> str:
    """The key of `name` in `namespace` (a DAG's `dag_id` column, a signal's `key` column)."""
    return name if namespace == DEFAULT_NAMESPACE else f"{namespace}{SEPARATOR}{name}"


def split(key: str) -> tuple[str, str]:
    """(namespace, name) of a key made by `qualify`."""
    namespace, sep, name = key.rpartition(SEPARATOR)
    return (namespace, name) if sep else (DEFAULT_NAMESPACE, key)


def namespace_of(key: str) -> str:
    return split(key)[0]


def name_of(key: str) -> str:
    return split(key)[1]


def parse_reference(text: str, namespace: str | None, *, field: str) -> tuple[str, str]:
    """(namespace, name) of what a person typed: `name` in `namespace` (else `default`), or
    `namespace/name`. A `namespace/name` that contradicts `namespace` is refused naming `field`."""
    if SEPARATOR in text:
        given, _, name = text.partition(SEPARATOR)
        check_namespace(given, field=field)
        if not name or SEPARATOR in name:
            raise InvalidInput(f"{text!r} is neither NAME nor NAMESPACE/NAME", field=field)
        if namespace is not None and given != namespace:
            raise InvalidInput(f"{text!r} names namespace {given!r}, and --namespace says {namespace!r}", field=field)
        return given, name
    return (namespace or DEFAULT_NAMESPACE), text


def pool_key(namespace: str | None, name: str) -> str:
    """The key of a pool: `name` for the platform's (no namespace), `namespace/name` for a namespace's."""
    return name if namespace is None else f"{namespace}{SEPARATOR}{name}"


def resolve_pool(namespace: str, name: str, platform: Collection[str]) -> str:
    """The key of the pool a task's `pool: name` takes in a DAG of `namespace`: the platform's pool of
    that name if there is one (`platform`: the platform's pool names), else the namespace's own."""
    return name if name in platform else pool_key(namespace, name)


def split_pool(key: str) -> tuple[str | None, str]:
    """(namespace or None for the platform's, name) of a pool key."""
    namespace, sep, name = key.rpartition(SEPARATOR)
    return (namespace, name) if sep else (None, key)

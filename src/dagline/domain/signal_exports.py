"""Which namespaces may hear another namespace's signals, as pure rules (the platform admin's
`DAGLINE_SIGNAL_EXPORTS`).

A signal lives in its sender's namespace, and a DAG hears its own namespace's signals. A DAG may name
another namespace's key in a rule (`namespace/key`), but it reacts to it only where an export rule lets
that key out to the DAG's namespace. The setting is a space-separated list of rules

    NAMESPACE/KEY_PATTERN=TO[,TO...]

`NAMESPACE` is the sender's namespace; `KEY_PATTERN` a key (`orders.ready`), or a prefix ending in `*`
(`orders.*`, `dagline.task.etl.*`, `*` for every key of the namespace); each `TO` a namespace that may hear
them, or `*` for every namespace. Rules only add: a key is exported to a namespace if any rule says so.
Example: `a-team/orders.*=team-b,team-c team-b/dagline.task.etl.*=*`.

The setting is parsed once (a replica's start, an API process's start) and bounded: at most
`MAX_RULES` rules of at most `MAX_RULE_LENGTH` characters each; a fault is an `InvalidInput` naming the
variable and the rule.
"""

from __future__ import annotations

import dataclasses
import re

from dagline.domain.names import check_namespace
from dagline.domain.signal_keys import MAX_KEY_LENGTH, validate_key
from dagline.errors import InvalidInput

VARIABLE = "DAGLINE_SIGNAL_EXPORTS"
MAX_RULES = 256
MAX_RULE_LENGTH = 1024
EVERY = "*"
_PREFIX_RE = re.compile(r"[A-Za-z0-9._-]*")  # a key's first characters (a task id may hold uppercase and '_')


@dataclasses.dataclass(frozen=True)
class ExportRule:
    namespace: str              # the sender's namespace
    key: str                    # a key, or a prefix when `prefix`
    prefix: bool
    to: frozenset[str]          # namespaces that hear it; `*` in it: every one

    def matches(self, namespace: str, key: str, to: str) -> bool:
        return (namespace == self.namespace and (key.startswith(self.key) if self.prefix else key == self.key)
                and (EVERY in self.to or to in self.to))


@dataclasses.dataclass(frozen=True)
class SignalExports:
    """The export rules in force (none: every namespace hears only its own signals)."""

    rules: tuple[ExportRule, ...] = ()

    def allows(self, namespace: str, key: str, to: str) -> bool:
        """Whether a DAG of namespace `to` may react to signal `key` (the bare key) sent in `namespace`:
        always within one namespace, else only if a rule exports it there."""
        return namespace == to or any(rule.matches(namespace, key, to) for rule in self.rules)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def __str__(self) -> str:
        """The rules as the setting spells them (`dagline config` shows this)."""
        return " ".join(f"{r.namespace}/{r.key}{'*' if r.prefix else ''}={','.join(sorted(r.to))}"
                        for r in self.rules)


NO_EXPORTS = SignalExports()


def parse_exports(text: str | None, *, field: str = VARIABLE) -> SignalExports:
    """The rules of the setting's value (None or blank: none); InvalidInput naming `field` otherwise."""
    words = (text or "").split()
    if len(words) > MAX_RULES:
        raise InvalidInput(f"{len(words)} export rules; at most {MAX_RULES}", field=field)
    return SignalExports(tuple(_parse_rule(word, field) for word in words))


def _parse_rule(word: str, field: str) -> ExportRule:
    shown = word if len(word) <= 80 else word[:77] + "..."
    if len(word) > MAX_RULE_LENGTH:
        raise InvalidInput(f"export rule {shown!r} is over {MAX_RULE_LENGTH} characters", field=field)
    source, eq, targets = word.partition("=")
    namespace, slash, pattern = source.partition("/")
    if not eq or not slash or not targets:
        raise InvalidInput(f"export rule {shown!r} is not NAMESPACE/KEY_PATTERN=TO[,TO...] (e.g. "
                           "a-team/orders.*=team-b)", field=field)

    def refused(reason: str) -> InvalidInput:
        return InvalidInput(f"export rule {shown!r}: {reason}", field=field)

    try:
        check_namespace(namespace, field=field)
    except InvalidInput as exc:
        raise refused(exc.reason) from None
    if pattern.endswith(EVERY):
        key, prefix = pattern[:-1], True
        if len(key) > MAX_KEY_LENGTH or not _PREFIX_RE.fullmatch(key):
            raise refused(f"{pattern!r} is neither a key nor a key prefix ending in '*'")
    else:
        key, prefix = pattern, False
        try:
            validate_key(key, field=field, reserved_ok=True)  # dagline's own task keys may be exported
        except InvalidInput as exc:
            raise refused(exc.reason) from None
    to = set()
    for target in targets.split(","):
        if target != EVERY:
            try:
                check_namespace(target, field=field)
            except InvalidInput as exc:
                raise refused(exc.reason) from None
        to.add(target)
    return ExportRule(namespace, key, prefix, frozenset(to))



def unexported_warning(dag_namespace: str, rule_signal: str, exports: SignalExports) -> str | None:
    """What `dags apply` may warn about a rule's `signal` (`key` or `namespace/key`) of a DAG of
    `dag_namespace`: another namespace's key no export rule lets out to it (the rule never acts until one
    does); None otherwise."""
    namespace, _, key = rule_signal.rpartition("/")
    if not namespace or namespace == dag_namespace or exports.allows(namespace, key, dag_namespace):
        return None
    return (f"{rule_signal!r}: namespace {namespace!r} does not export {key!r} to {dag_namespace!r} "
            f"({VARIABLE}): this rule does not act until it does")

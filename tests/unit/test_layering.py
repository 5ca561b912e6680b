"""House rules that import-linter cannot state: every module says its role, row locks are taken in one
module, `operator/` is never a Python package. (Which module may import which -- the layers, the
stored state, kopf and kubernetes only in `dagline.k8s`, no circles -- are the import-linter contracts in
pyproject.toml, checked by `lint-imports` in `make test`; a test here keeps them naming every module.)"""

from __future__ import annotations

import ast
import pathlib
import re
import tomllib

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "dagline"


def test_every_module_says_its_role():
    missing = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
               if "migrations/versions" not in str(p) and not ast.get_docstring(ast.parse(p.read_text()))]
    assert missing == []


def test_row_locks_are_taken_only_in_the_claims_module():
    """Every FOR UPDATE (SKIP LOCKED / NOWAIT) is a named function in `dagline.db.claims`, where its
    invariant, its ORDER BY and its caps can be read in one place."""
    claims = SRC / "db" / "claims.py"
    offenders = [
        f"{path.relative_to(SRC)}:{n}"
        for path in SRC.rglob("*.py") if path != claims
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "with_for_update" in line or "FOR UPDATE" in line.upper().replace("_", " ")
    ]
    assert offenders == []
    assert "with_for_update" in claims.read_text()


def test_operator_folder_is_not_a_package():
    assert not (SRC.parents[1] / "operator" / "__init__.py").exists()


def _contract(name_start: str) -> dict:
    config = tomllib.loads((SRC.parents[1] / "pyproject.toml").read_text())["tool"]["importlinter"]
    return next(c for c in config["contracts"] if c["name"].startswith(name_start))


def test_the_import_contracts_name_every_module():
    """A layers or forbidden contract says nothing about a module it does not name: a new top-level
    module must be placed in the layers, and is then held to the kopf/kubernetes rule too."""
    top_level = {f"dagline.{p.name.removesuffix('.py')}" for p in SRC.iterdir()
                 if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").exists()}
    layered = {name for layer in _contract("Layers")["layers"] for name in re.split(r"[|:]", layer)}
    assert top_level == {name.strip() for name in layered}
    assert set(_contract("Only dagline.k8s imports kopf")["source_modules"]) == top_level - {"dagline.k8s"}


def test_the_limits_module_is_the_lowest_layer():
    """`dagline.limits` is imported by every layer (the loaders, the CLI, the scheduler's render budget):
    it is the bottom layer of the contracts and imports nothing of dagline, so it can never close a cycle."""
    assert _contract("Layers")["layers"][-1] == "dagline.limits"
    tree = ast.parse((SRC / "limits.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert {name for name in imported if name.startswith("dagline")} == set()


_BUILDERS = {"select", "insert", "update", "delete", "text"}


def _statements_built(path: pathlib.Path) -> list[str]:
    """`name:line` of each call of a statement builder imported from sqlalchemy (under any alias, or as
    an attribute of an imported sqlalchemy module)."""
    tree = ast.parse(path.read_text())
    builders, modules = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sqlalchemy":
            builders |= {a.asname or a.name for a in node.names if a.name in _BUILDERS}
            modules |= {a.asname or a.name for a in node.names if a.name not in _BUILDERS}
        elif isinstance(node, ast.Import):
            modules |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] == "sqlalchemy"}
    return [f"{ast.unparse(node.func)}:{node.lineno}" for node in ast.walk(tree) if isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Name) and node.func.id in builders)
        or (isinstance(node.func, ast.Attribute) and node.func.attr in _BUILDERS
            and isinstance(node.func.value, ast.Name) and node.func.value.id in modules))]


def test_the_scheduler_and_the_operator_build_no_sql():
    """Every statement is a named function of `dagline.store` (the caller owning the transaction) or
    `dagline.db` (row locks, compare-and-sets): the scheduler and the operator only call them. (The
    import contract "The scheduler and the operator build no SQL" forbids them the tables, but cannot
    tell `from sqlalchemy import select` from `from sqlalchemy.engine import Connection`: this can.)"""
    built = {str(path.relative_to(SRC)): found
             for package in ("scheduler", "k8s") for path in sorted((SRC / package).rglob("*.py"))
             if (found := _statements_built(path))}
    assert built == {}
